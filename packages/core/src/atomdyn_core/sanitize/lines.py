"""What the one-process reader (files.py) and the parallel planner (parallel.py) agree on about lines: the
longest line read whole, and where an unfinished private key block's header ends. A module of its own so
that neither imports the other."""

from __future__ import annotations

from atomdyn_core.sanitize.sanitizer import _PRIVATE_KEY

LINE_LIMIT_BYTES = 16 << 20  # a longer line is sanitized in pieces of this size (no log writes such lines)


def open_key_block(block: str) -> int | None:
    """Where the header of a private key block that ends with ``block`` (no END line yet) ends, else None."""
    if "PRIVATE KEY" not in block:
        return None
    last = None
    for match in _PRIVATE_KEY.finditer(block):
        last = match
    if last is None or last.end() != len(block):
        return None
    header = f"-----BEGIN {last['kind']}PRIVATE KEY{last['block']}-----"
    if len(last[0]) > len(header) and last[0].endswith(
        f"-----END {last['kind']}PRIVATE KEY{last['block']}-----"
    ):
        return None
    return last.start() + len(header)
