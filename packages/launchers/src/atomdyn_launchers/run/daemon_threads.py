"""Requests sent on daemon threads, so that one still in flight when a run stops never holds up the launcher.

A ``ThreadPoolExecutor``'s workers are not daemon threads: Python joins every one of them when the interpreter
exits, without a deadline, so a request still waiting for its answer (up to ``--request-timeout``, 120 s by
default, per read) kept a stopped launcher from exiting, and a pool whose remaining requests were never told to
stop sent every one of them first. These workers are daemon threads: the stages stop them by their own event
(requests not yet sent are not sent), wait a bounded time, and the process exits whatever is still in flight.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class DaemonWorkers(Generic[T, R]):
    """``fn`` over ``items`` on at most ``concurrency`` daemon threads; each outcome is posted to ``done`` as
    (index of the item, result or the exception it raised), as it lands."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], concurrency: int, name: str) -> None:
        self.fn = fn
        self.items = list(items)
        self.done: queue.Queue[tuple[int, R | BaseException]] = queue.Queue()
        self._next = 0
        self._lock = threading.Lock()
        count = max(1, min(concurrency, len(self.items)))
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{n}", daemon=True) for n in range(count)
        ]

    def start(self) -> DaemonWorkers[T, R]:
        for thread in self._threads:
            thread.start()
        return self

    def alive(self) -> int:
        """Threads still working (a request in flight, or items left)."""
        return sum(1 for t in self._threads if t.is_alive())

    def _take(self) -> int | None:
        with self._lock:
            if self._next >= len(self.items):
                return None
            self._next += 1
            return self._next - 1

    def _work(self) -> None:
        while (index := self._take()) is not None:
            try:
                outcome: R | BaseException = self.fn(self.items[index])
            except BaseException as exc:  # handed to the caller, which raises it
                outcome = exc
            self.done.put((index, outcome))


def map_in_daemons(fn: Callable[[T], R], items: Sequence[T], concurrency: int, name: str) -> list[R]:
    """``fn`` over ``items``, at most ``concurrency`` at a time on daemon threads; the results in the items'
    order; the first exception raised (in the items' order of completion) is raised here."""
    workers = DaemonWorkers(fn, items, concurrency, name).start()
    results: dict[int, R] = {}
    for _ in workers.items:
        index, outcome = workers.done.get()
        if isinstance(outcome, BaseException):
            raise outcome
        results[index] = outcome
    return [results[i] for i in range(len(workers.items))]
