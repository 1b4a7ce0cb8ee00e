"""Start daemons detached from the caller, know them by PID + start time, and stop them by PID.

A daemon is identified by its PID and the kernel's start time of that PID (``/proc/PID/stat`` field 22), so a
recycled PID is never mistaken for it. Daemons run in the foreground of a process that the caller does not
own (started through ``sh -c '... &'`` in a new session): they outlive the command that started them and no
``Popen`` object is left to warn about them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_POLL_S = 0.02
# Start "$@" in the background with output appended to the log named by $1; print its PID and return.
SPAWN_SHELL = 'log=$1; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!\n'


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int
    start_time: int

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "pid": self.pid, "start_time": self.start_time}

    @classmethod
    def from_json(cls, raw: Mapping[str, object]) -> Proc:
        return cls(name=str(raw["name"]), pid=int(str(raw["pid"])), start_time=int(str(raw["start_time"])))


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a PID, or None when there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces: split after the last ')'.
    rest = raw[raw.rindex(")") + 2 :].split()
    return rest[0], int(rest[19])


def alive(proc: Proc) -> bool:
    """Running (not a zombie) and still the same process that was started."""
    stat = _stat(proc.pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[1] == proc.start_time


def identify(name: str, pid: int) -> Proc:
    """The running process ``pid`` as a Proc (start time read now)."""
    stat = _stat(pid)
    if stat is None:
        raise ProcessLookupError(f"no process {pid}")
    return Proc(name=name, pid=pid, start_time=stat[1])


def spawn(name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> Proc:
    """Start ``argv`` in a new session with output appended to ``log``; return it as a Proc."""
    log.parent.mkdir(parents=True, exist_ok=True)
    launcher = subprocess.run(
        ["sh", "-c", SPAWN_SHELL, "sh", str(log), *argv],
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        start_new_session=True,
        timeout=10,
        check=True,
    )
    pid = int(launcher.stdout.strip())
    stat = _stat(pid)
    if stat is None:
        raise RuntimeError(f"{name} exited at once; see {log}")
    return Proc(name=name, pid=pid, start_time=stat[1])


def _reap(pid: int) -> None:
    """Collect the exit status when the process happens to be our child (tests); harmless otherwise."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop(procs: Iterable[Proc], *, timeout: float = 5.0) -> list[Proc]:
    """SIGTERM the live procs, wait until all are gone, SIGKILL the rest at the deadline; return those."""
    live = [p for p in procs if alive(p)]
    for proc in live:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while True:
        for proc in live:
            _reap(proc.pid)
        remaining = [p for p in live if alive(p)]
        if not remaining:
            return []
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
    for proc in remaining:
        _signal(proc, signal.SIGKILL)
    wait_gone(remaining, timeout=5.0, what="processes after SIGKILL")
    return remaining


def wait_gone(procs: Sequence[Proc], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for proc in procs:
            _reap(proc.pid)
        left = [p for p in procs if alive(p)]
        if not left:
            return
        if time.monotonic() >= deadline:
            names = ", ".join(f"{p.name}[{p.pid}]" for p in left)
            raise TimeoutError(f"{what} still running after {timeout:.0f} s: {names}")
        time.sleep(_POLL_S)


def _signal(proc: Proc, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, sig)


def netns_inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def procs_in_netns(inodes: set[int]) -> list[Proc]:
    """Every live process whose network namespace is one of ``inodes`` (jobs, steps, daemons alike)."""
    found: list[Proc] = []
    with os.scandir("/proc") as entries:
        pids = [int(e.name) for e in entries if e.name.isdigit()]
    for pid in pids:
        try:
            link = os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            continue
        if int(link[link.index("[") + 1 : -1]) not in inodes:
            continue
        stat = _stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            continue
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            comm = "?"
        found.append(Proc(name=comm, pid=pid, start_time=stat[1]))
    return found
