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
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_launchers.slurm.client import JobInfo, Slurm

DISCOVER_S = 0.5  # between two ``squeue --steps`` while a started step is not listed yet


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
