"""Lines as upstream prints them: a catalog entry's format string with its placeholders filled. What the
diagnosis tests feed it is these lines (or lines captured from real runs), never a line written from memory."""

from __future__ import annotations

import re

from atomdyn_launchers.diagnose.catalog import BY_ID, Entry, Upstream

# printf conversions (C), and a Python f-string's replacement fields
# (Slurm's own %ps prints a step id.)
_PRINTF = re.compile(r"%(?:[-#0 +]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L)?(ps|[diouxXcspmfeEgG%]))")
_FIELD = re.compile(r"\{[^{}]*\}")
_DEFAULTS = {"d": "3", "i": "3", "u": "3", "o": "7", "x": "1f", "X": "1F", "c": "c", "s": "x", "p": "0x7f3a00001000",
             "m": "Invalid argument", "ps": "StepId=12.0", "f": "1.5", "e": "1.5e+00", "E": "1.5E+00", "g": "1.5", "G": "1.5"}  # fmt: skip


def render(upstream: Upstream) -> str:
    """The line ``upstream.fmt`` prints with its placeholders filled (``args`` in order, else a default)."""
    args = iter(upstream.args)
    if upstream.style in ("python", "fmt") and _FIELD.search(upstream.fmt):  # f-string or {fmt} fields
        return _FIELD.sub(lambda m: next(args, "1"), upstream.fmt)

    def fill(match: re.Match[str]) -> str:
        conv = match.group(1)
        return "%" if conv == "%" else next(args, _DEFAULTS[conv])

    return _PRINTF.sub(fill, upstream.fmt)  # printf (C, and Python's logger.error("... %s", x))


def lines_of(entry: Entry) -> list[str]:
    return [render(u) for u in entry.upstream if not u.value]


def line_of(entry_id: str) -> str:
    """The first line entry ``entry_id``'s upstream format string prints."""
    return lines_of(BY_ID[entry_id])[0]
