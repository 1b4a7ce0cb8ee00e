"""The one way evidence reads a JSON file: a regular file under a size cap (atomdyn_core.bounded), parsed by
the strict loader (atomdyn_core.jsonload.loads_strict: no duplicate key, no NaN or Infinity, bounded nesting,
the top level of the type asked). Every error is a :class:`EvidenceJSONError` (a ValueError) naming the file,
so the readers record it as a problem and the gates that need the file fail, instead of reading what a second
parser would read differently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from atomdyn_core.bounded import MIB, FileReadError, read_bytes, read_text
from atomdyn_core.jsonload import loads_strict

# A run.json, fingerprint, doctor report, answer or summary.json is kilobytes to a few MiB (a summary with its
# fingerprints); a text the tools read whole (an excerpt, summary.md, the README, RESULTS.md) no more.
JSON_MAX_BYTES = 64 * MIB
TEXT_MAX_BYTES = 64 * MIB
DEPTH = 64


class EvidenceJSONError(ValueError):
    """A JSON file evidence refuses: not a regular file, too large, not UTF-8, not strict JSON."""


def loads(text: str | bytes, where: str, expect: type | None = dict) -> Any:
    """``text`` parsed strictly; EvidenceJSONError naming ``where``."""
    try:
        return loads_strict(text, limit=DEPTH, expect=expect)
    except json.JSONDecodeError as exc:
        raise EvidenceJSONError(
            f"{where}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except ValueError as exc:
        raise EvidenceJSONError(f"{where}: {exc}") from None


def read_json(path: Path, expect: type | None = dict, limit: int = JSON_MAX_BYTES) -> Any:
    """The JSON document in ``path`` (a dict unless ``expect`` says otherwise); FileNotFoundError when there
    is none, EvidenceJSONError for anything else wrong with it."""
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    try:
        data = read_bytes(path, limit, "JSON file")
    except FileReadError as exc:
        raise EvidenceJSONError(str(exc)) from None
    return loads(data, str(path), expect)


def read_whole_text(
    path: Path, what: str = "file", limit: int = TEXT_MAX_BYTES, errors: str = "strict"
) -> str:
    """A text file read whole under a size cap; FileNotFoundError when there is none, EvidenceJSONError (a
    ValueError) naming it for anything else wrong with it."""
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(2, "No such file or directory", str(path))
    try:
        return read_text(path, limit, what, errors)
    except FileReadError as exc:
        raise EvidenceJSONError(str(exc)) from None
