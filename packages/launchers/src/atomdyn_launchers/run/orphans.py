"""Orphaned runs: runs whose launcher died without recording their end (SIGKILL, a lost login session).

A run's port lease (:mod:`ports`) names its launcher by host, PID and start time and its run directory; the
run is orphaned when that process is gone and no run.json was written. Its jobs stop themselves once the
launcher's etcd key expires (about 15 s), but until then they hold their node and ports, and the lease, the
run's etcd keys and an unfinished run directory stay behind. ``cluster.status`` lists orphaned runs; the next
run and ``cluster.down`` clean them: SIGTERM to the job scripts (they stop their processes), a hard cancel
for a job still there after the settle time, the run's etcd keys deleted, the lease released, and a note
``orphan-cleanup.json`` left in the run directory, with its line in ``logs/orphan-cleanup.log`` (what
``invoke diagnose`` names the run by: it has no run.json).

A run inside an allocation leaves job steps of it instead (its roles', a run-owned etcd's), which ``squeue``'s
work directories do not show: they are found by name, ``<job name>@<run id>`` (``squeue --steps``,
slurm/steps.py), and stopped the same way, each step alone (SIGTERM to its processes, ``scancel ALLOC.STEP``
when it does not end): never the allocation, which stays RUNNING for the next run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.config.etcd import etcd_access
from atomdyn_launchers.contract.readiness import ReadinessError
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import KEY_ROOT
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run import ports
from atomdyn_launchers.slurm.client import JobPoller, Slurm, SlurmError, StepInfo, parse_steps
from atomdyn_launchers.slurm.steps import step_owner

SETTLE_S = 20.0  # a job script honours SIGTERM within its stop grace (5 s); this leaves room for Slurm
CLEANUP_LOG = "orphan-cleanup.log"  # under the run's logs/


@dataclass(frozen=True)
class Orphan:
    lease: ports.Lease
    jobs: dict[int, str]  # job id -> state, for the run's jobs still in the queue
    steps: tuple[StepInfo, ...] = ()  # the run's job steps still listed (a run inside an allocation)

    @property
    def run_id(self) -> str:
        return self.lease.run_id

    def describe(self) -> str:
        who = self.lease.launcher
        listed = [f"job {j} {state}" for j, state in sorted(self.jobs.items())]
        listed += [f"step {s.job_id}.{s.step_id} RUNNING" for s in self.steps]
        jobs = ", ".join(listed) or "no job left"
        return f"run {self.run_id}: launcher pid {who.pid} on {who.host} is gone ({jobs})"


def queued_jobs(slurm: Slurm) -> dict[Path, dict[int, str]]:
    """Run directory -> {job id: state} for this user's queued and running jobs (a run's jobs work in its
    run directory)."""
    out = slurm.run(["squeue", "--me", "-h", "-o", "%i|%T|%Z"])
    found: dict[Path, dict[int, str]] = {}
    for line in out.splitlines():
        job, _, rest = line.strip().partition("|")
        state, _, workdir = rest.partition("|")
        if job.isdigit() and workdir:
            found.setdefault(Path(workdir), {})[int(job)] = state
    return found


def run_steps(slurm: Slurm) -> dict[str, list[StepInfo]]:
    """Run id -> this user's job steps named for that run (``<job name>@<run id>``, slurm/steps.py)."""
    out = slurm.run(["squeue", "--me", "--steps", "-h", "-o", "%i|%j|%N"])
    found: dict[str, list[StepInfo]] = {}
    for step in parse_steps(out):
        owner = step_owner(step.name)
        if owner is not None:
            found.setdefault(owner, []).append(step)
    return found


def find(shared_dir: Path, slurm: Slurm | None) -> list[Orphan]:
    """The orphaned runs whose leases live under ``shared_dir``; their queued jobs and job steps when
    ``slurm`` is given."""
    orphaned = [lease for lease in ports.leases(shared_dir) if lease.orphaned()]
    if not orphaned:
        return []
    queued = queued_jobs(slurm) if slurm is not None else {}
    steps = run_steps(slurm) if slurm is not None else {}
    return [
        Orphan(lease, queued.get(lease.run_dir, {}), tuple(steps.get(lease.run_id, ()))) for lease in orphaned
    ]


def clean(shared_dir: Path, slurm: Slurm, found: Iterable[Orphan], etcd: EtcdClient | None) -> list[str]:
    """Stop the orphans' jobs, delete their etcd keys, release their leases; one line per run saying what."""
    done: list[str] = []
    for orphan in found:
        jobs = sorted(orphan.jobs)
        forced: list[int] = []
        if jobs:
            with suppress(SlurmError):
                slurm.signal_batch(jobs)
            forced = _settle(slurm, jobs)
        steps = [f"{s.job_id}.{s.step_id}" for s in orphan.steps]
        steps_forced = _stop_steps(slurm, orphan.steps) if orphan.steps else []
        keys = "not checked (no etcd)"
        if etcd is not None:
            try:
                etcd.delete_prefix(f"{KEY_ROOT}/{orphan.run_id}/")
                keys = "deleted"
            except ReadinessError as exc:
                keys = f"not deleted ({exc})"
        ports.release(shared_dir, orphan.run_id)
        note = {
            "cleaned_at": time.time(),
            "launcher": orphan.lease.launcher.to_json(),
            "jobs_stopped": jobs,
            "jobs_cancelled_hard": forced,
            "etcd_keys": keys,
            **({"steps_stopped": steps, "steps_cancelled_hard": steps_forced} if steps else {}),
        }
        stopped = f"stopped jobs {', '.join(map(str, jobs))}" if jobs else "no job was left"
        hard = f" ({', '.join(map(str, forced))} cancelled hard)" if forced else ""
        if steps:
            stopped += f"; stopped steps {', '.join(steps)}"
            hard += f" (steps {', '.join(steps_forced)} cancelled hard)" if steps_forced else ""
        what = f"{stopped}{hard}; etcd keys {keys}; ports released"
        record_cleanup(orphan, note, what)
        done.append(f"orphaned run {orphan.run_id}: {what}")
    return done


def record_cleanup(orphan: Orphan, note: dict[str, Any], what: str) -> None:
    """The note ``orphan-cleanup.json`` in the orphan's run directory and its line in the run's logs: a run whose
    launcher died has no run.json, and this line is what its diagnosis names it by."""
    run_dir = orphan.lease.run_dir
    who = orphan.lease.launcher
    with suppress(OSError):  # the run directory may be gone; the lease is released all the same
        atomic_write_json(run_dir / "orphan-cleanup.json", note)
        (run_dir / "logs").mkdir(exist_ok=True)
        with open(run_dir / "logs" / CLEANUP_LOG, "a", encoding="utf-8") as log:
            log.write(
                f"orphan cleanup: launcher pid {who.pid} on {who.host} is gone and never recorded the end of "
                f"run {orphan.run_id}: {what}\n"
            )


def _settle(slurm: Slurm, jobs: list[int]) -> list[int]:
    """Wait (bounded) for ``jobs`` to end; cancel the ones still there. Returns those cancelled hard."""
    poller = JobPoller(slurm)
    deadline = time.monotonic() + SETTLE_S
    while True:
        states = poller.poll(jobs, force=True)
        left = [j for j, info in states.items() if not info.terminal]
        if not left:
            return []
        if time.monotonic() >= deadline:
            with suppress(SlurmError):
                slurm.cancel(left)
            return left
        time.sleep(max(0.0, min(poller.next_due(), deadline) - time.monotonic()))


def _stop_steps(slurm: Slurm, steps: Iterable[StepInfo]) -> list[str]:
    """SIGTERM to each step's processes, a bounded wait until squeue no longer lists them, then the ones left
    cancelled alone (never their allocation). Returns the steps cancelled hard, as ``ALLOC.STEP``."""
    left = {(s.job_id, s.step_id) for s in steps}
    for job, step in sorted(left):
        with suppress(SlurmError):
            slurm.signal_step(job, step)
    deadline = time.monotonic() + SETTLE_S
    while left:
        with suppress(SlurmError):
            listed = {(s.job_id, s.step_id) for job in {j for j, _ in left} for s in slurm.steps(job)}
            left &= listed
        if not left:
            break
        if time.monotonic() >= deadline:
            for job, step in sorted(left):
                with suppress(SlurmError):
                    slurm.cancel_step(job, step)
            return [f"{job}.{step}" for job, step in sorted(left)]
        time.sleep(0.5)
    return []


def clean_before_run(config: ClusterConfig, slurm: Slurm, progress: Progress) -> None:
    """Stop what runs whose launcher died left behind (their jobs, etcd keys and port leases)."""
    try:
        found = find(config.shared_dir, slurm)
    except (ports.PortError, SlurmError) as exc:
        raise PreflightError(f"looking for orphaned runs: {exc}") from exc
    if not found:
        return
    etcd = EtcdClient(etcd_access(config)) if config.etcd_endpoint is not None else None
    for line in clean(config.shared_dir, slurm, found, etcd):
        progress.line(line)
