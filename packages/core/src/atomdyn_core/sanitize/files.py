"""Whole files through the sanitizer: streamed in blocks of bounded size, in one pass where possible.

The result is that of the line-by-line sanitizer after it has learned the whole file (a user named once in a
home path is replaced where named alone before that line too): each block is learned, then sanitized
(:func:`~atomdyn_core.sanitize.scan.sanitize_block`); where a block after the first teaches a new name, the
earlier blocks may hold it, and the file is sanitized a second time with everything known. Output goes to
a temporary file renamed into place, so a reader never sees half a file.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import BinaryIO, TextIO

from atomdyn_core.sanitize import lines
from atomdyn_core.sanitize.lines import open_key_block
from atomdyn_core.sanitize.sanitizer import Sanitizer, strip_colours
from atomdyn_core.sanitize.scan import finish_prepared, sanitize_block

__all__ = ["BLOCK_BYTES", "PARALLEL_MIN_BYTES", "sanitize_file", "sanitize_file_to"]

BLOCK_BYTES = 4 << 20  # read at a time; memory stays a small multiple of this whatever the file size
# Smaller files are sanitized in this process alone: starting worker processes costs more than they save.
PARALLEL_MIN_BYTES = 32 << 20
_KEY_TAIL = 256  # more than the longest END line of a private key block


def sanitize_file(
    path: Path,
    out: TextIO,
    sanitizer: Sanitizer | None = None,
    block_bytes: int = BLOCK_BYTES,
    jobs: int = 1,
) -> None:
    """Write the sanitized text of ``path`` to ``out``.

    Undecodable bytes become U+FFFD rather than an error: logs of crashed processes end in garbage.
    ``jobs``: worker processes for a file of ``PARALLEL_MIN_BYTES`` or more (default 1: none), started by
    spawning (a script that asks for them needs the ``if __name__ == "__main__"`` guard: each worker
    imports the main module); the output is the same whatever their number."""
    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="") as staged:
        _sanitize_into(Path(path), staged, sanitizer or Sanitizer(), block_bytes, jobs)
        staged.seek(0)
        shutil.copyfileobj(staged, out, BLOCK_BYTES)


def sanitize_file_to(
    path: Path,
    dest: Path,
    sanitizer: Sanitizer | None = None,
    block_bytes: int = BLOCK_BYTES,
    jobs: int = 1,
) -> None:
    """Write the sanitized text of ``path`` to ``dest`` (a temporary file beside it, renamed into place);
    ``jobs`` as for :func:`sanitize_file`."""
    path, dest = Path(path), Path(dest)
    if not path.is_file():
        raise FileNotFoundError(f"sanitize: {path} is not a file")
    with open(path, "rb"):
        pass  # a file that cannot be opened fails here, before anything is made for the destination
    made = [p for p in (dest.parent, *dest.parent.parents) if not p.exists()]
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except BaseException:
        _remove_dirs(made)
        raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as staged:
            _sanitize_into(path, staged, sanitizer or Sanitizer(), block_bytes, jobs)
            staged.flush()
            os.fsync(staged.fileno())
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, dest)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        _remove_dirs(made)  # a failed run (a read error half-way: /proc/self/mem) leaves nothing behind
        raise


def _remove_dirs(made: list[Path]) -> None:
    """The directories made for a destination (innermost first), where still empty."""
    for directory in made:
        try:
            directory.rmdir()
        except OSError:
            return


def _sanitize_into(path: Path, out: TextIO, sanitizer: Sanitizer, block_bytes: int, jobs: int) -> None:
    if _one_pass(path, out, sanitizer, block_bytes, jobs):
        out.seek(0)
        out.truncate()
        _one_pass(path, out, sanitizer, block_bytes, jobs)


def _one_pass(path: Path, out: TextIO, sanitizer: Sanitizer, block_bytes: int, jobs: int) -> bool:
    """The file sanitized into ``out``; whether a block after the first taught a new name (which earlier
    blocks may hold: a second pass is needed)."""
    learned_late = False
    blocks = 0
    rest_at: int | None = 0
    if _parallel(path, block_bytes, jobs):
        from atomdyn_core.sanitize.parallel import prepared_blocks, range_text

        rest_at = None
        with closing(prepared_blocks(path, block_bytes, jobs, sanitizer)) as prepared_in_order:
            for start, end, prepared in prepared_in_order:
                if prepared is None:
                    rest_at = start  # the last item: the rest goes through this process's reader
                    continue
                known = sanitizer.known_count()
                out.write(finish_prepared(sanitizer, prepared, partial(range_text, path, start, end)))
                learned_late = learned_late or (blocks > 0 and sanitizer.known_count() != known)
                blocks += 1
    if rest_at is not None:
        for block in read_blocks(path, block_bytes, start=rest_at):
            known = sanitizer.known_count()
            out.write(sanitize_block(sanitizer, block))
            learned_late = learned_late or (blocks > 0 and sanitizer.known_count() != known)
            blocks += 1
    return learned_late


def _parallel(path: Path, block_bytes: int, jobs: int) -> bool:
    if jobs <= 1 or multiprocessing.current_process().daemon:  # a pool's worker may start no processes
        return False
    size = path.stat().st_size
    return size >= PARALLEL_MIN_BYTES and size > 2 * block_bytes


def read_blocks(path: Path, block_bytes: int = BLOCK_BYTES, start: int = 0) -> Iterator[str]:
    """The file's text (from byte ``start``, a line's start) in blocks of whole lines, colour codes removed,
    no private key block cut in two.

    A key block whose body (base64 lines) runs to a block's end is joined with what follows, as the pattern
    takes it (its body lines, up to its END line or the first line of anything else); the body is dropped as it
    is read (it is redacted whole), so that memory stays bounded."""
    with open(path, "rb") as handle:
        handle.seek(start)
        reader = _LineReader(handle, block_bytes, path)
        while block := reader.next_block():
            while (header_end := open_key_block(block)) is not None:
                more = reader.next_block()
                if not more:
                    break
                if len(block) - header_end > _KEY_TAIL:
                    # the body's last lines, from a line's start: the block's lines are the pattern's
                    tail = block[-_KEY_TAIL:]
                    line_start = tail.find("\n")
                    block = block[:header_end] + (tail[line_start:] if line_start >= 0 else "\n" + tail)
                block += more
            yield block


class _LineReader:
    """Blocks of whole lines read as bytes and decoded whole (a line end never falls inside a character)."""

    def __init__(self, handle: BinaryIO, block_bytes: int, path: Path) -> None:
        self._handle = handle
        self._size = block_bytes
        self._pending = b""
        self._path = path

    def next_block(self) -> str:
        data = self._pending
        while True:
            try:
                chunk = self._handle.read(self._size)
            except OSError as exc:
                exc.filename = exc.filename or str(self._path)  # a read error names the file (EIO of /proc)
                raise
            data += chunk
            if not chunk:
                self._pending = b""
                break
            cut = data.rfind(b"\n") + 1 or data.rfind(b"\r", 0, len(data) - 1) + 1  # CR alone ends a line too
            if not cut and len(data) >= lines.LINE_LIMIT_BYTES:
                cut = _character_start(data, lines.LINE_LIMIT_BYTES)  # no log writes such a line: cut it
            if cut:
                data, self._pending = data[:cut], data[cut:]
                break
        return strip_colours(data.decode("utf-8", "replace"))


def _character_start(data: bytes, at: int) -> int:
    """``at``, moved back to the first byte of a UTF-8 character."""
    while at > 0 and 0x80 <= data[at] < 0xC0:
        at -= 1
    return at or len(data)
