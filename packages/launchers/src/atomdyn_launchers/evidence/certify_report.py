"""A bring-up ladder's report as evidence: rendered from ``certify.json`` alone, so that ``evidence.verify`` can
recompute it. The verdict line says "certified" only when every rung of the ladder is recorded and each passed
(or was reused from a climb with the same key, or was not needed for the runtime)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from atomdyn_core.sanitize import sanitize
from atomdyn_launchers.contract.ladder import EARLIER_LADDERS, RUNG_NAMES
from atomdyn_launchers.evidence import mdtext
from atomdyn_launchers.evidence.jsonfile import read_json, read_whole_text
from atomdyn_launchers.evidence.verify import Verdict

# The ladder's rungs in order (certify/rungs.py's table must name the same).
LADDER = RUNG_NAMES  # the rungs a certified report names, in order (contract/ladder.py)
PASSING = ("pass", "not needed", "reused")
STATE_FILE = "certify.json"
REPORT_FILE = "README.md"
BUNDLE_PREFIX = "certify-"


def certified(state: dict[str, Any]) -> bool:
    rungs = state.get("rungs") or []
    names = [r.get("name") for r in rungs]
    ladders = (list(LADDER), *(list(earlier) for earlier in EARLIER_LADDERS))
    return names in ladders and all(r.get("verdict") in PASSING for r in rungs)


def verdict_line(state: dict[str, Any]) -> str:
    rungs = state.get("rungs") or []
    if certified(state):
        skipped = [str(r["number"]) for r in rungs if r["verdict"] == "not needed"]
        platforms = sorted({str(r["platform"]) for r in rungs if not str(r["platform"]).startswith("n/a")})
        where = f" on {'; '.join(platforms)}" if platforms else ""
        note = f" (rung(s) {', '.join(skipped)} not needed here)" if skipped else ""
        return f"certified{where}{note}"
    if state.get("stopped_at"):
        return f"not certified: stopped at rung {state['stopped_at']}"
    return "not certified: the climb did not finish"


def _cell(text: object) -> str:
    """A table cell of run-supplied text: one line, inert (it adds no row, link or HTML)."""
    return mdtext.text(" ".join(str(text).split()))


def _code(text: object) -> str:
    """A value shown as code: one span whatever backticks it holds, on one line."""
    return mdtext.code(" ".join(str(text).split()))


def render(state: dict[str, Any]) -> str:
    """README.md of a climb: a row per rung, the key, and the verdict line."""
    key = state.get("key") or {}
    recipe = f", recipe {_code(state['recipe'])}" if state.get("recipe") else ""
    lines = [
        f"# Bring-up ladder {_cell(state.get('certify_id'))}",
        "",
        f"Engine {_code(state.get('engine'))}, model {_code(state.get('model'))}{recipe}; lock "
        f"{_code(key.get('lock_digest', 'unknown'))}; config {_code(key.get('config_digest'))}.",
        "",
        "| rung | verdict | seconds | platform | what it proved | detail |",
        "|---|---|---|---|---|---|",
    ]
    for r in state.get("rungs") or []:
        cells = [f"{r['number']} {r['name']}", r["verdict"], f"{r['seconds']:g}", r["platform"], r["proves"],
                 r["detail"]]  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    images = key.get("image_ids") or {}
    if images:
        shown = "; ".join(
            f"{_code(t)} {_cell(', '.join(sorted(set(b.values()))))}" for t, b in images.items()
        )
        lines += ["", f"Images: {shown}"]
    lines += _diagnosis_lines(state)
    lines += ["", f"**{_cell(verdict_line(state))}** ({state.get('elapsed_s', 0):g} s)"]
    if state.get("rerun"):
        lines.append(f"Rerun: {_code(state['rerun'])}")
    return "\n".join(lines) + "\n"


def _diagnosis_lines(state: dict[str, Any]) -> list[str]:
    """For a failed rung with a diagnosis (``invoke diagnose`` of its run), the first finding: where, why, fix."""
    lines: list[str] = []
    for r in state.get("rungs") or []:
        diagnosis = r.get("diagnosis")
        if r.get("verdict") != "fail" or not isinstance(diagnosis, dict):
            continue
        findings = diagnosis.get("findings") or []
        if not findings or not isinstance(findings[0], dict):
            command = _code(f"invoke diagnose {diagnosis.get('target')}")
            lines += ["", f"Diagnosis of rung {_cell(r.get('number'))}: no known signature ({command} shows the "
                      "first error lines of each log)"]  # fmt: skip
            continue
        first = findings[0]
        where = f"{first.get('file')}:{first.get('line_no')}" if first.get("line_no") else first.get("file")
        lines += ["", f"Diagnosis of rung {_cell(r.get('number'))}: {_code(first.get('id'))} ({_code(where)}): "
                  f"{_cell(first.get('cause'))} Fix: {_cell(first.get('fix'))}"]  # fmt: skip
    return lines


def published_texts(state: dict[str, Any]) -> tuple[str, str]:
    """(certify.json, README.md) as published: sanitized, the README rendered from the sanitized state."""
    state = {**state, "certified": certified(state), "verdict": verdict_line(state)}
    state_text = sanitize(json.dumps(state, indent=2) + "\n")
    return state_text, sanitize(render(json.loads(state_text)))


def is_certify_bundle(path: Path) -> bool:
    """A published climb (certify-<id>/ with certify.json), not a run's evidence or a run directory."""
    return path.is_dir() and path.name.startswith(BUNDLE_PREFIX) and (path / STATE_FILE).exists()


def verify_certify(path: Path) -> Verdict:
    """A published climb: exactly its two files (regular, no links), named after its id, its README and verdict
    what its certify.json gives."""
    problems: list[str] = []
    entries = sorted(p.name for p in path.iterdir())
    if entries != sorted((REPORT_FILE, STATE_FILE)):
        problems.append(
            f"{path}: holds {', '.join(entries)}; a published climb holds {REPORT_FILE} and {STATE_FILE}"
        )
    for name in (REPORT_FILE, STATE_FILE):
        mode = (path / name).lstat().st_mode if (path / name).exists() or (path / name).is_symlink() else 0
        if mode and not stat.S_ISREG(mode):
            problems.append(f"{path / name}: not a regular file (a link or a special file)")
    if problems:
        return Verdict(False, problems, intact=False)
    try:
        state = read_json(path / STATE_FILE, expect=None)
        readme = read_whole_text(path / REPORT_FILE, "report")
    except (OSError, ValueError) as exc:
        return Verdict(False, [f"{path / STATE_FILE}: unreadable: {exc}"], intact=False)
    if not isinstance(state, dict):
        return Verdict(False, [f"{path / STATE_FILE}: not an object"], intact=False)
    if path.name != BUNDLE_PREFIX + str(state.get("certify_id")):
        problems.append(f"{path}: the directory is not named after the climb {state.get('certify_id')!r}")
    for field, value in (("certified", certified(state)), ("verdict", verdict_line(state))):
        if state.get(field) != value:
            problems.append(
                f"{path / STATE_FILE}: {field} says {state.get(field)!r}; its rungs give {value!r}"
            )
    if readme != published_texts({k: v for k, v in state.items()})[1]:
        problems.append(f"{path / REPORT_FILE}: differs from the report its {STATE_FILE} renders")
    if problems:
        return Verdict(False, problems, intact=False)
    line = verdict_line(state)
    return Verdict(certified(state), [f"{path.name}: {line}; every file intact"])
