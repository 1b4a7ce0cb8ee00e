"""Blocks sanitized ahead of their turn, in a worker process, and checked in file order.

Running the hit lines through the patterns is most of the numbering process's work, but only a few calls in
it read or change what the sanitizer knows: the placeholder a value gets (``Sanitizer._placeholder``, and
``_known`` for one it already has), a host (``_host``) and a user (``_user``), each learning as it numbers.
The rest (the regexes, the keeping rules, the known paths) depends on the line alone.

So a worker sanitizes the whole block with a copy of the sanitizer as it stood when the range was sent out
(:func:`sanitize_ahead`), writing down for each hit line those calls with their answers. The numbering
process, in file order (:func:`finish_ahead`), takes the worker's block where it knows the same names as the
copy did (the known names, replaced on every line, are then replaced alike) and makes each hit line's calls
itself: where every answer is the one written down, the passes did on that line what they would have done
here, and the calls have left it knowing and numbering exactly what it would have. A line with another
answer (a value numbered meanwhile) is run here, from the first pass that changes it; the calls already made
are made again with the same answers, so nothing is numbered twice. Where the copy or this process learns a
name in the block (it may stand on any line), the block is finished the ordinary way.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from atomdyn_core.sanitize.sanitizer import NamesState, NumberingState, Sanitizer

__all__ = ["Speculated", "finish_ahead", "sanitize_ahead"]

# The calls written down: (what, arguments..., answer).
_PLACEHOLDER, _KNOWN, _HOST, _USER = 0, 1, 2, 3
Call = tuple[int, str, str | bool, str | None]


class Speculated(NamedTuple):
    """One hit line as the worker's copy sanitized it: its calls with their answers, the line as it came,
    the first pass that changes it (their number where none does), and where its result stands in the
    worker's block (``at``, ``size``). A named tuple: a block carries hundreds, and they cross a pipe."""

    calls: tuple[Call, ...]
    line: str
    stage: int
    at: int
    size: int


class _Recorder(Sanitizer):
    """A sanitizer that writes down the calls that read or change what it knows, with their answers (the
    outermost only: a host numbered through _host is one call)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self._inside = 0

    def _recorded(self, what: int, first: str, second: str | bool, call: Callable[[], str]) -> str:
        if self._inside:
            return call()
        self._inside += 1
        try:
            answer = call()
        finally:
            self._inside -= 1
        self.calls.append((what, first, second, answer))
        return answer

    def _placeholder(self, kind: str, value: str) -> str:
        return self._recorded(_PLACEHOLDER, kind, value, partial(Sanitizer._placeholder, self, kind, value))

    def _known(self, kind: str, value: str) -> str | None:
        answer = super()._known(kind, value)
        if not self._inside:
            self.calls.append((_KNOWN, kind, value, answer))
        return answer

    def _host(self, value: str, learn: bool) -> str:
        return self._recorded(_HOST, value, learn, partial(Sanitizer._host, self, value, learn))

    def _user(self, value: str) -> str:
        return self._recorded(_USER, value, False, partial(Sanitizer._user, self, value))


def sanitize_ahead(
    text: str,
    hits: list[int],
    spans: dict[int, tuple[int, str]],
    names: NamesState,
    numbering: NumberingState,
) -> tuple[list[Speculated], str] | None:
    """The block (ASCII, colour codes removed) as a copy of the sanitizer that gave ``names`` and
    ``numbering`` finishes it: ``hits`` (offsets of line starts) through the passes in order, ``spans`` (the
    known names on the other lines, replaced by a sanitizer that knew ``names``) as they are. None where the
    numbering process must finish the block the ordinary way: a hit line holds other line ends, or the copy
    learned a name."""
    copy = _Recorder()
    copy._hosts, copy._bare = dict(names[0]), dict(names[1])
    copy._safe = names[3]
    copy._maps = {kind: dict(table) for kind, table in numbering[0].items()}
    copy._paths = dict(numbering[1])
    copy._bare_dirty = True
    known = copy.known_count()
    passes = copy._passes
    size = len(text)
    done: list[tuple[tuple[Call, ...], str, int, int, str]] = []  # calls, line, stage, end, result
    for start in hits:
        end = text.find("\n", start) + 1 or size
        line = text[start:end]
        if len(line.splitlines()) != 1:
            return None
        copy.calls = []
        low = line.lower()
        result, stage = line, len(passes)
        for number, one in enumerate(passes):
            changed = one(result, low)
            if stage == len(passes) and changed != result:
                stage = number
            result = changed
        done.append((tuple(copy.calls), line, stage, end, copy._bare_words(result)))
        if copy.known_count() != known:
            return None
    replaced = {start: (end, result) for start, (_, _, _, end, result) in zip(hits, done, strict=True)}
    replaced.update(spans)
    pieces: list[str] = []
    at = pos = 0
    where: dict[int, int] = {}
    for start in sorted(replaced):
        end, result = replaced[start]
        pieces += (text[pos:start], result)
        at += start - pos
        where[start] = at
        at += len(result)
        pos = end
    pieces.append(text[pos:])
    speculated = [
        Speculated(calls, line, stage, where[start], len(result))
        for start, (calls, line, stage, _, result) in zip(hits, done, strict=True)
    ]
    return speculated, "".join(pieces)


# Answers already checked, per finishing sanitizer, valid while it knows the same names: a value keeps its
# placeholder once numbered, but a host named with a domain takes that of its first label once that is learned.
_CHECKED: weakref.WeakKeyDictionary[Sanitizer, tuple[tuple[int, int], dict[Call, None]]] = (
    weakref.WeakKeyDictionary()
)


def _checked(sanitizer: Sanitizer) -> dict[Call, None]:
    known = sanitizer.known_count()
    found = _CHECKED.get(sanitizer)
    if found is None or found[0] != known:
        found = (known, {})
        _CHECKED[sanitizer] = found
    return found[1]


def finish_ahead(
    sanitizer: Sanitizer, speculated: list[Speculated], output: str, known: tuple[int, int]
) -> str | None:
    """The block as ``sanitizer`` finishes it, from ``output`` (the worker's block) and ``speculated`` (its
    hit lines), where the worker's copy knew the same names (``known``, its known count, names only grow);
    None where the block must be finished the ordinary way (the caller passes the known count from before
    this call: a name learned here asks for the hit lines to be run again)."""
    if sanitizer.known_count() != known:
        return None
    patches: list[tuple[int, int, str]] = []
    checked = _checked(sanitizer)  # made before with the same answer: made again, it changes nothing
    for one in speculated:
        for call in one.calls:
            if call in checked:
                continue
            what, first, second, answer = call
            if what == _PLACEHOLDER:
                here: str | None = sanitizer._placeholder(first, str(second))
            elif what == _KNOWN:
                here = sanitizer._known(first, str(second))
            elif what == _HOST:
                here = sanitizer._host(first, bool(second))
            else:
                here = sanitizer._user(first)
            if here != answer:
                patches.append((one.at, one.size, sanitizer._line(one.line, one.stage)))
                break
            if answer is not None:  # "not numbered yet" may change
                checked[call] = None
        if sanitizer.known_count() != known:
            return None
    if not patches:
        return output
    pieces: list[str] = []
    pos = 0
    for at, size, result in patches:
        pieces += (output[pos:at], result)
        pos = at + size
    pieces.append(output[pos:])
    return "".join(pieces)
