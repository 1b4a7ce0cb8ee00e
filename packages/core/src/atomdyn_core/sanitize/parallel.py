"""Whole files on several processes: the work that depends only on a block's text is done by workers, the
numbering in this process, in file order, so the output is that of the one-process path, byte for byte.

A file is cut into ranges of whole lines (each after a newline, about ``block_bytes`` long); each worker reads
its own range from the file (the text is not piped to it), removes the colour codes, finds the lines that a
pattern may change and replaces the known names on the others (:func:`~atomdyn_core.sanitize.scan.prepare_block`),
and leaves the text in a file of a temporary spool directory for this process to read (reading a pipe cost it
several times more).
This process takes the prepared blocks in file order and finishes them
(:func:`~atomdyn_core.sanitize.scan.finish_prepared`): the hit lines go through the patterns, which learn and
number values as the one-process path does; names learned since a block was sent out are looked for in it
here. From ``_AHEAD_JOBS`` workers on, a worker sanitizes its whole block ahead with a copy of the sanitizer
as it stood when the range was sent out, and this process only checks it (speculate.py). What a worker cannot decide alone goes back to the one-process reader from that range on: a private
key block still open at the end of a range (it may end in a later one) and a line longer than
``LINE_LIMIT_BYTES`` (that reader cuts it). At most two ranges per worker are in flight, so memory stays
bounded whatever the file size. Workers ignore SIGINT and are terminated whenever this process stops early.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile
from collections import deque
from collections.abc import Generator, Iterator
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path
from typing import BinaryIO

from atomdyn_core.sanitize import lines
from atomdyn_core.sanitize.sanitizer import NamesState, NumberingState, Sanitizer, strip_colours
from atomdyn_core.sanitize.scan import Prepared, prepare_block

__all__ = ["default_jobs", "prepared_blocks", "range_text"]

_SEARCH_CHUNK = 64 << 10  # read at a time when looking for the newline after a range's nominal end
_IN_FLIGHT_PER_JOB = 2
# From this many workers on, they also sanitize the hit lines ahead, for this process to check (speculate.py):
# it costs them about what it saves this process, which pays only where the workers have CPUs to spare.
_AHEAD_JOBS = 3


def default_jobs() -> int:
    """The CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def prepared_blocks(
    path: Path, block_bytes: int, jobs: int, sanitizer: Sanitizer
) -> Generator[tuple[int, int, Prepared | None], None, None]:
    """``(start, end, prepared)`` for the file's ranges in order, prepared by ``jobs`` worker processes with
    what ``sanitizer`` knows when each range is sent out (it goes on learning as the caller finishes the
    blocks; from ``_AHEAD_JOBS`` workers on, the blocks are sanitized ahead: speculate.py, their text
    dropped, read again with :func:`range_text` where needed); a last ``(start, start, None)`` where the rest
    of the file, from byte ``start``, must go through the one-process reader. Ranges are planned as they are sent out; the workers and the spool are gone when
    this returns, raises or is closed."""
    context = multiprocessing.get_context("spawn")  # safe whatever threads this process runs
    spool = tempfile.mkdtemp(prefix="atomdyn-sanitize-")
    try:
        pool = context.Pool(jobs, initializer=_ignore_sigint)
        try:
            yield from _in_order(pool, path, block_bytes, jobs, sanitizer, spool)
            pool.close()
            pool.join()
        finally:
            pool.terminate()
            pool.join()
    finally:
        shutil.rmtree(spool, ignore_errors=True)


def _in_order(
    pool: Pool, path: Path, block_bytes: int, jobs: int, sanitizer: Sanitizer, spool: str
) -> Iterator[tuple[int, int, Prepared | None]]:
    pending: deque[tuple[int, int, AsyncResult[tuple[Prepared, bool]] | None]] = deque()
    ranges = _ranges(path, block_bytes)
    rest_at: int | None = None
    while True:
        while rest_at is None and len(pending) < jobs * _IN_FLIGHT_PER_JOB:
            planned = next(ranges, None)
            if planned is None:
                break
            start, end = planned
            if end is None:
                rest_at = start
                pending.append((start, start, None))
                break
            known = sanitizer.names_state()
            numbering = sanitizer.numbering_state() if jobs >= _AHEAD_JOBS else None
            task = (str(path), start, end, known, numbering, spool)
            pending.append((start, end, pool.apply_async(_prepare_range, task)))
        if not pending:
            return
        start, end, result = pending.popleft()
        if result is None:
            yield start, start, None
            return
        prepared, open_key = result.get()
        if open_key:  # the key block may end in a later range: the one-process reader joins them
            yield start, start, None
            return
        spooled = Path(spool, str(start))
        text = spooled.read_bytes().decode("utf-8")
        if prepared.output is not None:
            prepared.output = text  # the block sanitized ahead; its own text is read again where needed
        else:
            prepared.text = text
        spooled.unlink()
        yield start, end, prepared


def _ranges(path: Path, block_bytes: int) -> Iterator[tuple[int, int | None]]:
    """``(start, end)`` of ranges of whole lines; ``(start, None)`` from where they cannot be planned (a line
    longer than the limit, a range without a newline after its nominal end)."""
    size = path.stat().st_size
    limit = lines.LINE_LIMIT_BYTES
    with open(path, "rb") as handle:
        start = 0
        while start < size:
            nominal = start + block_bytes
            if nominal >= size:
                end = size
            else:
                found = _newline_after(handle, nominal, start + limit)
                if found is None:
                    yield start, None
                    return
                end = found
            if end - start > limit:  # a line in it may be longer than the limit: the reader cuts those
                yield start, None
                return
            yield start, end
            start = end


def _newline_after(handle: BinaryIO, at: int, until: int) -> int | None:
    """The offset just after the first newline at or after ``at`` and before ``until``, else None."""
    handle.seek(at)
    pos = at
    while pos < until:
        chunk = handle.read(min(_SEARCH_CHUNK, until - pos))
        if not chunk:
            return None
        found = chunk.find(b"\n")
        if found >= 0:
            return pos + found + 1
        pos += len(chunk)
    return None


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is this process's to handle: it ends the workers


_NAMER: list[tuple[NamesState, Sanitizer]] = []  # the last one a worker built


def _namer(known: NamesState) -> Sanitizer:
    """A sanitizer that knows what ``known`` names, as the one in the main process did (built once)."""
    if not _NAMER or _NAMER[0][0] != known:
        _NAMER[:] = [(known, Sanitizer.naming(known))]
    return _NAMER[0][1]


def range_text(path: Path | str, start: int, end: int) -> str:
    """The text of bytes ``start`` to ``end`` of ``path``, as a block is prepared from it (decoded, colour
    codes removed)."""
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    return strip_colours(data.decode("utf-8", "replace"))


def _prepare_range(
    path: str, start: int, end: int, known: NamesState, numbering: NumberingState | None, spool: str
) -> tuple[Prepared, bool]:
    """In a worker: the range read, decoded and prepared; whether a private key block is open at its end.
    The prepared text, or the block sanitized ahead, is written to a file in ``spool`` named by ``start``
    (a pipe costs the main process several times more to read)."""
    text = range_text(path, start, end)
    namer = _namer(known)
    ahead = None if numbering is None else (known, numbering)
    prepared = prepare_block(text, tuple(namer.known_names()), known[2], namer, ahead=ahead)
    prepared.low = None  # rebuilt where needed: not worth sending
    spooled = prepared.text if prepared.output is None else prepared.output
    Path(spool, str(start)).write_bytes(spooled.encode("utf-8"))
    prepared.text = ""
    if prepared.output is not None:
        prepared.output = ""
    return prepared, lines.open_key_block(text) is not None
