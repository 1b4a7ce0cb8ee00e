"""What a run observes while it goes on, and the loop that keeps observing while any stage waits.

Every wait of every stage goes through :meth:`Monitor.poll`: it takes the roles' etcd events, reads the job
states from Slurm (at most every ``_POLL_S``), checks that the launcher's etcd presence holds, refreshes the
progress display, and raises :class:`~atomdyn_launchers.run.context.LaunchFailure` for the first role that
fails (a job ended early, a role left etcd). While the run stops (``stopping``), ending jobs are expected.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from pathlib import Path

from atomdyn_launchers.contract.readiness import Registration
from atomdyn_launchers.contract.rundir import JobRecord, format_exit_code
from atomdyn_launchers.engines.base import RolePlan
from atomdyn_launchers.run.context import LaunchFailure, RunContext
from atomdyn_launchers.run.etcd_watch import RoleEvent
from atomdyn_launchers.run.smoke import SmokeResult
from atomdyn_launchers.sbatch import failure_file
from atomdyn_launchers.slurm.client import JobInfo, JobPoller
from atomdyn_launchers.slurm.steps import RoleStep, StepSet

_POLL_S = 0.2  # how often job states are read while waiting on etcd events


class Monitor:
    """The run's jobs, registrations, smoke results and failure, as observed so far."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.plans: dict[str, RolePlan] = {}  # what was submitted, per role
        self.jobs: dict[str, JobRecord] = {}
        self.job_states: dict[str, str] = {}
        self.registrations: dict[str, Registration] = {}
        self.results: list[SmokeResult] = []
        self.failure: str | None = None
        self.stopping = False
        self.hard_cancelled: dict[str, str] = {}  # role -> why its SIGTERM was not delivered
        # role -> its node's Slurm state, where the stop found the node down (a dead slurmd cannot signal a job)
        self.nodes_down: dict[str, str] = {}
        # What the stop could not confirm within its deadlines (a job's end): said as the launcher exits.
        self.unconfirmed: list[str] = []
        self.done_count = 0  # smoke requests answered so far (the progress display)
        self.deadline = 0.0  # of the current wait for readiness
        # Which budget the deadline is, for the timeout's message (None: the readiness budget).
        self.deadline_budget: str | None = None
        # One-shot jobs (the NIXL probe): a job that completes with exit 0 has done its work, not failed.
        self.one_shot = False
        self.finished: set[str] = set()
        self._last_poll = 0.0
        self._poller = JobPoller(ctx.slurm)  # squeue while queued, at a rate that backs off
        # A run inside an allocation (--allocation): its roles' job steps, by role (slurm/steps.py).
        self.steps: StepSet | None = None

    # -- what was seen -----------------------------------------------------------------------------------

    def event(
        self, event: str, *, role: str | None = None, job_id: int | None = None, detail: str | None = None
    ) -> None:
        record = self.ctx.rundir.event(event, role=role, job_id=job_id, detail=detail)
        if self.ctx.hook is not None:
            self.ctx.hook(event, {**record, "run": self})

    def fail(self, message: str) -> None:
        """The run's failure: the first one named stands."""
        if self.failure is None:
            self.failure = message
            self.ctx.progress.line(f"FAILED: {message}")
            self.event("failed", detail=message)

    def active_jobs(self) -> dict[str, int]:
        """The roles' batch jobs: never a step's allocation, which a stop must not signal or cancel."""
        steps = self.steps.steps if self.steps is not None else {}
        return {
            role: rec.job_id
            for role, rec in self.jobs.items()
            if rec.job_id is not None and role not in steps
        }

    def role_steps(self) -> dict[str, RoleStep]:
        """The roles started as job steps of an allocation (empty for a run of batch jobs)."""
        return dict(self.steps.steps) if self.steps is not None else {}

    def job_label(self, role: str) -> str:
        """``job N`` for a batch job, ``step N.M`` for a step of an allocation."""
        step = self.role_steps().get(role)
        return f"step {step.step}" if step is not None else f"job {self.jobs[role].job_id}"

    def frontend_url(self) -> str:
        """The frontend's address, from its role's registration."""
        reg = self.registrations[self.ctx.frontend_role.role]
        return f"http://{reg.host}:{reg.ports['frontend']}"

    def served_model_name(self) -> str:
        return next(iter(self.plans.values())).served_model_name

    def show(self) -> None:
        total = self.ctx.options.resolved_requests()
        done = self.done_count if self.results or self.done_count else None
        modes = {r.role: r.mode for r in self.ctx.roles}
        self.ctx.progress.status(dict(self.job_states), set(self.registrations), done, total, modes)

    # -- waiting -----------------------------------------------------------------------------------------

    def poll(self, timeout_s: float = _POLL_S) -> None:
        """Wait up to ``timeout_s`` for an etcd event, then read job states; raise on the first failure."""
        events = self.ctx.etcd.events
        try:
            event: RoleEvent | None = events.get(timeout=timeout_s)
        except queue.Empty:
            event = None
        while event is not None:
            self._on_role_event(event)
            try:
                event = events.get_nowait()
            except queue.Empty:
                event = None
        if time.monotonic() - self._last_poll >= _POLL_S:
            self._last_poll = time.monotonic()
            lost = None if self.stopping else self.ctx.etcd.presence.lost()
            if lost is not None:
                raise LaunchFailure(lost)
            self._check_jobs()
        self.show()

    def wait_until(self, what: str, done: Callable[[], str | None]) -> None:
        """Poll until ``done`` returns None (it returns what is still missing), up to ``deadline``."""
        while True:
            missing = done()
            if missing is None:
                return
            if time.monotonic() >= self.deadline:
                budget = self.deadline_budget or f"after {self.ctx.ready_timeout_s:.0f} s"
                raise LaunchFailure(f"timed out {budget} waiting for {what}: {missing}")
            self.poll()

    def role_failure(self, role: str) -> str:
        """What the role's job script recorded as the reason it failed ("" when it recorded none)."""
        path = Path(failure_file(str(self.ctx.rundir.path / "logs"), role))
        try:
            text = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""
        return f": {text}" if text else ""

    def _on_role_event(self, event: RoleEvent) -> None:
        if event.kind == "watch-error":
            raise LaunchFailure(f"lost the etcd watch: {event.detail}")
        if event.kind == "registered" and event.registration is not None:
            reg = event.registration
            self.registrations[event.role] = reg
            job = self.jobs.get(event.role)
            self.event(
                "registered",
                role=event.role,
                job_id=job.job_id if job else None,
                detail=f"node {reg.node} host {reg.host} ports {dict(reg.ports)}",
            )
        elif event.kind == "deregistered" and not self.stopping:
            reason = self.role_failure(event.role) or " (its processes stopped)"
            raise LaunchFailure(
                f"role {event.role} left etcd{reason} "
                f"(see logs/{event.role}.slurm.out and logs/{event.role}.*.log)"
            )

    def role_infos(self) -> dict[str, JobInfo]:
        """Every started role's job or step as Slurm (or, for a step, its srun) reports it now."""
        active = self.active_jobs()
        infos = self._poller.poll(active.values())
        found = {role: infos[job_id] for role, job_id in active.items()}
        if self.steps is not None:
            for step in self.steps.discover():
                self.jobs[step.role].step_id = step.step_id
            found.update(self.steps.infos(self.steps.steps))
        return found

    def _check_jobs(self) -> None:
        infos = self.role_infos()
        for role, record in self.jobs.items():
            if record.job_id is None or role not in infos:
                continue
            info = infos[role]
            previous = self.job_states.get(role, "").split(" ")[0]
            waiting = info.state == "PENDING" and info.reason not in (None, "None", "Priority")
            self.job_states[role] = f"{info.state} ({info.reason})" if waiting else info.state
            if info.state != previous and info.state in ("PENDING", "RUNNING"):
                detail = f"reason {info.reason}" if info.state == "PENDING" and info.reason else info.nodes
                if info.step_id is not None:
                    detail = f"{detail} (step {record.job_id}.{info.step_id})"
                self.event(info.state.lower(), role=role, job_id=record.job_id, detail=detail)
            if info.terminal and self.one_shot and info.succeeded and role not in self.finished:
                self.finished.add(role)
                self.event("finished", role=role, job_id=record.job_id, detail=info.nodes)
            elif info.terminal and not self.stopping and role not in self.finished:
                raise LaunchFailure(
                    f"{self.job_label(role)} ({role}) ended early: {info.state}, "
                    f"exit {format_exit_code(info.exit_code)}{self.role_failure(role)} (see logs/{role}.slurm.out)"
                )
