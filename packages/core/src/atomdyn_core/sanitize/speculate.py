"""Hit lines sanitized ahead of their turn, in a worker process, and checked in file order.

Running a hit line through the patterns is most of the numbering process's work, but only a few calls in it
read or change what the sanitizer knows: the placeholder a value gets (:meth:`Sanitizer._placeholder`, and
``_known`` for one it already has), a host (``_host``) and a user (``_user``), each learning as it numbers.
The rest (the regexes, the keeping rules, the known paths) depends on the line alone.

So a worker runs each hit line through every pass with a copy of the sanitizer as it stood when the range
was sent out (:func:`speculate`), writing down each of those calls with its answer, the line as the passes
left it (before the known names), the line finished, the first pass that changed it and the names it
learned. The finishing sanitizer, in file order (:func:`accept`), makes the same calls itself: where every
answer is the one written down, the passes did on this line what they would have done here, and the calls
have left it knowing and numbering exactly what it would have. The known names are replaced last; the
worker's result stands where no name known differently here (:class:`Follower`) is on the line. Anything
else (a value numbered meanwhile, an answer that differs) and the line is run here, from the pass that
first changes it: the calls already made are made again with the same answers, so nothing is numbered twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from atomdyn_core.sanitize.sanitizer import NamesState, NumberingState, Sanitizer

__all__ = ["Follower", "Speculated", "accept", "speculate"]

# The calls written down: (what, arguments..., answer).
_PLACEHOLDER, _KNOWN, _HOST, _USER = 0, 1, 2, 3
Call = tuple[int, str, str | bool, str | None]


@dataclass(frozen=True, slots=True)
class Speculated:
    """One hit line as a worker sanitized it (see the module's docstring)."""

    calls: tuple[Call, ...]
    passed: str  # after the passes, before the known names
    finished: str | None  # with the known names replaced, where that changed it
    stage: int  # the first pass that changes the line (their number where none does)
    hosts: tuple[tuple[str, str], ...]  # host names learned on the line, with their placeholders
    bare: tuple[tuple[str, str], ...]  # bare words learned on the line


class _Recorder(Sanitizer):
    """A sanitizer that writes down the calls that read or change what it knows, with their answers (the
    outermost only: a host numbered through _host is one call)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self._inside = 0

    def _placeholder(self, kind: str, value: str) -> str:
        if self._inside:
            return super()._placeholder(kind, value)
        self._inside += 1
        try:
            answer = super()._placeholder(kind, value)
        finally:
            self._inside -= 1
        self.calls.append((_PLACEHOLDER, kind, value, answer))
        return answer

    def _known(self, kind: str, value: str) -> str | None:
        answer = super()._known(kind, value)
        if not self._inside:
            self.calls.append((_KNOWN, kind, value, answer))
        return answer

    def _host(self, value: str, learn: bool) -> str:
        if self._inside:
            return super()._host(value, learn)
        self._inside += 1
        try:
            answer = super()._host(value, learn)
        finally:
            self._inside -= 1
        self.calls.append((_HOST, value, learn, answer))
        return answer

    def _user(self, value: str) -> str:
        if self._inside:
            return super()._user(value)
        self._inside += 1
        try:
            answer = super()._user(value)
        finally:
            self._inside -= 1
        self.calls.append((_USER, value, False, answer))
        return answer


def speculate(
    text: str, hits: Iterable[int], names: NamesState, numbering: NumberingState
) -> list[Speculated | None]:
    """Each hit line of ``text`` (offsets of line starts) sanitized by a copy of the sanitizer that gave
    ``names`` and ``numbering``, in order, learning as it goes; None for a line that holds other line ends
    (the finishing sanitizer runs those itself)."""
    copy = _Recorder()
    copy._hosts, copy._bare = dict(names[0]), dict(names[1])
    copy._maps = {kind: dict(table) for kind, table in numbering[0].items()}
    copy._paths = dict(numbering[1])
    copy._bare_dirty = True
    passes = copy._passes
    out: list[Speculated | None] = []
    size = len(text)
    for start in hits:
        end = text.find("\n", start) + 1 or size
        line = text[start:end]
        if len(line.splitlines()) != 1:
            out.append(None)
            continue
        copy.calls = []
        hosts_before, bare_before = len(copy._hosts), len(copy._bare)
        low = line.lower()
        passed, stage = line, len(passes)
        for number, one in enumerate(passes):
            changed = one(passed, low)
            if stage == len(passes) and changed != passed:
                stage = number
            passed = changed
        finished = copy._bare_words(passed)
        out.append(
            Speculated(
                tuple(copy.calls),
                passed,
                None if finished == passed else finished,
                stage,
                _added(copy._hosts, hosts_before),
                _added(copy._bare, bare_before),
            )
        )
    return out


def _added(table: dict[str, str], before: int) -> tuple[tuple[str, str], ...]:
    """The entries added after the first ``before`` (names are only ever added, in order)."""
    extra = len(table) - before
    return tuple(reversed(list(islice(reversed(table.items()), extra)))) if extra else ()


class Follower:
    """The names the worker knew, line after line (it learned as it went), to tell where its replacements of
    the known names may differ from the finishing sanitizer's: names that one of them lacks, or that they
    replace differently (lower case, as the names are looked for)."""

    def __init__(self, names: NamesState) -> None:
        self.hosts, self.bare = dict(names[0]), dict(names[1])
        self._differing: tuple[tuple[int, int, int, int], frozenset[str]] | None = None

    def learn(self, speculated: Speculated) -> None:
        self.hosts.update(speculated.hosts)
        self.bare.update(speculated.bare)

    def differing(self, sanitizer: Sanitizer) -> frozenset[str]:
        key = (len(self.hosts), len(self.bare), *sanitizer.known_count())
        if self._differing is None or self._differing[0] != key:
            hosts = {
                n for n in {*self.hosts, *sanitizer._hosts} if self.hosts.get(n) != sanitizer._hosts.get(n)
            }
            bare = {
                n.lower()
                for n in {*self.bare, *sanitizer._bare}
                if self.bare.get(n) != sanitizer._bare.get(n)
            }
            self._differing = (key, frozenset(hosts | bare))
        return self._differing[1]


def accept(sanitizer: Sanitizer, speculated: Speculated, follower: Follower) -> str | None:
    """The line as ``sanitizer`` sanitizes it, from what the worker did, or None where that may differ (the
    caller runs the line itself, from ``speculated.stage``). The calls are made here either way."""
    follower.learn(speculated)
    for what, first, second, answer in speculated.calls:
        if what == _PLACEHOLDER:
            here: str | None = sanitizer._placeholder(first, str(second))
        elif what == _KNOWN:
            here = sanitizer._known(first, str(second))
        elif what == _HOST:
            here = sanitizer._host(first, bool(second))
        else:
            here = sanitizer._user(first)
        if here != answer:
            return None
    differing = follower.differing(sanitizer)
    if differing:
        low = speculated.passed.lower()
        if any(name in low for name in differing):
            return sanitizer._bare_words(speculated.passed)
    return speculated.passed if speculated.finished is None else speculated.finished
