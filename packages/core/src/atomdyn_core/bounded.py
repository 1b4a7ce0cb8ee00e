"""Reading a file someone else named: it must be a regular file, and it is read up to a size cap.

A device (``/dev/zero``, ``/dev/full``) would be read forever, a FIFO would block the open, and a file of
gigabytes would be read whole into memory: each is refused with :class:`FileReadError`, naming the file and
why, before more than ``limit + 1`` bytes are read. The open does not block (``O_NONBLOCK``), so a FIFO is
refused at once rather than waited on.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

KIB = 1 << 10
MIB = 1 << 20


class FileReadError(ValueError):
    """A file that cannot be read as asked: not there, not a regular file, over its size cap, not UTF-8."""

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = str(path)
        self.why = why


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def size_words(limit: int) -> str:
    if limit >= MIB and limit % MIB == 0:
        return f"{limit // MIB} MiB"
    if limit >= KIB and limit % KIB == 0:
        return f"{limit // KIB} KiB"
    return f"{limit} bytes"


def read_bytes(path: Path | str, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (a link to one is followed), at most ``limit`` of them;
    :class:`FileReadError` for anything else, naming ``what`` it was to be."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileReadError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileReadError(path, f"the {what} is {_kind(mode)}, not a regular file")
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(1 * MIB, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise FileReadError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if total > limit:
        raise FileReadError(path, f"the {what} is larger than {size_words(limit)} (refused, not read whole)")
    return b"".join(chunks)


def read_text(path: Path | str, limit: int, what: str = "file", errors: str = "strict") -> str:
    """:func:`read_bytes` decoded as UTF-8; undecodable bytes are a :class:`FileReadError` (``errors`` strict)
    naming the offset."""
    data = read_bytes(path, limit, what)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise FileReadError(
            path, f"the {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
