"""What every reader shares: the :class:`Signals` it fills, the :class:`Reader` declaration, bounded line readers.

Every signal is either a value or absent with the reason it is absent; nothing here raises on bad content
(a missing file, a truncated line, binary garbage, an aborted run): the problem is recorded instead.
Files are streamed, so memory does not depend on their size.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from atomdyn_launchers.contract.answers import Answer
from atomdyn_launchers.contract.kinds import DISAGG_KINDS
from atomdyn_launchers.evidence import logscan
from atomdyn_launchers.evidence.jsonfile import loads

# A run id that is a plain directory name and link: ASCII only (\w takes any script's letters and digits), and \Z,
# not $, which lets a trailing newline through.
SAFE_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
MAX_RECORD = 1 << 20  # a JSON-lines record longer than this is garbage, skipped without being held
EXCERPT_HEAD = 4
CORRUPT_SHOWN = 8


@dataclass
class Signals:
    """Named facts about one run, the reasons for the absent ones, and the lines that show them."""

    run_dir: Path
    name: str  # the run directory's name: <run-id>
    values: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    excerpts: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    kv_points: list[tuple[float, float, int]] = field(
        default_factory=list
    )  # (s since first, mean MB, transfers)
    # every distinct put/get row of the UCX tables between processes -> where it was first seen (file:line: text)
    kv_rows: dict[logscan.UcxRow, str] = field(default_factory=dict)
    # the fixed prompt's P/D answer and the aggregated reference it is compared with (gates.derive: by the rule
    # the engine states)
    answers: tuple[Answer, Answer] | None = None
    run: dict[str, Any] = field(default_factory=dict)
    # per JSON-lines file, its lines that are no record: "<file>:<line>: <why>" (the first CORRUPT_SHOWN of them)
    corrupt: dict[str, list[str]] = field(default_factory=dict)
    corrupt_count: dict[str, int] = field(default_factory=dict)

    def set(self, name: str, value: Any) -> None:
        self.values[name] = value
        self.missing.pop(name, None)

    def absent(self, name: str, why: str) -> None:
        self.values[name] = None
        self.missing[name] = why

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def excerpt(self, group: str, line: str) -> None:
        self.excerpts.setdefault(group, []).append(line)


@dataclass(frozen=True)
class Reader:
    """One reader of a run directory: what it reads, the signals it sets (a value, or absent with the reason),
    and the function that reads them. ``evidence/signals.py`` runs the readers in order; a test checks that each
    gate's signal is one some reader (or the gates' derivation) declares, and that a reader sets no other."""

    name: str  # what it reads, as docs/run-directory.md names it
    sets: frozenset[str]
    read: Callable[[Signals], None]


def record_lines(handle: IO[bytes], limit: int = MAX_RECORD) -> Iterator[bytes]:
    """Lines of at most ``limit`` bytes; a longer one is yielded as ``b""`` (bad) without being held whole."""
    while True:
        raw = handle.readline(limit)
        if not raw:
            return
        if len(raw) == limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # skip the rest of the over-long line
                raw = handle.readline(limit)
            yield b"\x00\n"
            continue
        yield raw


def jsonl(path: Path, signals: Signals) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Complete JSON-object lines of ``path`` with their numbers, each read by the strict loader; every other
    complete line (not JSON, a duplicate key, NaN, a NUL line, an over-long line) is counted and named in
    ``signals.corrupt`` under the file's name, and the count becomes a problem. A last line without its newline
    is being written: ignored, as docs/run-directory.md says."""
    bad = 0
    shown = signals.corrupt.setdefault(path.name, [])
    with open(path, "rb") as handle:
        for number, raw in enumerate(record_lines(handle), 1):
            if not raw.endswith(b"\n"):
                signals.problems.append(f"{path.name}:{number}: truncated last line ignored")
                break
            text = raw.decode("utf-8", errors="replace").strip(" \t\r\n")
            if not text:
                continue
            try:
                record: Any = loads(text, f"{path.name}:{number}", expect=dict)
            except ValueError as exc:
                bad += 1
                if len(shown) < CORRUPT_SHOWN:
                    why = "a NUL line" if text.strip("\x00") == "" else str(exc).split(": ", 1)[-1][:120]
                    shown.append(f"{path.name}:{number}: corrupt line: {why}")
                continue
            yield number, text, record
    signals.corrupt_count[path.name] = bad
    if bad:
        signals.problems.append(f"{path.name}: {bad} line(s) are not JSON objects and were ignored")


def as_number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def mode(role: str) -> str:
    """prefill2 -> prefill, decode3 -> decode: an xPyD run numbers the workers of one mode."""
    return role.rstrip("0123456789") or role


def worker_roles(signals: Signals) -> set[str]:
    roles = {
        str(j.get("role")) for j in signals.run.get("jobs") or [] if isinstance(j, dict) and j.get("role")
    }
    if signals.get("run.kind") in DISAGG_KINDS:
        return {r for r in roles if mode(r) in ("prefill", "decode")} or {"prefill", "decode"}
    return roles - {"frontend", "etcd"}
