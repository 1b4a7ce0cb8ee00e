"""The collected data: a reduced, sanitized copy of a run directory, kept in the evidence under ``data/``.

It has the run directory's own layout (docs/run-directory.md), holding only what the gates read: run.json,
the timeline and the request records whole; of each metrics file the samples the gates use (Dynamo's frontend's
and the metrics a registered engine names); of each log the
lines a scan of it reads (logscan.matching_lines); the per-role fingerprints and doctor reports. The signals
of ``data/`` are therefore the signals of the run, so ``evidence.verify`` recomputes every gate from it instead
of trusting what ``summary.json`` says. Every line passes through the run's sanitizer.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_bytes
from atomdyn_core.bounded import FileReadError, read_bytes
from atomdyn_launchers.contract.accuracy import ACCURACY_DIR, AGGREGATED_FILE, ITEMS_FILE, SUMMARY_FILE
from atomdyn_launchers.contract.answers import ANSWERS_DIR
from atomdyn_launchers.contract.rundir import READY_METRICS_DIR
from atomdyn_launchers.evidence import logscan, signals
from atomdyn_launchers.evidence.jsonfile import JSON_MAX_BYTES, loads

DATA = "data"
COLLECTOR_FINGERPRINT = "collector-fingerprint.json"  # the collector's, when the run saved no fingerprint
_JSON_DIRS = ("fingerprints", "doctor", ANSWERS_DIR)
RUN_FILES = ("run.json", "timeline.jsonl", "requests.jsonl", COLLECTOR_FINGERPRINT)  # read at the top
RUN_DIRS = ("metrics", READY_METRICS_DIR, "logs", *_JSON_DIRS, ACCURACY_DIR)  # every entry of each is read
ACCURACY_JSON = (SUMMARY_FILE, AGGREGATED_FILE)  # accuracy/: these and ITEMS_FILE (one item a line)


class CollectError(ValueError):
    """A run directory that collect refuses: the message names the file and the problem."""


def kind_of(mode: int) -> str | None:
    """What is wrong with a directory entry of this ``lstat`` mode for evidence, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "is a symbolic link (refused: evidence holds only the run's own regular files)"
    what = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a special file"
    return f"is not a regular file ({what})"


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run directory where anything collect reads is a link or not a regular file, before a byte of
    it is read (a link would carry a file from outside the run into the evidence, a FIFO would hang)."""
    problems = []
    for name in RUN_FILES:
        try:
            mode = os.lstat(run_dir / name).st_mode
        except FileNotFoundError:
            continue
        why = kind_of(mode)
        if why is not None:
            problems.append(f"{name} {why}")
    for sub in RUN_DIRS:
        try:
            mode = os.lstat(run_dir / sub).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(mode):
            problems.append(f"{sub} {kind_of(mode) or 'is not a directory'}")
            continue
        with os.scandir(run_dir / sub) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                why = kind_of(entry.stat(follow_symlinks=False).st_mode)
                if why is not None:
                    problems.append(f"{sub}/{entry.name} {why}")
    if problems:
        raise CollectError(f"{run_dir}: " + "; ".join(problems))


def _text_lines(lines: Iterable[bytes], sanitize: Callable[[str], str]) -> bytes:
    out = []
    for raw in lines:
        newline = raw.endswith(b"\n")
        text = raw[:-1] if newline else raw
        out.append(sanitize(text.decode("utf-8", errors="replace")).encode() + (b"\n" if newline else b""))
    return b"".join(out)


def json_bytes(obj: Any, sanitize: Callable[[str], str]) -> bytes:
    """A JSON document sanitized as text, so the sanitizer sees each value beside its key
    (``"hostname": "vm"``); its replacements hold no quote, so the document stays valid."""
    text = sanitize(json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False))
    json.loads(text)  # a replacement that broke the document is a sanitizer bug: stop here
    return (text + "\n").encode()


def _json_file(source: Path, sanitize: Callable[[str], str]) -> bytes:
    """A JSON file of the run, sanitized: parsed strictly, so a duplicate key or NaN that a lenient parse would
    have merged or kept reaches data/ as the text it was (the readers then name it unreadable), never as a
    clean document it was not."""
    try:
        raw = read_bytes(source, JSON_MAX_BYTES, "JSON file")
    except FileReadError as exc:
        raise CollectError(str(exc)) from None
    try:
        parsed = loads(raw, source.name, expect=None)
    except ValueError:
        return _text_lines(raw.splitlines(keepends=True), sanitize)  # the readers report it as unreadable
    return json_bytes(parsed, sanitize)


def _jsonl(source: Path) -> Iterable[bytes]:
    with open(source, "rb") as handle:
        yield from signals.record_lines(handle)


def _metrics(source: Path, wanted: frozenset[str]) -> Iterable[bytes]:
    with open(source, "rb") as handle:
        for raw in signals.record_lines(handle):  # a line is bounded: an endless one is never held whole
            name = raw.split(b"{", 1)[0].split(b" ", 1)[0].decode("utf-8", errors="replace")
            if name in wanted:
                yield raw


def reduce_run(run_dir: Path, out: Path, sanitize: Callable[[str], str]) -> list[str]:
    """Write the collected data of ``run_dir`` under ``out``; the paths written, relative to ``out``."""
    written: list[str] = []

    def put(rel: str, data: bytes) -> None:
        atomic_write_bytes(out / rel, data)
        written.append(rel)

    (out).mkdir(parents=True, exist_ok=True)
    if (run_dir / "run.json").is_file():
        put("run.json", _json_file(run_dir / "run.json", sanitize))
    for name in ("timeline.jsonl", "requests.jsonl"):
        if (run_dir / name).is_file():
            put(name, _text_lines(_jsonl(run_dir / name), sanitize))
    check_run_dir(run_dir)
    wanted = signals.wanted_metrics()

    def metrics(source: Path) -> Iterable[bytes]:
        return _metrics(source, wanted)

    for sub, pick in (("metrics", metrics), (READY_METRICS_DIR, metrics), ("logs", logscan.matching_lines)):
        for path in sorted((run_dir / sub).glob("*")):
            if path.is_file():
                (out / sub).mkdir(exist_ok=True)
                # a log's name may hold a node's name (decode-gpu-a17.log): its name is sanitized like its lines
                put(f"{sub}/{sanitize(path.name)}", _text_lines(pick(path), sanitize))
    if (run_dir / COLLECTOR_FINGERPRINT).is_file():  # collecting again from an evidence's own data/
        put(COLLECTOR_FINGERPRINT, _json_file(run_dir / COLLECTOR_FINGERPRINT, sanitize))
    for sub in _JSON_DIRS:
        for path in sorted((run_dir / sub).glob("*.json")):
            (out / sub).mkdir(exist_ok=True)
            put(f"{sub}/{path.name}", _json_file(path, sanitize))
    for name in ACCURACY_JSON:
        if (run_dir / ACCURACY_DIR / name).is_file():
            put(f"{ACCURACY_DIR}/{name}", _json_file(run_dir / ACCURACY_DIR / name, sanitize))
    if (run_dir / ACCURACY_DIR / ITEMS_FILE).is_file():
        put(
            f"{ACCURACY_DIR}/{ITEMS_FILE}", _text_lines(_jsonl(run_dir / ACCURACY_DIR / ITEMS_FILE), sanitize)
        )
    return written
