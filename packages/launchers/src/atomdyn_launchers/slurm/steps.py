"""A run's roles as job steps of an existing allocation (``--allocation``), watched like batch jobs.

Each role is one ``srun --jobid=ALLOC --nodelist=NODE --nodes=1 --ntasks=1 --overlap`` of the same job script a
batch run submits, started as the launcher's child in a session of its own (:meth:`Slurm.start_step`), its
output in the role's ``logs/<role>.slurm.out`` as sbatch's ``--output`` writes it. The step's id
(``ALLOC.STEP``) is read from ``squeue --steps`` once the controller lists it (by its name and node, among the
steps that were not there before the run started its own). How it ended is srun's exit status, which is the
task's: 0, the script's own status, or 128 + the signal that killed it (a batch job's ``N:0``). That holds with and without
accounting (the local cluster has none, so ``sacct`` knows no step there).

A step is stopped by SIGTERM to its processes (``scancel --signal=TERM ALLOC.STEP``; the script forwards it and
waits for its processes as it does in a batch job) and, when it does not end, cancelled alone
(``scancel ALLOC.STEP``). Nothing here ever cancels the allocation: a failed run leaves it RUNNING for the next.

The node check's jobs and a run-owned etcd start the same way inside an allocation (``nodes/jobs.py``,
``nodes/etcd_owned.py``): no batch job of a run inside an allocation queues. Every step's name is the batch
job's name and, after ``@``, what it belongs to (:func:`step_name`: the run's id; a node check's work
directory), so ``squeue --steps`` tells whose a step is, two runs in one allocation never take each other's
steps, and a later run's orphan cleanup finds the steps a killed launcher left (``run/orphans.py``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_launchers.slurm.client import JobInfo, Slurm, SlurmError

DISCOVER_S = 0.5  # between two ``squeue --steps`` while a started step is not listed yet
OWNER_SEP = "@"  # in a step's name: what the step belongs to follows it


def step_name(name: str, owner: str) -> str:
    """A step's name: ``name`` (the batch job's, e.g. ``atomdyn-prefill``) and ``@owner`` (a run's id)."""
    return f"{name}{OWNER_SEP}{owner}"


def step_owner(name: str) -> str | None:
    """What a step named by :func:`step_name` belongs to; None for another step."""
    _, sep, owner = name.rpartition(OWNER_SEP)
    return owner if sep and owner else None


@dataclass
class RoleStep:
    """One role's step: its srun process, and the step id and node once Slurm lists it."""

    role: str
    allocation: int
    name: str
    node: str
    process: subprocess.Popen[bytes]
    step_id: int | None = None
    nodes: str | None = None
    cancelled_hard: bool = False

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    @property
    def step(self) -> str:
        """``ALLOC.STEP``, or ``ALLOC.?`` while the step is not listed yet."""
        return f"{self.allocation}.{'?' if self.step_id is None else self.step_id}"

    def info(self) -> JobInfo:
        """The step as :class:`JobInfo`: PENDING until listed, RUNNING while srun runs, then from srun's exit
        status N (the task's; 128 + S when a signal S ended it): 0 is COMPLETED 0:0, any other FAILED N:0, as
        a batch script's own exit reads; a step the launcher cancelled hard is CANCELLED. srun itself ended by
        a signal S: FAILED 0:S."""
        code = self.returncode
        if code is None:
            if self.step_id is None:
                return self._info("PENDING", "StepNotListed", None)
            return self._info("RUNNING", None, None)
        state = "CANCELLED" if self.cancelled_hard else "FAILED"
        if code == 0:
            return self._info("COMPLETED", None, (0, 0))
        if code > 0:
            return self._info(state, None, (code, 0))
        return self._info(state, f"srun ended by signal {-code}", (0, -code))

    def _info(self, state: str, reason: str | None, exit_code: tuple[int, int] | None) -> JobInfo:
        return JobInfo(
            job_id=self.allocation,
            name=self.name,
            state=state,
            reason=reason,
            nodes=self.nodes,
            exit_code=exit_code,
            derived_exit_code=None,
            source="srun",
            step_id=self.step_id,
        )

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for srun to exit; True when it did."""
        try:
            self.process.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            return False
        return True

    def cancel(self, slurm: Slurm) -> None:
        """Cancel the step hard (``scancel ALLOC.STEP``), never its allocation; a step not listed yet has no
        processes: its srun is stopped (it withdraws the request, or forwards the signal to a step just
        started)."""
        if self.returncode is not None:
            return
        self.cancelled_hard = True
        if self.step_id is None:
            self.process.terminate()
            return
        slurm.cancel_step(self.allocation, self.step_id)


@dataclass
class StepSet:
    """The steps a run started in one allocation, and the step ids that were there before it."""

    slurm: Slurm
    allocation: int
    before: frozenset[int] = frozenset()
    steps: dict[str, RoleStep] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    _due: float = 0.0

    @classmethod
    def open(cls, slurm: Slurm, allocation: int) -> StepSet:
        return cls(slurm, allocation, frozenset(s.step_id for s in slurm.steps(allocation)))

    def start(
        self,
        role: str,
        args: Sequence[str],
        script: Path,
        *,
        name: str,
        node: str,
        log: Path,
        env: Mapping[str, str] | None = None,
    ) -> RoleStep:
        process = self.slurm.start_step(args, script, log=log, env=env)
        step = RoleStep(role, self.allocation, name, node, process)
        self.steps[role] = step
        return step

    def live(self) -> dict[str, RoleStep]:
        return {role: s for role, s in self.steps.items() if s.returncode is None}

    def discover(self, *, force: bool = False) -> list[RoleStep]:
        """Read ``squeue --steps`` (at most every DISCOVER_S unless ``force``) for the started steps not yet
        listed; the steps it found."""
        waiting = [s for s in self.steps.values() if s.step_id is None and s.returncode is None]
        now = self.clock()
        if not waiting or (not force and now < self._due):
            return []
        self._due = now + DISCOVER_S
        claimed = {s.step_id for s in self.steps.values() if s.step_id is not None}
        listed = [s for s in self.slurm.steps(self.allocation) if s.step_id not in self.before | claimed]
        found = []
        for step in waiting:
            match = next((s for s in listed if s.name == step.name and s.nodes == step.node), None)
            if match is not None:
                listed.remove(match)
                step.step_id, step.nodes = match.step_id, match.nodes
                found.append(step)
        return found

    def infos(self, roles: Iterable[str]) -> dict[str, JobInfo]:
        return {role: self.steps[role].info() for role in roles if role in self.steps}

    def stop(self, role: str, timeout_s: float) -> JobInfo:
        """Stop one step as a job script is stopped: SIGTERM to its processes (``scancel --signal=TERM``), up to
        ``timeout_s`` for srun to exit, then cancelled hard and waited for again; how it ended."""
        step = self.steps[role]
        if step.returncode is None and step.step_id is None:
            with suppress(SlurmError):
                self.discover(force=True)
        if step.returncode is None:
            if step.step_id is None:
                step.process.terminate()
            else:
                with suppress(SlurmError):
                    self.slurm.signal_step(step.allocation, step.step_id)
            if not step.wait(timeout_s):
                with suppress(SlurmError):
                    step.cancel(self.slurm)
                step.wait(timeout_s)
        return step.info()

    def cancel_live(self) -> None:
        """Cancel hard every step of the set still running (a check that timed out or was interrupted)."""
        for step in self.live().values():
            with suppress(SlurmError):
                step.cancel(self.slurm)
        for step in self.steps.values():
            step.wait(10.0)
