"""Live progress for long work, the same in a terminal and in a log: one stamped line per change, plain text.

No cursor movement or colour: a log file reads exactly what a terminal showed. Three kinds of line:
``line`` (a stage or event), ``status`` (the run's state when it changed: jobs, "1/2 P 4/4 D ready",
requests), and :class:`Heartbeat` (while something runs that reports nothing, a line every interval saying
what is awaited and for how long, so a silent build or validation is visibly alive).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TextIO

_MODE_LETTER = {"prefill": "P", "decode": "D", "agg": "A"}


def ready_summary(modes: Mapping[str, str], registered: set[str]) -> str:
    """ "2/4 P 4/4 D ready" from role -> mode (prefill | decode | agg) and the roles registered so far."""
    parts = []
    for mode, letter in _MODE_LETTER.items():
        roles = [r for r, m in modes.items() if m == mode]
        if roles:
            parts.append(f"{sum(1 for r in roles if r in registered)}/{len(roles)} {letter}")
    return " ".join(parts) + " ready" if parts else "no roles"


class Progress:
    def __init__(self, stream: TextIO | None = None, enabled: bool = True, heartbeat_s: float = 30.0) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.started = time.monotonic()
        self.heartbeat_s = heartbeat_s  # an unchanged status is repeated this often: the wait is alive
        self._last_status = ""
        self._last_status_t = 0.0  # when the status last changed (how long it has been unchanged)
        self._last_line_t = 0.0  # when it was last printed (the next heartbeat is due heartbeat_s later)
        self._lock = threading.Lock()

    def line(self, message: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.stream.write(f"[{time.monotonic() - self.started:6.1f}s] {message}\n")
            self.stream.flush()

    def status(
        self,
        jobs: dict[str, str],
        registered: set[str],
        done: int | None = None,
        total: int = 0,
        modes: Mapping[str, str] | None = None,
    ) -> None:
        """Print the run's state (jobs, roles ready per mode, requests) when it changed since the last line.

        With many workers the job states are summarised per state ("RUNNING x5, PENDING x1")."""
        if len(jobs) > 3:
            counts: dict[str, int] = {}
            for state in jobs.values():
                counts[state] = counts.get(state, 0) + 1
            parts = ["jobs " + ", ".join(f"{s} x{n}" for s, n in counts.items())]
        else:
            parts = [f"{role}: {state}" for role, state in jobs.items()]
        if modes:
            parts.append(ready_summary(modes, registered))
        else:
            parts.append("registered: " + (", ".join(sorted(registered)) or "none"))
        if done is not None:
            parts.append(f"requests {done}/{total}")
        text = " | ".join(parts)
        now = time.monotonic()
        if text != self._last_status:
            self._last_status, self._last_status_t, self._last_line_t = text, now, now
            self.line(text)
        elif now - self._last_line_t >= self.heartbeat_s:
            self._last_line_t = now
            self.line(f"{text} (unchanged for {now - self._last_status_t:.0f} s)")

    @contextmanager
    def heartbeat(self, what: str, interval_s: float | None = None) -> Iterator[Heartbeat]:
        """While the block runs, a line every ``interval_s`` (default $ATOMDYN_HEARTBEAT_S, else 15 s) saying
        what is awaited and for how long."""
        if interval_s is None:
            interval_s = float(os.environ.get("ATOMDYN_HEARTBEAT_S") or 15.0)
        beat = Heartbeat(self, what, interval_s)
        beat.start()
        try:
            yield beat
        finally:
            beat.stop()


class Heartbeat:
    """A thread that prints "<what>: still running (N s)" until stopped; ``note`` adds the latest detail."""

    def __init__(self, progress: Progress, what: str, interval_s: float) -> None:
        self.progress = progress
        self.what = what
        self.interval_s = interval_s
        self.detail = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat {what}", daemon=True)
        self._start = time.monotonic()

    def start(self) -> None:
        self._start = time.monotonic()
        self._thread.start()

    def note(self, detail: str) -> None:
        self.detail = detail

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            extra = f": {self.detail}" if self.detail else ""
            self.progress.line(f"{self.what}: still running ({time.monotonic() - self._start:.0f} s){extra}")
