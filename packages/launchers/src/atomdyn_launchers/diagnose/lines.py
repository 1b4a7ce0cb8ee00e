"""Bounded reading of a log: fixed-size blocks cut at a line boundary, and the lines holding a needle with
their line numbers. Memory does not depend on the log: a line longer than a block is cut, never buffered
whole. evidence/logscan.py reads through the same :func:`blocks`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

BLOCK = 8 << 20


def blocks(path: Path, block: int = BLOCK) -> Iterator[tuple[bytes, int, int]]:
    """(buffer, end, cut): ``buffer[:end]`` holds whole lines (the file's last may lack its newline);
    ``cut`` is 1 when one line longer than a block had to be cut."""
    carry = b""
    with open(path, "rb") as handle:
        while True:
            data = handle.read(block)
            if not data:
                break
            buf = carry + data if carry else data
            end = buf.rfind(b"\n") + 1
            if end == 0:
                if len(buf) >= block:  # one line longer than a block: cut it here
                    yield buf, len(buf), 1
                    carry = b""
                else:
                    carry = buf
                continue
            yield buf, end, 0
            carry = buf[end:]
    if carry:
        yield carry, len(carry), 0


def numbered_lines(path: Path, needles: Sequence[bytes], block: int = BLOCK) -> Iterator[tuple[int, bytes]]:
    """(line number, line without its newline) of every line of ``path`` holding one of ``needles``, in file
    order. Finding the needles is ``bytes.find`` (C speed); only those lines reach Python. ``needles`` is read
    again for each block: a caller may drop some while it reads."""
    before = 0  # lines in the blocks already read
    for buf, end, _ in blocks(path, block):
        spans: set[tuple[int, int]] = set()
        for needle in needles:
            pos = buf.find(needle, 0, end)
            while pos >= 0:
                start = buf.rfind(b"\n", 0, pos) + 1
                stop = buf.find(b"\n", pos, end)
                stop = end if stop < 0 else stop
                spans.add((start, stop))
                pos = buf.find(needle, stop, end)
        counted, number = 0, before
        for start, stop in sorted(spans):
            number += buf.count(b"\n", counted, start)
            counted = start
            yield number + 1, buf[start:stop]
        before += buf.count(b"\n", 0, end)
