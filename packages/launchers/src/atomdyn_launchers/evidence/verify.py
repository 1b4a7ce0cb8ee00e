"""Verify a run directory (judge its gates now) or a collected evidence directory (judge it again).

Evidence is never taken at its word: every gate is recomputed from its collected data (``data/``), the
result is compared with what summary.json and summary.md say, the excerpts and pictures are drawn again from
``data/`` and compared byte for byte, every file's sha256 is checked against the summary's list, the
directory holds only the files collect writes (by a fixed list: no link, no special file, no file of a role
the run does not have), its name is the run id, and every text file is checked to be sanitized. Any edit,
truncation or replaced byte fails, naming the file; a summary that contradicts its data fails, naming the
claim. With ``signers``, the signature collect made (signature.py) must verify against one of their keys.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.sanitize import sanitize
from atomdyn_launchers.contract.accuracy import ACCURACY_DIR, ITEMS_FILE
from atomdyn_launchers.contract.answers import ANSWER_FILE, ANSWERS_DIR, REFERENCE_FILE
from atomdyn_launchers.contract.reference_answers import REFERENCE_ANSWER_FILES
from atomdyn_launchers.contract.rundir import READY_METRICS_DIR
from atomdyn_launchers.evidence import pictures, signature
from atomdyn_launchers.evidence.data import (
    ACCURACY_JSON,
    DATA,
    RUN_FILES,
    CollectError,
    check_run_dir,
    kind_of,
)
from atomdyn_launchers.evidence.gates import GateResult, evaluate, failed_count, overall
from atomdyn_launchers.evidence.jsonfile import read_json, read_whole_text
from atomdyn_launchers.evidence.signals import Signals, collect_signals
from atomdyn_launchers.evidence.summary import (
    SAFE_RUN_ID,
    SCHEMA_VERSION,
    excerpts,
    judged_summary,
    markdown,
    platform_contradiction,
    run_platform,
    sha256_file,
    verdict_words,
)

# summary.json keys written by collect that the data does not decide
_NOT_JUDGED = frozenset({"excerpts", "pictures", "files", "collection_notes"})
# The directories collect writes, and in data/ the ones whose files are named after a role of the run.
_ROLE_DIRS = ("metrics", READY_METRICS_DIR, "logs", "fingerprints", "doctor")
_DIRS = frozenset({DATA, "excerpts", *(f"{DATA}/{d}" for d in (*_ROLE_DIRS, ANSWERS_DIR, ACCURACY_DIR))})
_ROLE_FILES = {
    "metrics": ".prom",
    READY_METRICS_DIR: ".prom",
    "logs": "",
    "fingerprints": ".json",
    "doctor": ".json",
}
_UNSIGNED = (
    "  unsigned: this shows that the verdict follows from data/, not that data/ is what the run wrote "
    "(docs/run-directory.md)"
)


@dataclass
class Verdict:
    ok: bool  # the run passed and its evidence is intact
    lines: list[str] = field(default_factory=list)
    intact: bool = True  # the evidence is what was collected, and says what its data says

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _table(results: list[GateResult]) -> list[str]:
    width = max((len(r.id) for r in results), default=4)
    out = []
    for r in results:
        value = "no data" if r.value is None else repr(r.value)
        line = f"{r.verdict.upper():4}  {r.id:<{width}}  {value} {r.expect}"
        out.append(line + (f"  <- {r.reason}" if r.verdict == "fail" else ""))
    return out


def verify_run(run_dir: Path) -> Verdict:
    """Judge a run directory now: its gates, and what collect would refuse (a link or special file among the
    files read, a platform its engine contradicts)."""
    try:
        check_run_dir(run_dir)
    except CollectError as exc:
        return Verdict(False, [f"run {run_dir.name}: refused: {exc}"])
    signals = collect_signals(run_dir)
    results = evaluate(signals)
    verdict = overall(results)
    failed, judged = failed_count(results)
    words = (
        f"{judged - failed} of {judged} gates passed"
        if verdict == "pass"
        else f"{failed} of {judged} gates failed"
    )
    lines = [
        f"run {signals.get('run.id')} ({signals.get('run.kind')}, {signals.get('run.engine')}): {verdict} ({words})"
    ]
    lines += _table(results)
    lines += [f"note: {p}" for p in signals.problems]
    platform, source = run_platform(run_dir, signals)
    contradiction = platform_contradiction(signals, platform, source)
    if contradiction is not None:
        lines.append(f"FAIL  platform: {contradiction}")
    return Verdict(verdict == "pass" and contradiction is None, lines)


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def _claims(summary: dict[str, Any], judged: dict[str, Any]) -> list[str]:
    """Every place where summary.json says something its data does not."""
    problems = []
    for key in sorted(set(summary) | set(judged)):
        if key in _NOT_JUDGED or summary.get(key) == judged.get(key):
            continue
        if key == "gates" and isinstance(summary.get(key), list):
            claimed = {g.get("id"): g for g in summary[key] if isinstance(g, dict)}
            differ = [
                f"summary.json: gate {gate['id']} says {_short(claimed.get(gate['id']))}; "
                f"the collected data gives {_short(gate)}"
                for gate in judged[key]
                if claimed.get(gate["id"]) != gate
            ]
            extra = set(claimed) - {g["id"] for g in judged[key]}
            differ += [
                f"summary.json: gate {g} is not one the collected data judges" for g in sorted(extra, key=str)
            ]
            problems += differ or [
                "summary.json: the gates are listed in another order than the data judges them"
            ]
            continue
        problems.append(
            f"summary.json: {key} is {_short(summary.get(key))}; the collected data gives {_short(judged.get(key))}"
        )
    return problems


def _walk(evidence_dir: Path) -> tuple[list[str], list[str]]:
    """The regular files of an evidence directory (relative paths), and what is there that collect never
    writes: a link, a FIFO or other special file, a directory of another name. Nothing is followed or opened."""
    files: list[str] = []
    problems: list[str] = []

    def visit(rel_dir: str) -> None:
        with os.scandir(evidence_dir / rel_dir) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode) and rel in _DIRS:
                    visit(rel)
                elif stat.S_ISDIR(mode):
                    problems.append(f"{rel}/ is not a directory collect writes")
                elif (why := kind_of(mode)) is not None:
                    problems.append(f"{rel} {why}")
                else:
                    files.append(rel)

    visit("")
    return files, problems


def _roles(signals: Signals) -> set[str]:
    """The roles of the run: its jobs in run.json, and the roles its timeline names."""
    jobs = signals.run.get("jobs") if isinstance(signals.run, dict) else None
    roles = {str(j.get("role")) for j in jobs or [] if isinstance(j, dict) and j.get("role")}
    return roles | {str(e["role"]) for e in signals.events if e.get("role")}


def _not_collected(rel: str, expected_top: set[str], roles: set[str]) -> str | None:
    """Why ``rel`` is not a file collect writes for this run, or None."""
    parts = rel.split("/")
    if len(parts) == 1:
        return None if rel in expected_top else "(not in the fixed list: summary, pictures, excerpts, data)"
    if parts[0] == "excerpts":
        return None if rel in expected_top else "(no gate links it)"
    if len(parts) == 2:
        return None if parts[1] in RUN_FILES else "(not in the fixed list of data/ files)"
    sub, name = parts[1], parts[2]
    if sub == ACCURACY_DIR:
        return None if name in (ITEMS_FILE, *ACCURACY_JSON) else "(not an accuracy file)"
    if sub == ANSWERS_DIR:
        return (
            None if name in (ANSWER_FILE, REFERENCE_FILE, *REFERENCE_ANSWER_FILES) else "(not an answer file)"
        )
    suffix = _ROLE_FILES[sub]
    stem = name.removesuffix(suffix) if suffix and name.endswith(suffix) else (None if suffix else name)
    if stem is None or name.startswith("."):
        return f"(not a <role>{suffix or '.*'} file)"
    role = stem if sub in ("fingerprints", "doctor") else stem.split(".", 1)[0]
    if sub == "logs" and role == "etcd":  # the run-owned etcd's logs/etcd.log and logs/etcd.slurm.out
        return None
    return None if role in roles else f"(the run has no role {role!r})"


def _files(evidence_dir: Path, summary: dict[str, Any], files: list[str]) -> list[str]:
    listed = summary.get("files")
    if not isinstance(listed, dict) or not listed:
        return ["summary.json lists no file digests"]
    problems = []
    present = {
        rel: sha256_file(evidence_dir / rel)
        for rel in files
        if rel not in ("summary.json", signature.SIGNATURE)
    }
    for rel, digest in sorted(listed.items()):
        if rel not in present:
            problems.append(f"{rel} is missing")
        elif present[rel] != digest:
            problems.append(
                f"{rel} was changed after collection (its sha256 is not the one summary.json lists)"
            )
    problems += [f"{rel} is not part of the collected evidence (not in summary.json's list)"
                 for rel in sorted(set(present) - set(listed))]  # fmt: skip
    for rel in [*summary.get("excerpts", []), *summary.get("pictures", []), "summary.md"]:
        if rel not in listed:
            problems.append(f"{rel} has no digest in summary.json")
    return problems


def _pictures(evidence_dir: Path, summary: dict[str, Any], signals: Signals) -> list[str]:
    """Each picture drawn again from data/ and compared byte for byte (drawing is deterministic: no date or
    version in the file). Evidence collected without matplotlib lists none, and none may be there."""
    claimed = summary.get("pictures")
    if not claimed:
        return []
    why = pictures.unavailable()
    if why is not None:
        return [f"the pictures cannot be drawn again to compare: {why}"]
    with tempfile.TemporaryDirectory(prefix="atomdyn-pictures.") as tmp:
        drawn = pictures.draw(signals, Path(tmp))
        problems = []
        if claimed != drawn:
            problems.append(f"summary.json: pictures is {_short(claimed)}; {DATA}/ draws {_short(drawn)}")
        for name in drawn:
            kept = evidence_dir / name
            if kept.is_file() and kept.read_bytes() != (Path(tmp) / name).read_bytes():
                problems.append(f"{name} is not the picture {DATA}/ draws (matplotlib {pictures.version()})")
    return problems


def _excerpts(
    evidence_dir: Path, summary: dict[str, Any], judged: dict[str, Any], signals: Signals
) -> list[str]:
    """Each excerpt is drawn again from data/ and compared: an edit shows even where its digest was updated."""
    drawn = excerpts(judged, signals)
    problems = []
    if summary.get("excerpts") != sorted(drawn):
        problems.append(
            f"summary.json: excerpts is {_short(summary.get('excerpts'))}; the gates link {_short(sorted(drawn))}"
        )
    for rel, text in drawn.items():
        try:
            kept = (evidence_dir / rel).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # missing or binary: the digest check names it
        if kept != text:
            problems.append(f"{rel} does not show what {DATA}/ shows")
    return problems


def verify_evidence(evidence_dir: Path, signers: Path | None = None) -> Verdict:
    """Recompute the gates from data/, compare with the summary, draw excerpts and pictures again, check the
    directory against the files collect writes, every file's digest and sanitization; with ``signers``, the
    signature."""
    name = evidence_dir.name
    files, problems = _walk(evidence_dir)
    if problems:  # nothing of a directory holding links or special files is read
        lines = [f"evidence {name}: fail (the evidence holds what collect never writes)"]
        return Verdict(False, lines + [f"  {p}" for p in problems], intact=False)
    try:
        summary = read_json(evidence_dir / "summary.json", expect=None)
    except (OSError, ValueError) as exc:
        return Verdict(False, [f"evidence {name}: summary.json unreadable: {exc}"], intact=False)
    if not isinstance(summary, dict):
        return Verdict(False, [f"evidence {name}: summary.json is not a JSON object"], intact=False)
    if summary.get("schema_version") != SCHEMA_VERSION:
        return Verdict(
            False,
            [f"evidence {name}: summary.json is schema_version {summary.get('schema_version')!r}, not "
             f"{SCHEMA_VERSION}: it keeps no data to recompute its gates from; collect the run again"],
            intact=False,
        )  # fmt: skip
    problems = _files(evidence_dir, summary, files)
    data = evidence_dir / DATA
    if not data.is_dir():
        problems.append(f"{DATA}/ is missing: the gates cannot be recomputed")
        judged: dict[str, Any] = {}
    else:
        judged, signals = judged_summary(data, name)
        if judged.get("run_id") != name or not SAFE_RUN_ID.match(name):
            problems.append(
                f"the directory is named {name}; its run is {judged.get('run_id')} ({DATA}/run.json)"
            )
        contradiction = platform_contradiction(
            signals, judged["platform"], judged["platform_source"], where=f"{DATA}/run.json"
        )
        if contradiction is not None:
            problems.append(contradiction)
        problems += _claims(summary, judged)
        problems += _excerpts(evidence_dir, summary, judged, signals)
        problems += _pictures(evidence_dir, summary, signals)
        expected_top = {"summary.json", "summary.md", signature.SIGNATURE, *excerpts(judged, signals)}
        expected_top |= {p for p in summary.get("pictures") or [] if p in pictures.NAMES}
        roles = _roles(signals)
        for rel in files:
            why = _not_collected(rel, expected_top, roles)
            if why is not None:
                problems.append(f"{rel} is not a file collect writes {why}")
    md = evidence_dir / "summary.md"
    try:
        if read_whole_text(md, "summary.md") != markdown(summary):
            problems.append("summary.md does not say what summary.json says")
    except (OSError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        problems.append(f"summary.md cannot be compared with summary.json: {exc}")
    for rel in files:
        if rel.endswith(".png") or rel == signature.SIGNATURE:  # no text the run supplied
            continue
        try:
            text = read_whole_text(evidence_dir / rel, errors="replace")
        except (OSError, ValueError) as exc:
            problems.append(f"{rel} cannot be read: {exc}")
            continue
        if sanitize(text) != text:
            problems.append(f"{rel} is not sanitized")
    signed_line = _UNSIGNED
    if signers is not None:
        good, who = signature.check(evidence_dir, signers)
        if good:
            signed_line = f"  signed by {who} ({signers}): the bundle is the one that key's holder collected"
        else:
            problems.append(who)
    elif (evidence_dir / signature.SIGNATURE).is_file():
        # Nothing was checked, so nothing here says the bundle is signed: the file may be anything.
        signed_line = (
            f"  a signature file is present ({signature.SIGNATURE}) and was not checked: pass --signer KEYS "
            "(evidence/allowed_signers) to check it; until then this is what an unsigned bundle shows"
        )
    if problems:
        lines = [f"evidence {name}: fail (the evidence is not what was collected or contradicts its data)"]
        return Verdict(False, lines + [f"  {p}" for p in problems], intact=False)
    verdict = judged["verdict"]
    lines = [
        f"evidence {name}: {verdict} ({verdict_words(judged)}); recomputed from {DATA}/, every file intact"
    ]
    lines += [
        f"  gate {g['id']}: {g['verdict']}: {g['reason']}" for g in judged["gates"] if g["verdict"] == "fail"
    ]
    return Verdict(verdict == "pass", [*lines, signed_line], intact=True)


def verify_path(path: Path, signers: Path | None = None) -> Verdict:
    path = path.resolve()  # "." has no name; the evidence directory's name is the run id
    if not path.is_dir():
        return Verdict(False, [f"{path} is not a directory"], intact=False)
    if (path / "summary.json").exists():
        return verify_evidence(path, signers)
    if signers is not None:
        return Verdict(
            False, [f"{path}: --signer checks collected evidence; a run directory has no signature"]
        )
    return verify_run(path)
