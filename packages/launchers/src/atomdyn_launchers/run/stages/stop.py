"""Stage stop: SIGTERM to each job script (it stops its processes and exits 0), then wait until Slurm has
every job ended; a job that cannot be stopped so is cancelled hard. A stop never fails on a Slurm error.

A role started as a step of an allocation gets SIGTERM through ``scancel --signal=TERM ALLOC.STEP`` (every
process of the step; the script forwards it and waits as in a batch job) and, when it does not end, is cancelled
alone (``scancel ALLOC.STEP``): a stop never signals or cancels the allocation itself.

Every wait here has a deadline, and together they are bounded, however slow the controller: the graceful stop
(each job's state, its SIGTERM and its retries, the settle) works under one budget, SIGNAL_RETRY_S and the
settle timeout, past which no Slurm command waits (``Slurm.deadline``); a hard cancel gets the settle timeout
again. A job not seen ended by then is named in ``Monitor.unconfirmed``, and the launcher exits saying so
instead of waiting on."""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import suppress

from atomdyn_launchers.run.context import RunContext
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.slurm.client import JobInfo, JobPoller, SlurmError
from atomdyn_launchers.slurm.steps import RoleStep

SIGNAL_RETRY_S = 30.0  # how long a refused SIGTERM is retried before the job is cancelled hard
SIGNAL_RETRY_INTERVAL_S = 1.0
SLURM_SILENT = "Slurm did not answer"  # why the settle saw no end: the controller's silence


def stop(ctx: RunContext, monitor: Monitor) -> None:
    """Stop every job gracefully (SIGTERM to the job script only), then wait until Slurm settles, up to the
    settle timeout; all of it within SIGNAL_RETRY_S more. What has not ended then is cancelled hard."""
    monitor.stopping = True
    budget = SIGNAL_RETRY_S + ctx.settle_timeout_s
    deadline = time.monotonic() + budget
    with ctx.slurm.deadline(deadline, f"the stop's {budget:.0f} s to signal the jobs and see them end"):
        if not _signal_all(ctx, monitor, deadline):
            return
        ctx.progress.line(
            f"stopping {', '.join(_started(monitor)) or 'nothing'}; waiting for Slurm to settle"
        )
        left = _settle(ctx, monitor, min(time.monotonic() + ctx.settle_timeout_s, deadline))
        if left and SLURM_SILENT not in left.values():  # a silent controller is not asked once more
            _read_nodes_down(ctx, monitor, left)
    if left:
        ctx.progress.line(
            f"jobs did not stop within the settle timeout: cancelling them ({_described(left, monitor)})"
        )
        cancel_hard(ctx, monitor)


def _read_nodes_down(ctx: RunContext, monitor: Monitor, roles: Iterable[str]) -> None:
    """Why a job did not stop where Slurm knows: its node down (a dead slurmd: scancel goes through it)."""
    nodes = {role: monitor.jobs[role].node_ran or monitor.jobs[role].node_requested for role in roles}
    try:
        down = ctx.slurm.unavailable_nodes(n for n in nodes.values() if n)
    except SlurmError:
        return  # the controller does not answer: the stop's own messages say so
    for role, node in nodes.items():
        if node in down:
            monitor.nodes_down[role] = f"Slurm has {node} {down[node]}"


def _started(monitor: Monitor) -> list[str]:
    return [*monitor.active_jobs(), *(r for r, s in monitor.role_steps().items() if s.returncode is None)]


def _signal_all(ctx: RunContext, monitor: Monitor, deadline: float) -> bool:
    """SIGTERM each job script (a pending job is cancelled) and each step; False when nothing was started."""
    slurm = ctx.slurm
    active = monitor.active_jobs()
    steps = {role: step for role, step in monitor.role_steps().items() if step.returncode is None}
    if not active and not steps:
        return False
    live: dict[str, tuple[int, str]] = {}
    for role, job_id in active.items():
        try:
            info = slurm.job(job_id)
        except SlurmError:
            live[role] = (job_id, "UNKNOWN")  # not read: signalled all the same
            continue
        if not info.terminal:
            live[role] = (job_id, info.state)
    for role, (job_id, job_state) in live.items():
        if job_state == "PENDING":
            try:
                slurm.cancel([job_id])  # no script to signal yet
            except SlurmError as exc:
                ctx.progress.line(f"{role}: could not cancel pending job {job_id}: {exc}")
                continue
            monitor.event("cancelled", role=role, job_id=job_id, detail="cancelled while pending")
            continue
        _signal_job_script(ctx, monitor, role, job_id, deadline)
    for role, step in steps.items():
        _signal_step(ctx, monitor, role, step)
    return True


def cancel_hard(ctx: RunContext, monitor: Monitor) -> None:
    """scancel every job of the run (a second interrupt, or a stop that did not settle) and wait for them, up
    to the settle timeout again; what is still not seen ended then is named in ``monitor.unconfirmed``."""
    budget = ctx.settle_timeout_s
    deadline = time.monotonic() + budget
    with ctx.slurm.deadline(deadline, f"the hard cancel's {budget:.0f} s"):
        active = list(monitor.active_jobs().values())
        steps = {role: step for role, step in monitor.role_steps().items() if step.returncode is None}
        if active:
            try:
                ctx.slurm.cancel(active)
            except SlurmError as exc:
                ctx.progress.line(f"could not cancel jobs {active}: {exc}")
        for role, step in steps.items():
            step.cancelled_hard = True
            if step.step_id is None:  # not listed yet: srun gives up its request on SIGTERM
                step.process.terminate()
                continue
            try:
                ctx.slurm.cancel_step(step.allocation, step.step_id)
            except SlurmError as exc:
                ctx.progress.line(f"{role}: could not cancel step {step.step}: {exc}")
        left = _settle(ctx, monitor, deadline) if active or steps else {}
        # Read again now: the controller marks a node whose slurmd died down only after SlurmdTimeout.
        if SLURM_SILENT not in left.values():
            _read_nodes_down(ctx, monitor, (r for r in monitor.jobs if r not in monitor.nodes_down))
    for role, why in left.items():
        label = monitor.job_label(role)
        seen = monitor.job_states.get(role, "never read")
        monitor.unconfirmed.append(
            f"{label} ({role}) ended: last seen {seen}; {why} within {budget:.0f} s of scancel "
            f"(see squeue -j {monitor.jobs[role].job_id})"
        )
    if left:
        ctx.progress.line(f"jobs had not ended {budget:.0f} s after scancel ({_described(left)})")


def _described(left: dict[str, str], monitor: Monitor | None = None) -> str:
    down = monitor.nodes_down if monitor is not None else {}
    return ", ".join(
        f"{role}: {why}" + (f"; {down[role]}" if role in down else "") for role, why in left.items()
    )


def _signal_step(ctx: RunContext, monitor: Monitor, role: str, step: RoleStep) -> None:
    """SIGTERM every process of the role's step; a step not listed yet has no processes: its srun is stopped
    (it withdraws the request). What is not stopped so is cancelled by the settle's timeout."""
    if step.step_id is None and monitor.steps is not None:
        with suppress(SlurmError):
            monitor.steps.discover(force=True)
    if step.step_id is None:
        step.process.terminate()
        detail = "srun stopped before its step was listed"
    else:
        monitor.jobs[role].step_id = step.step_id
        try:
            ctx.slurm.signal_step(step.allocation, step.step_id)
        except SlurmError as exc:
            ctx.progress.line(f"{role}: SIGTERM to step {step.step} not delivered ({exc})")
            return
        detail = f"SIGTERM to step {step.step}"
    monitor.event("cancelled", role=role, job_id=step.allocation, detail=detail)


def _signal_job_script(
    ctx: RunContext, monitor: Monitor, role: str, job_id: int, stop_deadline: float
) -> None:
    """SIGTERM the job script only (it forwards it and waits for its processes). A refused scancel is
    retried while the job still runs: under load slurmctld can time out, and cancelling then would end a
    healthy job as CANCELLED. Cancelled hard only when the signal cannot be delivered for SIGNAL_RETRY_S, or
    by the stop's deadline."""
    slurm = ctx.slurm
    deadline = min(time.monotonic() + SIGNAL_RETRY_S, stop_deadline)
    while True:
        try:
            slurm.signal_batch([job_id])
        except SlurmError as exc:
            error = str(exc)
        else:
            monitor.event("cancelled", role=role, job_id=job_id, detail="SIGTERM to the job script")
            return
        try:
            info: JobInfo | None = slurm.job(job_id)
        except SlurmError:
            info = None
        if info is not None and (info.terminal or info.state == "COMPLETING"):
            detail = f"scancel failed ({error}); the job was already {info.state}"
            monitor.event("cancelled", role=role, job_id=job_id, detail=detail)
            return
        if time.monotonic() >= deadline:
            ctx.progress.line(f"{role}: SIGTERM could not be delivered ({error}): cancelling job {job_id}")
            monitor.hard_cancelled[role] = error
            with suppress(SlurmError):  # past the stop's deadline: cancel_hard sends it
                slurm.cancel([job_id])
            monitor.event("cancelled", role=role, job_id=job_id, detail=f"SIGTERM not delivered ({error})")
            return
        ctx.progress.line(f"{role}: SIGTERM not delivered ({error}); retrying")
        time.sleep(SIGNAL_RETRY_INTERVAL_S)  # a retry interval: nothing to wait on but the controller


def _settle(ctx: RunContext, monitor: Monitor, deadline: float) -> dict[str, str]:
    """Wait until every job has ended, up to ``deadline``. A controller that does not answer (slurmctld
    frozen or overloaded) is asked again until then: a stop never fails on a Slurm error. Returns the roles
    not seen ended, each with why (empty: every job ended)."""
    pending = dict(monitor.active_jobs())
    steps = {role: step for role, step in monitor.role_steps().items() if step.returncode is None}
    poller = JobPoller(ctx.slurm)  # a fresh schedule: polled fast while the jobs stop
    silent: str | None = None
    while pending or steps:
        for role, step in list(steps.items()):
            if step.returncode is not None:  # srun exited: the step ended
                monitor.job_states[role] = step.info().state
                del steps[role]
        try:
            infos = poller.poll(pending.values())
        except SlurmError as exc:
            if silent is None:
                ctx.progress.line(f"Slurm did not answer while the jobs stop ({exc}); asking again")
            silent, infos = str(exc), {}
        else:
            silent = None
        for role, job_id in list(pending.items()):
            info = infos.get(job_id)
            if info is None:
                continue
            monitor.job_states[role] = info.state
            if info.terminal:
                del pending[role]
        if not pending and not steps:
            break
        if time.monotonic() >= deadline:
            why = SLURM_SILENT if silent else "not ended"
            return {role: why for role in [*pending, *steps]}
        with suppress(SlurmError):  # the jobs are read above; this waits on etcd and shows progress
            monitor.poll()
    return {}
