"""Live progress lines while a run waits and works: one line per change, stamped with elapsed time."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.started = time.monotonic()
        self._last_status = ""
        self._lock = threading.Lock()

    def line(self, message: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.stream.write(f"[{time.monotonic() - self.started:6.1f}s] {message}\n")
            self.stream.flush()

    def status(
        self, jobs: dict[str, str], registered: set[str], done: int | None = None, total: int = 0
    ) -> None:
        """Print the run's state (jobs, registered roles, requests) when it changed since the last line."""
        parts = [f"{role}: {state}" for role, state in jobs.items()]
        parts.append("registered: " + (", ".join(sorted(registered)) or "none"))
        if done is not None:
            parts.append(f"requests {done}/{total}")
        text = " | ".join(parts)
        if text != self._last_status:
            self._last_status = text
            self.line(text)
