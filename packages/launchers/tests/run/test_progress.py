"""Progress lines: plain text (the same in a log as on a terminal), readiness per mode, heartbeats."""

from __future__ import annotations

import threading
from io import StringIO

import pytest

import atomdyn_launchers.progress as progress_module
from atomdyn_launchers.progress import Progress, ready_summary


def test_ready_summary_counts_per_mode() -> None:
    modes = {"prefill1": "prefill", "prefill2": "prefill", **{f"decode{i}": "decode" for i in range(1, 5)}}
    assert (
        ready_summary(modes, {"prefill1", "decode1", "decode2", "decode3", "decode4"}) == "1/2 P 4/4 D ready"
    )
    assert ready_summary({"agg1": "agg", "agg2": "agg"}, set()) == "0/2 A ready"


def test_status_lines_only_on_change_and_without_escape_codes() -> None:
    out = StringIO()
    progress = Progress(out)
    jobs = {f"decode{i}": "RUNNING" for i in range(1, 5)}
    modes = dict.fromkeys(jobs, "decode")
    progress.status(jobs, set(), modes=modes)
    progress.status(jobs, set(), modes=modes)
    progress.status(jobs, {"decode1"}, 3, 8, modes=modes)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("jobs RUNNING x4 | 0/4 D ready")
    assert lines[1].endswith("jobs RUNNING x4 | 1/4 D ready | requests 3/8")
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


class _Lines(StringIO):
    """A stream that signals each line written (the heartbeat's thread writes them)."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = threading.Event()

    def write(self, text: str) -> int:
        n = super().write(text)
        self.wrote.set()
        return n


def test_heartbeat_says_what_runs_until_it_ends() -> None:
    out = _Lines()
    progress = Progress(out)
    with progress.heartbeat("node build on node1", interval_s=0.05) as beat:
        beat.note("step 3/7")
        assert out.wrote.wait(timeout=10), "no heartbeat line within 10 s"
    text = out.getvalue()
    assert "node build on node1: still running (" in text and "s): step 3/7" in text
    out.wrote.clear()
    assert not out.wrote.wait(timeout=0.2), "a heartbeat line after the block ended"


def test_an_unchanged_status_is_repeated_as_a_heartbeat() -> None:
    out = StringIO()
    progress = Progress(out, heartbeat_s=0.0)  # every call past the first is "unchanged"
    progress.status({"prefill": "RUNNING"}, set(), modes={"prefill": "prefill"})
    progress.status({"prefill": "RUNNING"}, set(), modes={"prefill": "prefill"})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert "prefill: RUNNING | 0/1 P ready (unchanged for 0 s)" in lines[1]


def test_an_unchanged_status_is_repeated_once_per_heartbeat_not_at_every_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen in a real run: past the first 30 s every 0.2 s poll printed an "unchanged for" line.
    clock = [1000.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    out = StringIO()
    progress = Progress(out, heartbeat_s=30.0)
    for _ in range(300):  # a minute of polls, one every 0.2 s
        progress.status({"prefill": "RUNNING"}, set(), modes={"prefill": "prefill"})
        clock[0] += 0.2
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines  # the status, then one heartbeat at 30 s (the next is due at 60 s)
    assert lines[1].endswith("(unchanged for 30 s)")
