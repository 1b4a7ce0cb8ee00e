"""Ports per run, so that runs sharing a cluster (two users, or one user twice) never collide on a node.

Each run leases a block of :data:`BLOCK` consecutive ports from :data:`RANGE` (below Linux's ephemeral range,
so an outgoing connection never takes one) and records it twice: a lease file ``<SHARED_DIR>/ports/<run>.json``
that every launcher sharing the filesystem reads under one lock, and ``<run dir>/ports.json`` beside the run's
other records. Inside the block each role gets its own ports, so two roles of one run may share a node too.

A lease ends when the run records its end (``run.json`` exists) or is released; a lease whose launcher process
is gone (same host, PID and start time no longer match) belongs to an *orphaned* run: :mod:`orphans` finds and
cleans those. Processes outside this scheme (another user's service on the node) can still hold a port: each
job script checks its ports on the node before starting anything (:mod:`sbatch`) and names a taken one.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_launchers.contract.ports import Ports

RANGE = (21000, 32760)  # [first, end): Linux's ephemeral ports start at 32768
BLOCK = 85  # http, then (system, bootstrap, nixl side channel, kv events) for up to 21 roles (xPyD layouts)
_ROLE_STRIDE = 4
MAX_ROLES = (BLOCK - 1) // _ROLE_STRIDE


class PortError(RuntimeError):
    """No block is free, or a lease file cannot be used; the message says which and where."""


def role_ports(block_start: int, index: int) -> Ports:
    """The ports of role ``index`` in the block starting at ``block_start`` (the frontend's http is shared:
    one frontend per run)."""
    if not 0 <= index < MAX_ROLES:
        raise PortError(f"role index {index} does not fit a block of {BLOCK} ports")
    first = block_start + 1 + index * _ROLE_STRIDE
    return Ports(
        http=block_start,
        system=first,
        bootstrap=first + 1,
        nixl_side_channel=first + 2,
        kv_events=first + 3,
    )


def named_ports(ports: Ports, listens: Sequence[str], *, with_frontend: bool) -> dict[str, int]:
    """What a job listens on, by name, for the job script's check on the node: the ports its plan says its
    processes bind (fields of :class:`Ports`), and the frontend's."""
    named = {name.replace("_", "-"): int(getattr(ports, name)) for name in listens}
    return {"frontend-http": ports.http, **named} if with_frontend else named


def _start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (/proc/PID/stat field 22), None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


@dataclass(frozen=True)
class Launcher:
    """The process that holds a lease: host, PID and the PID's start time (a recycled PID is not it)."""

    host: str
    pid: int
    start_time: int

    @classmethod
    def current(cls) -> Launcher:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, _start_time(pid) or 0)

    def gone(self) -> bool | None:
        """True when the launcher has exited; None when it runs on another host (cannot tell from here)."""
        if self.host != socket.gethostname():
            return None
        return _start_time(self.pid) != self.start_time

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "start_time": self.start_time}


@dataclass(frozen=True)
class Lease:
    """A run's block of ports and who holds it."""

    run_id: str
    run_dir: Path
    block_start: int
    roles: Mapping[str, Ports]
    launcher: Launcher
    leased_at: float

    @property
    def ports(self) -> list[int]:
        return list(range(self.block_start, self.block_start + BLOCK))

    def recorded(self) -> bool:
        """The run wrote run.json: it ended (passed or failed) and needs its ports no more."""
        return (self.run_dir / "run.json").exists()

    def orphaned(self) -> bool:
        """Not recorded and its launcher is gone (known only for launchers on this host)."""
        return not self.recorded() and self.launcher.gone() is True

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "block": [self.block_start, self.block_start + BLOCK - 1],
            "roles": {
                role: {
                    "http": p.http,
                    "system": p.system,
                    "bootstrap": p.bootstrap,
                    "nixl_side_channel": p.nixl_side_channel,
                    "kv_events": p.kv_events,
                }
                for role, p in self.roles.items()
            },
            "launcher": self.launcher.to_json(),
            "leased_at": self.leased_at,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Lease:
        launcher = raw["launcher"]
        return cls(
            run_id=str(raw["run_id"]),
            run_dir=Path(str(raw["run_dir"])),
            block_start=int(raw["block"][0]),
            roles={str(role): Ports(**{k: int(v) for k, v in p.items()}) for role, p in raw["roles"].items()},
            launcher=Launcher(str(launcher["host"]), int(launcher["pid"]), int(launcher["start_time"])),
            leased_at=float(raw["leased_at"]),
        )


def lease_dir(shared_dir: Path) -> Path:
    return shared_dir / "ports"


@contextmanager
def _locked(shared_dir: Path) -> Iterator[Path]:
    directory = lease_dir(shared_dir)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield directory


def leases(shared_dir: Path) -> list[Lease]:
    """Every lease file under ``shared_dir`` (a file that does not parse is reported, not skipped)."""
    found: list[Lease] = []
    directory = lease_dir(shared_dir)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            found.append(Lease.from_json(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise PortError(f"port lease {path} is unreadable ({exc}); remove it if no run uses it") from exc
    return found


def _first_free_block(taken: set[int]) -> int:
    """The first free block, searched from a point that depends on the user: users whose SHARED_DIRs differ
    (and so do not see each other's leases) start apart on a node they share."""
    count = (RANGE[1] - RANGE[0]) // BLOCK
    start = (os.getuid() * 37) % count
    for step in range(count):
        block = RANGE[0] + ((start + step) % count) * BLOCK
        if block not in taken:
            return block
    raise PortError(f"all {count} port blocks in {RANGE[0]}-{RANGE[1] - 1} are leased")


def allocate(shared_dir: Path, run_id: str, run_dir: Path, roles: Sequence[tuple[str, int]]) -> Lease:
    """Lease a block for ``run_id`` with ports for each (role, index); write the lease and run_dir/ports.json.

    Leases of recorded runs are dropped first; orphaned runs keep theirs until :mod:`orphans` cleans them (their
    jobs may still hold the ports)."""
    with _locked(shared_dir) as directory:
        taken: set[int] = set()
        for lease in leases(shared_dir):
            if lease.recorded():
                (directory / f"{lease.run_id}.json").unlink(missing_ok=True)
            else:
                taken.add(lease.block_start)
        block = _first_free_block(taken)
        lease = Lease(
            run_id=run_id,
            run_dir=run_dir,
            block_start=block,
            roles={role: role_ports(block, index) for role, index in roles},
            launcher=Launcher.current(),
            leased_at=time.time(),
        )
        atomic_write_json(directory / f"{run_id}.json", lease.to_json())
    atomic_write_json(run_dir / "ports.json", lease.to_json())
    return lease


def release(shared_dir: Path, run_id: str) -> None:
    """End ``run_id``'s lease (its record in the run directory stays)."""
    with _locked(shared_dir) as directory:
        (directory / f"{run_id}.json").unlink(missing_ok=True)
