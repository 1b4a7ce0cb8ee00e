"""Verify a run directory (judge its gates now) or a collected evidence directory (judge it again).

Evidence is never taken at its word: every gate is recomputed from its collected data (``data/``), the
result is compared with what summary.json and summary.md say, every file's sha256 is checked against the
summary's list, and every text file is checked to be sanitized. Any edit, truncation or replaced byte fails,
naming the file; a summary that contradicts its data fails, naming the claim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.sanitize import sanitize
from atomdyn_launchers.evidence.data import DATA
from atomdyn_launchers.evidence.gates import GateResult, evaluate, failed_count, overall
from atomdyn_launchers.evidence.signals import Signals, collect_signals
from atomdyn_launchers.evidence.summary import (
    SCHEMA_VERSION,
    excerpts,
    file_digests,
    judged_summary,
    markdown,
    verdict_words,
)

# summary.json keys written by collect that the data does not decide
_NOT_JUDGED = frozenset({"excerpts", "pictures", "files", "collection_notes"})


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
    return Verdict(verdict == "pass", lines)


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


def _files(evidence_dir: Path, summary: dict[str, Any]) -> list[str]:
    listed = summary.get("files")
    if not isinstance(listed, dict) or not listed:
        return ["summary.json lists no file digests"]
    problems = []
    present = file_digests(evidence_dir)
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


def verify_evidence(evidence_dir: Path) -> Verdict:
    """Recompute the gates from data/, compare with the summary, check every file's digest and sanitization."""
    name = evidence_dir.name
    try:
        summary = json.loads((evidence_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
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
    problems = _files(evidence_dir, summary)
    data = evidence_dir / DATA
    if not data.is_dir():
        problems.append(f"{DATA}/ is missing: the gates cannot be recomputed")
        judged: dict[str, Any] = {}
    else:
        judged, signals = judged_summary(data, name)
        problems += _claims(summary, judged)
        problems += _excerpts(evidence_dir, summary, judged, signals)
    md = evidence_dir / "summary.md"
    try:
        if md.read_text(encoding="utf-8") != markdown(summary):
            problems.append("summary.md does not say what summary.json says")
    except (OSError, UnicodeDecodeError, KeyError, TypeError) as exc:
        problems.append(f"summary.md cannot be compared with summary.json: {exc}")
    for path in sorted(
        p
        for p in evidence_dir.rglob("*")
        if p.is_file() and p.suffix != ".png"  # every text the evidence holds; pictures hold none
    ):
        text = path.read_text(encoding="utf-8", errors="replace")
        if sanitize(text) != text:
            problems.append(f"{path.relative_to(evidence_dir)} is not sanitized")
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
    return Verdict(verdict == "pass", lines, intact=True)


def verify_path(path: Path) -> Verdict:
    path = path.resolve()  # "." has no name; the evidence directory's name is the run id
    if not path.is_dir():
        return Verdict(False, [f"{path} is not a directory"], intact=False)
    if (path / "summary.json").exists():
        return verify_evidence(path)
    return verify_run(path)
