"""Match the catalog against a run directory or one log, and rank what it finds.

A run directory is read as docs/run-directory.md lays it out: run.json's headline (``failure``) and job
states, the timeline, and every regular file under ``logs/`` and ``nixl/`` (the probe's reports), each streamed
in bounded blocks (diagnose/lines.py): only lines holding an entry's needle, or an error word, reach Python.
Nothing is guessed: when no entry matches, the diagnosis says so and shows the first error lines of each log.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_launchers.diagnose.catalog import CATALOG, ERROR_NEEDLES, RUNG_COMMANDS, Entry
from atomdyn_launchers.diagnose.lines import BLOCK, numbered_lines

NO_SIGNATURE = "no known signature; the first error lines of each log:"
MAX_LINE = 400  # characters kept of a matched line
ERROR_LINES = 5  # first error lines kept per log, for the fallback
LOG_DIRS = ("logs", "nixl")  # the run directory's logs, and the NIXL probe's reports
MAX_FILES = 2000  # files read of a directory that is no run directory
RUN_FILES = ("run.json", "timeline.jsonl", "recipe.json")  # a run directory holds one from its start
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LOG_ENTRIES = tuple(e for e in CATALOG if e.signature.kind == "log")
_NEEDLES = tuple(dict.fromkeys(e.signature.needle.encode() for e in _LOG_ENTRIES))
# A line's own time, as the logs of a run write it (UTC on the nodes): ISO 8601 (Dynamo, Slurm, NIXL's Python),
# UCX's "[<epoch>.<us>]", glog's "E1204 18:28:22.536288" (NIXL's C++), vLLM's "12-01 12:46:25". Read as seconds
# within the year: enough to order the lines of one run.
_ISO_TIME = re.compile(r"\b\d{4}-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d(?:\.\d+)?)")
_UCX_TIME = re.compile(r"^\[(\d{9,10}\.\d+)\]")
_GLOG_TIME = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d(?:\.\d+)?)\b")
_VLLM_TIME = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
_KIND_COMMANDS = {"agg-single": "invoke agg.run --nodes 1", "agg-two": "invoke agg.run --nodes 2",
                  "disagg": "invoke disagg.run"}  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """One catalog entry seen: where first (file, line number, the line) and how many times."""

    entry: Entry
    file: str
    line_no: int | None  # None: not a line of a log (run.json's headline or job states, a gate, the timeline)
    line: str
    count: int
    order: int  # when it was first seen in the scan (ties among equal weights go to the earlier)
    at: float | None = None  # the line's own time (seconds within the year), when it carries one
    symptom: bool = False  # a cause's line that this run shows to be a consequence (see diagnose_run)

    @property
    def causal(self) -> bool:
        return self.entry.causal and not self.symptom

    def rank(self) -> tuple[int, int]:
        return (0 if self.causal else 1, self.entry.weight)

    @property
    def location(self) -> str:
        return self.file if self.line_no is None else f"{self.file}:{self.line_no}"

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {"id": e.id, "component": e.component, "causal": self.causal, "file": self.file,
                "line_no": self.line_no, "line": self.line, "count": self.count, "cause": e.cause, "fix": e.fix,
                "rung": e.rung, "rung_command": RUNG_COMMANDS[e.rung], "source": e.where}  # fmt: skip


@dataclass
class Diagnosis:
    target: str
    findings: list[Finding] = field(default_factory=list)
    error_lines: dict[str, list[str]] = field(default_factory=dict)  # file -> "N: line", for the fallback
    rerun: str = ""
    files_read: int = 0
    unreadable: list[str] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return bool(self.findings)

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def to_json(self, limit: int | None = None) -> dict[str, Any]:
        """The diagnosis as JSON (``limit``: at most that many findings, the rest counted)."""
        shown = self.findings if limit is None else self.findings[:limit]
        return {
            "target": self.target,
            "known": self.known,
            "first": self.first.entry.id if self.first else None,
            "findings": [f.to_json() for f in shown],
            "findings_left_out": len(self.findings) - len(shown),
            "error_lines": {} if self.known else self.error_lines,
            "rerun": self.rerun,
            "files_read": self.files_read,
            "unreadable": self.unreadable,
        }

    def text(self) -> str:
        lines = [f"diagnosis of {self.target}: {self.files_read} file(s) read"]
        if not self.known:
            lines.append(NO_SIGNATURE)
            for name, shown in self.error_lines.items():
                lines.append(f"  {name}:")
                lines += [f"    {line}" for line in shown]
            if not self.error_lines:
                lines.append("  (no log holds an error line)")
        else:
            lines.append(f"{len(self.findings)} known signature(s), the first cause first:")
            for number, found in enumerate(self.findings, 1):
                e = found.entry
                role = "" if found.causal else ", a symptom"
                times = f" ({found.count} times)" if found.count > 1 else ""
                lines += [
                    f"{number}. {e.id} ({e.component}{role}){times}",
                    f"   {found.location}: {found.line}",
                    f"   cause: {e.cause}",
                    f"   fix: {e.fix}",
                    f"   rung: {e.rung} ({RUNG_COMMANDS[e.rung]}); source: {e.where}",
                ]
        for name in self.unreadable:
            lines.append(f"not read: {name}")
        if self.rerun:
            lines.append(f"rerun: {self.rerun}")
        return "\n".join(lines) + "\n"


class _Matcher:
    """Findings in the order first seen, one per entry."""

    def __init__(self) -> None:
        self.found: dict[str, Finding] = {}
        self.order = 0

    def add(self, entry: Entry, file: str, line_no: int | None, line: str) -> None:
        seen = self.found.get(entry.id)
        if seen is not None:
            self.found[entry.id] = Finding(
                entry, seen.file, seen.line_no, seen.line, seen.count + 1, seen.order
            )
            return
        self.order += 1
        self.found[entry.id] = Finding(entry, file, line_no, line[:MAX_LINE], 1, self.order, line_time(line))

    def line(self, file: str, line_no: int | None, text: str) -> bool:
        """Match one log line against every log entry; True if one matched."""
        matched = False
        for entry in _LOG_ENTRIES:
            if entry.signature.needle in text and entry.regex.search(text):
                self.add(entry, file, line_no, text)
                matched = True
        return matched

    def ranked(self) -> list[Finding]:
        """Causes before symptoms, the more specific first; among equals, by the lines' own times when every
        one of them carries one (logs of different processes), else in the order read."""
        out: list[Finding] = []
        by_rank = sorted(self.found.values(), key=lambda f: (f.rank(), f.order))
        for _, group in itertools.groupby(by_rank, key=Finding.rank):
            members = list(group)
            if all(f.at is not None for f in members):
                members.sort(key=lambda f: (f.at, f.order))
            out += members
        return out


def line_time(line: str) -> float | None:
    """Seconds within the year of the time a log line carries (see _ISO_TIME and the others), or None."""
    if found := _UCX_TIME.match(line):
        moment = datetime.datetime.fromtimestamp(float(found.group(1)), tz=datetime.timezone.utc)
        fields = (
            moment.month,
            moment.day,
            moment.hour,
            moment.minute,
            moment.second + moment.microsecond / 1e6,
        )
    elif found := (_GLOG_TIME.match(line) or _ISO_TIME.search(line) or _VLLM_TIME.search(line)):
        fields = (int(found.group(1)), int(found.group(2)), int(found.group(3)), int(found.group(4)),
                  float(found.group(5)))  # fmt: skip
    else:
        return None
    month, day, hour, minute, second = fields
    return ((((month - 1) * 31 + day - 1) * 24 + hour) * 60 + minute) * 60 + second


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    return _ANSI.sub("", text) if "\x1b" in text else text


def _scan_log(matcher: _Matcher, path: Path, name: str, errors: dict[str, list[str]], block: int) -> None:
    needles = list(_NEEDLES) + list(ERROR_NEEDLES)
    kept: list[str] = []
    for number, raw in numbered_lines(path, needles, block):
        text = _decode(raw)
        if matcher.line(name, number, text):
            continue
        if len(kept) < ERROR_LINES and any(n.decode() in text for n in ERROR_NEEDLES):
            kept.append(f"{number}: {text[:MAX_LINE]}")
            if len(kept) == ERROR_LINES:  # enough for the fallback: look only for known signatures now
                del needles[len(_NEEDLES) :]
    if kept:
        errors[name] = kept


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _regular_files(run_dir: Path) -> Iterable[tuple[Path, str]]:
    """The run's log files (regular files only: no link is followed), in a stable order. A directory that is
    no run directory (no logs/, no nixl/: a node check's work directory, a copy of a node's logs) is read whole,
    up to MAX_FILES files."""
    tops = [run_dir / sub for sub in LOG_DIRS if _is_dir(run_dir / sub)]
    if not tops and not any((run_dir / name).exists() for name in RUN_FILES):
        tops = [run_dir]
    count = 0
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for filename in sorted(filenames):
                path = Path(dirpath) / filename
                try:
                    if not stat.S_ISREG(os.lstat(path).st_mode):
                        continue
                except OSError:
                    continue
                count += 1
                if count > MAX_FILES:
                    return
                yield path, str(path.relative_to(run_dir))


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _timeline_events(run_dir: Path) -> set[str]:
    events: set[str] = set()
    try:
        with open(run_dir / "timeline.jsonl", encoding="utf-8", errors="replace") as handle:
            for raw in handle:
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("event"), str):
                    events.add(record["event"])
    except OSError:
        pass
    return events


def rerun_command(run: dict[str, Any]) -> str:
    """The command that runs this run again: the NIXL probe, or the kind's run task with its engine."""
    if run.get("probe"):
        return "invoke nixl.cross-node"
    base = _KIND_COMMANDS.get(str(run.get("kind")), "")
    engine = run.get("engine_profile")
    return f"{base} --engine {engine}" if base and isinstance(engine, str) and engine else base


def diagnose_run(
    run_dir: Path,
    *,
    run: dict[str, Any] | None = None,
    failed_gates: Sequence[tuple[str, str]] = (),
    block: int = BLOCK,
) -> Diagnosis:
    """Diagnose a run directory. ``run``: the run record when run.json is not written yet (the record stage);
    ``failed_gates``: (gate id, reason) of the evidence gates that failed, when the caller judged them. An
    evidence bundle (``<evidence>/<run-id>/``) is read through its ``data/``: the run's record and the log lines
    the evidence kept, sanitized (its run.json keeps the diagnosis the run recorded, from every line)."""
    if (
        _is_dir(run_dir / "data")
        and (run_dir / "data" / "run.json").is_file()
        and not _is_dir(run_dir / "logs")
    ):
        run_dir = run_dir / "data"
    if run is None:
        loaded = _read_json(run_dir / "run.json")
        run = loaded if isinstance(loaded, dict) else {}
    diagnosis = Diagnosis(str(run_dir), rerun=rerun_command(run))
    matcher = _Matcher()
    for path, name in _regular_files(run_dir):  # the logs first: a line there says more than the headline
        try:
            _scan_log(matcher, path, name, diagnosis.error_lines, block)
        except OSError as exc:
            diagnosis.unreadable.append(f"{name}: {exc.strerror or exc}")
            continue
        diagnosis.files_read += 1
    failure = run.get("failure")
    if isinstance(failure, str) and failure:
        matcher.line("run.json", None, f"failure: {failure}")
    for job in run.get("jobs") or []:
        if not isinstance(job, dict):
            continue
        state = str(job.get("state") or "")
        for entry in CATALOG:
            if entry.signature.kind == "job_state" and entry.regex.match(state):
                matcher.add(entry, "run.json", None, f"job {job.get('job_id')} ({job.get('role')}): {state}, "
                            f"exit {job.get('exit_code')}")  # fmt: skip
    events = _timeline_events(run_dir)
    for entry in CATALOG:
        # (a probe's one-shot jobs never register: no missing event is a sign there)
        wanted = entry.signature.kind == "missing_event" and "submitted" in events and not run.get("probe")
        if wanted and not any(entry.regex.fullmatch(event) for event in events):
            matcher.add(entry, "timeline.jsonl", None, f"jobs submitted, no {entry.signature.pattern} event")
    for gate, reason in failed_gates:
        for entry in CATALOG:
            if entry.signature.kind == "gate" and entry.regex.fullmatch(gate):
                matcher.add(entry, "gates", None, f"{gate}: {reason}")
    gone = matcher.found.get("launcher-gone")
    if gone is not None and run.get("result"):
        # The launcher recorded the run's end, so it was not gone: a role that saw its key vanish outlived the
        # run's stop (a node whose slurmd died cannot be signalled), and the headline says why.
        matcher.found["launcher-gone"] = dataclasses.replace(gone, symptom=True)
    diagnosis.findings = matcher.ranked()
    return diagnosis


def diagnose_log(path: Path, *, block: int = BLOCK) -> Diagnosis:
    """Diagnose one log file of any origin (OSError when it cannot be read)."""
    diagnosis = Diagnosis(str(path))
    matcher = _Matcher()
    _scan_log(matcher, path, str(path), diagnosis.error_lines, block)
    diagnosis.files_read = 1
    diagnosis.findings = matcher.ranked()
    first = diagnosis.first
    diagnosis.rerun = RUNG_COMMANDS[first.entry.rung] if first is not None else ""
    return diagnosis


def safely(run_dir: Path, **kwargs: Any) -> dict[str, Any] | None:
    """:func:`diagnose_run` as JSON (at most 10 findings) for a record, or None: a diagnosis never fails what
    calls it (a run's record, a rung, a probe)."""
    try:
        return diagnose_run(run_dir, **kwargs).to_json(limit=10)
    except Exception:  # the diagnosis is an aid: the record must be written regardless
        return None


def log_safely(path: Path) -> dict[str, Any] | None:
    """:func:`diagnose_log` as JSON (at most 10 findings), or None when it fails."""
    try:
        return diagnose_log(path).to_json(limit=10)
    except Exception:  # the diagnosis is an aid: what calls it must go on regardless
        return None
