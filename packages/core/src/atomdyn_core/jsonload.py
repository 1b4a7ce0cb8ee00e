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
