"""Secrets by shape through collect, sanitize and report (issue 36, item 4): the held-out corpus of the core
sanitizer's tests (packages/core/tests/sanitize_corpus/shapes.txt) leaks nothing into a bundle, the measurement
data of keep-data.txt survives collect unchanged, and the second scan (detect-secrets) redacts at collect and
sanitize time and stops a report that would publish a finding."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from atomdyn_launchers.evidence import cli, results, secondscan
from atomdyn_launchers.evidence.summary import collect
from atomdyn_launchers.evidence.verify import verify_path

CORPUS = Path(__file__).resolve().parents[3] / "core" / "tests" / "sanitize_corpus"
_MARKED = re.compile(r"«([^»]*)»")
# Not a shape the sanitizer's own patterns know (a quoted hex string after a key that means nothing secret):
# detect-secrets' hex plugin is what finds it.
HEX_SECRET = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def _cases(name: str) -> list[str]:
    lines = (CORPUS / name).read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith(("#", "@known"))]


def _all_text(directory: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in directory.rglob("*") if p.is_file() and p.suffix != ".png"
    )


def _run_with(mocker_run: Path, values: dict[str, str], **record: str) -> Path:
    run = json.loads((mocker_run / "run.json").read_text())
    run["config"].update(values, PRIMARY_NODE="gpu-mi355x-017", DECODE_NODE="gpu-mi355x-018")
    run.update(record)
    (mocker_run / "run.json").write_text(json.dumps(run))
    return mocker_run


def test_the_held_out_corpus_leaks_nothing_through_collect_and_report(
    mocker_run: Path, tmp_path: Path
) -> None:
    cases = _cases("shapes.txt")
    assert len(cases) >= 40
    values = {f"NOTE_{i}": _MARKED.sub(r"\1", line) for i, line in enumerate(cases)}
    token = "pypi-AgEIcHlwaS5vcmcCJDRmNzA5YjUyLWE1YTEtNDZmZjk4"
    run = _run_with(mocker_run, values, model_profile=f"qwen-tiny {token}")
    out, summary = collect(run, tmp_path / "evidence")
    assert verify_path(out).intact
    readme = tmp_path / "README.md"
    # the README's own text is not the report's: a wheel's four-part version there stops nothing
    readme.write_text(
        f"# x\npatchelf-0.17.2.2-py3-none-any.whl\n{results.GLANCE_BEGIN}\n{results.GLANCE_END}\n"
    )
    results_md = tmp_path / "results" / "RESULTS.md"
    assert cli.report(tmp_path / "evidence", results_md, readme) == 0
    published = _all_text(out) + results_md.read_text() + readme.read_text()
    hidden = [value for line in cases for value in _MARKED.findall(line)]
    assert len(hidden) >= 40
    # as a whole word: a two-letter user ("ci") stands inside many words of the bundle
    leaked = [v for v in [*hidden, token] if re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", published)]
    assert not leaked
    assert "qwen-tiny" in summary["model_profile"]  # the profile's name stays readable


def test_measurement_data_survives_collect_unchanged(mocker_run: Path, tmp_path: Path) -> None:
    kept = _cases("keep-data.txt")
    values = {f"KEEP_{i}": line for i, line in enumerate(kept)}
    out, _ = collect(_run_with(mocker_run, values), tmp_path / "evidence")
    config = json.loads((out / "data" / "run.json").read_text())["config"]
    assert {k: config[k] for k in values} == values


def test_the_second_scan_redacts_at_collect_what_the_patterns_leave(mocker_run: Path, tmp_path: Path) -> None:
    out, summary = collect(_run_with(mocker_run, {"UPLOAD_RESPONSE": HEX_SECRET}), tmp_path / "evidence")
    assert HEX_SECRET not in _all_text(out)
    config = json.loads((out / "data" / "run.json").read_text())["config"]
    assert config["UPLOAD_RESPONSE"] == secondscan.REDACTED
    assert any("second secret scan" in note for note in summary["collection_notes"])
    assert verify_path(out).intact


def test_a_log_file_named_after_a_node_is_collected_under_its_placeholder(
    mocker_run: Path, tmp_path: Path
) -> None:
    logs = mocker_run / "logs"
    first = sorted(logs.iterdir())[0]
    named = logs / f"{first.stem}-gpu-mi355x-017{first.suffix}"
    first.rename(named)
    out, _ = collect(_run_with(mocker_run, {}), tmp_path / "evidence")
    names = [p.name for p in (out / "data" / "logs").iterdir()]
    assert not any("gpu-mi355x" in name for name in names), names
    assert verify_path(out).intact


def test_sanitize_runs_the_second_scan(tmp_path: Path) -> None:
    src = tmp_path / "upload.log"
    src.write_text(f'upload_response = "{HEX_SECRET}"\nrocm-smi version 6.4.1.1 ok\n')
    done = subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.evidence", "sanitize", str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert HEX_SECRET not in done.stdout
    assert done.stdout == f'upload_response = "{secondscan.REDACTED}"\nrocm-smi version 6.4.1.1 ok\n'


def test_report_refuses_to_publish_a_finding_of_the_second_scan(
    mocker_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    collect(mocker_run, tmp_path / "evidence")
    readme = tmp_path / "README.md"
    before = f"# x\n{results.GLANCE_BEGIN}\n{results.GLANCE_END}\n"
    readme.write_text(before)
    results_md = tmp_path / "RESULTS.md"
    entry = results._entry

    def leaky(summary: dict[str, object], link: str) -> str:  # a sanitizer that missed a form, modelled
        return entry(summary, link) + f'- upload: "{HEX_SECRET}"\n'

    monkeypatch.setattr(results, "_entry", leaky)
    assert cli.report(tmp_path / "evidence", results_md, readme) == 2
    err = capsys.readouterr().err
    assert "second secret scan" in err and f"{results_md}:" in err and "Hex High Entropy String" in err
    assert HEX_SECRET not in err
    assert not results_md.exists() and readme.read_text() == before


def test_the_held_out_corpus_leaks_nothing_through_evidence_sanitize(tmp_path: Path) -> None:
    cases = _cases("shapes.txt")
    src = tmp_path / "job.log"
    src.write_text("".join(_MARKED.sub(r"\1", line) + "\n" for line in cases))
    done = subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.evidence", "sanitize", str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    hidden = [value for line in cases for value in _MARKED.findall(line)]
    # the nodes in log file names are known only to a run's sanitizer (the collect test has them)
    hidden = [v for v in hidden if not v.startswith("gpu-mi355x")]
    leaked = [v for v in hidden if re.search(rf"(?<![\w-]){re.escape(v)}(?![\w-])", done.stdout)]
    assert not leaked


def test_measurement_data_survives_evidence_sanitize_unchanged(tmp_path: Path) -> None:
    kept = "".join(line + "\n" for line in _cases("keep-data.txt"))
    src = tmp_path / "bench.log"
    src.write_text(kept)
    done = subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.evidence", "sanitize", str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == kept


def test_an_image_digest_survives_the_second_scan_and_the_same_hex_elsewhere_does_not() -> None:
    # The held-out corpus's line (packages/core/tests/heldout_corpus): detect-secrets' hex-entropy plugin took
    # the digest for a secret, so collect and sanitize stripped what a worker's log says it pulled.
    digest = "bf0350b9730616e385249b31b5f069f71cb0bb34952f00f8887c0727b92319ae"
    assert secondscan.findings_in_text(f"pulling rocm/vllm@sha256:{digest}\n", "pull.log") == []
    for line in (f"token={digest}", f"export VAULT_TOKEN={digest}"):
        found = secondscan.findings_in_text(line + "\n", "env.log")
        assert [f.value for f in found] == [digest], (line, found)
