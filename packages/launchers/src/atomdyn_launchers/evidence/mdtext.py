"""Run-supplied text in Markdown: summary.md, RESULTS.md and the README table show strings a run directory
holds (the platform a node reported, run.json's profiles, gate values read from logs). Each passes through
one of these, so no such string adds a table row, a heading, a link, HTML or a marker comment.

``text`` is for prose and table cells: line breaks and other control characters become spaces, and the
characters that start Markdown syntax are backslash-escaped (CommonMark lets any ASCII punctuation be).
``code`` is for values shown as code: a code span takes no escapes, so the span is fenced with more
backticks than the value holds, and in a table a ``|`` is written ``\\|`` (GFM splits cells before it reads
code spans). Characters that start nothing (parentheses, commas, quotes, ``_`` inside words) are left as
they are, so ordinary labels read as before.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")
_SYNTAX = re.compile(r"([\\`*\[\]<|#!~&])")
_TICKS = re.compile(r"`+")


def text(value: object) -> str:
    """``value`` as inert Markdown text on one line."""
    return _SYNTAX.sub(r"\\\1", _CONTROL.sub(" ", str(value)))


def code(value: object, *, in_table: bool = True) -> str:
    """``value`` as one code span on one line."""
    body = _CONTROL.sub(" ", str(value))
    if in_table:
        body = body.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in _TICKS.findall(body)), default=0) + 1)
    if body.startswith("`") or body.endswith("`"):
        body = f" {body} "
    return f"{fence}{body}{fence}"
