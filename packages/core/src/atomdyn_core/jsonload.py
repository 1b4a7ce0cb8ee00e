"""Reading JSON that someone else wrote: its nesting is bounded, so a hostile file is an error, not a
RecursionError (Python's parser recurses once a level, and so does every walk over what it returns)."""

from __future__ import annotations

import json
from typing import Any


class JSONNestingError(ValueError):
    """The document nests deeper than ``limit`` levels (objects and arrays)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested more than {limit} levels deep")
        self.limit = limit


def check_depth(value: Any, limit: int) -> None:
    """Raise `JSONNestingError` when ``value`` nests objects or arrays deeper than ``limit``; iterative."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise JSONNestingError(limit)
        stack.extend((child, depth + 1) for child in children)


def loads_bounded(text: str, *, limit: int, **kwargs: Any) -> Any:
    """`json.loads`, refusing a document nested deeper than ``limit`` with `JSONNestingError`."""
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:  # far deeper than any limit: the parser itself gave up
        raise JSONNestingError(limit) from None
    check_depth(value, limit)
    return value


class StrictJSONError(ValueError):
    """A document the strict loader refuses: a duplicate key, NaN or Infinity, a top level of the wrong type
    (beside JSON's own syntax errors and `JSONNestingError`, which are ValueErrors too)."""


def _refuse_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON number (refused: evidence holds finite numbers only)")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise StrictJSONError(
            f"{text} is out of a float's range (refused: evidence holds finite numbers only)"
        )
    return value


def _pairs_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise StrictJSONError(f"duplicate key {key!r} (a JSON reader would keep only one of its values)")
        seen[key] = value
    return seen


def loads_strict(text: str | bytes, *, limit: int = 64, expect: type | None = None) -> Any:
    """The one JSON loader for evidence: `loads_bounded` that also refuses duplicate keys, ``NaN``,
    ``Infinity`` and ``-Infinity`` (and a number like 1e400 that overflows to it), and a top level that is not ``expect`` (when given), each with a
    ValueError naming it (`StrictJSONError`, `JSONNestingError`, `json.JSONDecodeError`)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(f"not UTF-8 (byte 0x{text[exc.start]:02x} at offset {exc.start})") from None
    value = loads_bounded(
        text,
        limit=limit,
        object_pairs_hook=_pairs_once,
        parse_constant=_refuse_constant,
        parse_float=_finite_float,
    )
    if expect is not None and not isinstance(value, expect):
        raise StrictJSONError(f"the top level is {type(value).__name__}, not {expect.__name__}")
    return value
