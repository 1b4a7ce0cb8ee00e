"""Verify a run directory (judge its gates now) or a collected evidence directory (check what it claims)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_core.sanitize import sanitize
from atomdyn_launchers.evidence.gates import GateResult, evaluate, overall
from atomdyn_launchers.evidence.signals import collect_signals


@dataclass
class Verdict:
    ok: bool
    lines: list[str] = field(default_factory=list)

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
    lines = [
        f"run {signals.get('run.id')} ({signals.get('run.kind')}, {signals.get('run.engine')}): {verdict}"
    ]
    lines += _table(results)
    lines += [f"note: {p}" for p in signals.problems]
    return Verdict(verdict == "pass", lines)


def verify_evidence(evidence_dir: Path) -> Verdict:
    """The summary says pass, every gate passed or did not apply, its files exist, and nothing leaks."""
    problems: list[str] = []
    try:
        summary = json.loads((evidence_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return Verdict(False, [f"evidence {evidence_dir.name}: summary.json unreadable: {exc}"])
    if not isinstance(summary, dict) or summary.get("schema_version") != 1:
        return Verdict(False, [f"evidence {evidence_dir.name}: summary.json is not schema_version 1"])
    if summary.get("verdict") != "pass":
        problems.append(f"verdict is {summary.get('verdict')!r}")
    for gate in summary.get("gates", []):
        if gate.get("verdict") not in ("pass", "n/a"):
            problems.append(f"gate {gate.get('id')}: {gate.get('verdict')}: {gate.get('reason')}")
    for rel in [*summary.get("excerpts", []), *summary.get("pictures", []), "summary.md"]:
        if not (evidence_dir / rel).is_file():
            problems.append(f"{rel} is missing")
    for path in sorted(p for p in evidence_dir.rglob("*") if p.suffix in (".json", ".md", ".txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if sanitize(text) != text:
            problems.append(f"{path.relative_to(evidence_dir)} is not sanitized")
    lines = [f"evidence {evidence_dir.name}: {'pass' if not problems else 'fail'}"]
    lines += [f"  {p}" for p in problems]
    return Verdict(not problems, lines)


def verify_path(path: Path) -> Verdict:
    if not path.is_dir():
        return Verdict(False, [f"{path} is not a directory"])
    if (path / "summary.json").exists():
        return verify_evidence(path)
    return verify_run(path)
