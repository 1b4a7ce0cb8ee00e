"""Why a failed run failed, in its evidence bundle: the diagnosis (docs/diagnose.md) as summary.json keeps it and
summary.md shows it.

It is judged from the sanitized ``data/`` alone, as the gates are, so ``invoke evidence.verify`` recomputes it:
the diagnosis the run recorded in its run.json (from every line of its logs, before the evidence kept some of
them), else, for a failed run without one (a launcher that passed the run whose gates failed), the diagnosis of
``data/`` with the failed gates. A run that passed has none. Only what names no place on the collecting machine
is kept (no target path, no file count), so the collect and a verify elsewhere give the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.evidence import mdtext
from atomdyn_launchers.evidence.gates import GateResult
from atomdyn_launchers.evidence.signals import Signals

# What summary.json keeps of a finding, and how many summary.md shows.
FINDING_KEYS = ("id", "component", "causal", "file", "line_no", "line", "cause", "fix", "rung_command")
SHOWN = 5
ERROR_LINES_SHOWN = 5


def judged_diagnosis(data: Path, signals: Signals, results: Sequence[GateResult]) -> dict[str, Any] | None:
    """The bundle's diagnosis from ``data/`` (None for a run that passed, launcher and gates)."""
    failed_gates = [(r.id, r.reason) for r in results if r.verdict == "fail"]
    run = signals.run if isinstance(signals.run, dict) else {}
    launcher_failed = run.get("result") not in (None, "pass")
    if not launcher_failed and not failed_gates:
        return None
    recorded = run.get("diagnosis")
    source = "run.json"  # the run's own record, from every line of its logs
    if not isinstance(recorded, dict) or not isinstance(recorded.get("findings"), list):
        try:
            recorded = diagnose_run(data, failed_gates=failed_gates).to_json(limit=10)
        except Exception:  # an aid, as in the record stage: the bundle is collected regardless
            return None
        source = "data/"  # what the evidence kept, with the failed gates
    # run.json is the run's word: each value is kept as the type summary.md renders, whatever it holds
    findings = [_finding(f) for f in recorded["findings"] if isinstance(f, dict)]
    raw_lines = recorded.get("error_lines")
    error_lines = (
        {str(name): [str(line) for line in shown][:ERROR_LINES_SHOWN]
         for name, shown in raw_lines.items() if isinstance(shown, list)}
        if isinstance(raw_lines, dict) and not findings
        else {}
    )  # fmt: skip
    left_out = recorded.get("findings_left_out")
    return {
        "source": source,
        "first": findings[0]["id"] if findings else None,
        "findings": findings,
        "findings_left_out": left_out if isinstance(left_out, int) and not isinstance(left_out, bool) else 0,
        "error_lines": error_lines,
        "rerun": _text(recorded.get("rerun")),
    }


def _text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _finding(found: dict[str, Any]) -> dict[str, Any]:
    """A finding's fields summary.json keeps: line_no an int or None, causal a bool, the rest text."""
    kept: dict[str, Any] = {key: _text(found.get(key)) for key in FINDING_KEYS}
    line_no = found.get("line_no")
    kept["line_no"] = line_no if isinstance(line_no, int) and not isinstance(line_no, bool) else None
    causal = found.get("causal")
    kept["causal"] = causal if isinstance(causal, bool) else True
    return kept


def markdown_lines(diagnosis: dict[str, Any] | None) -> list[str]:
    """summary.md's section ``## Diagnosis`` (nothing for a run that passed): the first cause first."""
    if not diagnosis:
        return []
    t, c = mdtext.text, mdtext.code
    findings = diagnosis.get("findings") or []
    where = (
        "the run's own record (run.json)" if diagnosis.get("source") == "run.json" else "the collected data"
    )
    out = ["", "## Diagnosis", ""]
    if not findings:
        out.append(f"No known signature ({t(where)}); the first error lines of each log:")
        out.append("")
        for name, lines in sorted((diagnosis.get("error_lines") or {}).items()):
            out.append(f"- {c(name, in_table=False)}")
            out += [f"  - {c(line, in_table=False)}" for line in lines[:ERROR_LINES_SHOWN]]
        if not diagnosis.get("error_lines"):
            out.append("- (no log holds an error line)")
    else:
        total = len(findings) + int(diagnosis.get("findings_left_out") or 0)  # an int: judged_diagnosis
        out.append(
            f"First cause: {c(diagnosis['first'], in_table=False)}, from {t(where)}; {total} known signature(s), "
            "the first cause first (`invoke diagnose` on this directory lists every one it can read):"
        )
        out += ["", "| # | signature | where | line | cause | fix |", "|---|---|---|---|---|---|"]
        for number, found in enumerate(findings[:SHOWN], 1):
            place = f"{found.get('file')}" + (
                f":{found['line_no']}" if found.get("line_no") is not None else ""
            )
            kind = "" if found.get("causal", True) else " (a symptom)"
            out.append(
                f"| {number} | {c(found.get('id'))}{kind} | {c(place)} | {c(found.get('line'))} | "
                f"{t(found.get('cause'))} | {t(found.get('fix'))} |"
            )
        if len(findings) > SHOWN:
            out.append("")
            out.append(f"{total - SHOWN} more in `summary.json`.")
    if diagnosis.get("rerun"):
        out += ["", f"Rerun: {c(diagnosis['rerun'], in_table=False)}"]
    return out
