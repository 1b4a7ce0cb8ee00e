"""Stage stop: SIGTERM to each job script (it stops its processes and exits 0), then wait until Slurm has
every job ended; a job that cannot be stopped so is cancelled hard. A stop never fails on a Slurm error.

A role started as a step of an allocation gets SIGTERM through ``scancel --signal=TERM ALLOC.STEP`` (every
process of the step; the script forwards it and waits as in a batch job) and, when it does not end, is cancelled
alone (``scancel ALLOC.STEP``): a stop never signals or cancels the allocation itself."""

from __future__ import annotations

import time
from contextlib import suppress

from atomdyn_launchers.run.context import RunContext
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.slurm.client import JobInfo, JobPoller, SlurmError
from atomdyn_launchers.slurm.steps import RoleStep

SIGNAL_RETRY_S = 30.0  # how long a refused SIGTERM is retried before the job is cancelled hard
SIGNAL_RETRY_INTERVAL_S = 1.0


def stop(ctx: RunContext, monitor: Monitor) -> None:
    """Stop every job gracefully (SIGTERM to the job script only), then wait until Slurm settles."""
    slurm = ctx.slurm
    monitor.stopping = True
    active = monitor.active_jobs()
    steps = {role: step for role, step in monitor.role_steps().items() if step.returncode is None}
    if not active and not steps:
        return
    live: dict[str, tuple[int, str]] = {}
    for role, job_id in active.items():
        try:
            info = slurm.job(job_id)
        except SlurmError:
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
        _signal_job_script(ctx, monitor, role, job_id)
    for role, step in steps.items():
        _signal_step(ctx, monitor, role, step)
    ctx.progress.line(f"stopping {', '.join([*live, *steps]) or 'nothing'}; waiting for Slurm to settle")
    if not _settle(ctx, monitor, ctx.settle_timeout_s):
        ctx.progress.line("jobs did not stop within the settle timeout: cancelling them")
        cancel_hard(ctx, monitor)


def cancel_hard(ctx: RunContext, monitor: Monitor) -> None:
    """scancel every job of the run (a second interrupt, or a stop that did not settle) and wait for them."""
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
    if (active or steps) and not _settle(ctx, monitor, ctx.settle_timeout_s):
        left = [*map(str, active), *(f"step {s.step}" for s in steps.values())]
        ctx.progress.line(f"jobs {', '.join(left)} had not ended {ctx.settle_timeout_s:.0f} s after scancel")


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


def _signal_job_script(ctx: RunContext, monitor: Monitor, role: str, job_id: int) -> None:
    """SIGTERM the job script only (it forwards it and waits for its processes). A refused scancel is
    retried while the job still runs: under load slurmctld can time out, and cancelling then would end a
    healthy job as CANCELLED. Cancelled hard only when the signal cannot be delivered for SIGNAL_RETRY_S."""
    slurm = ctx.slurm
    deadline = time.monotonic() + SIGNAL_RETRY_S
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
            with suppress(SlurmError):
                slurm.cancel([job_id])
            monitor.event("cancelled", role=role, job_id=job_id, detail=f"SIGTERM not delivered ({error})")
            return
        ctx.progress.line(f"{role}: SIGTERM not delivered ({error}); retrying")
        time.sleep(SIGNAL_RETRY_INTERVAL_S)  # a retry interval: nothing to wait on but the controller


def _settle(ctx: RunContext, monitor: Monitor, timeout_s: float) -> bool:
    """Wait until every job has ended, up to ``timeout_s``. A controller that does not answer (slurmctld
    frozen or overloaded) is asked again until then: a stop never fails on a Slurm error."""
    deadline = time.monotonic() + timeout_s
    pending = dict(monitor.active_jobs())
    steps = {role: step for role, step in monitor.role_steps().items() if step.returncode is None}
    poller = JobPoller(ctx.slurm)  # a fresh schedule: polled fast while the jobs stop
    silent = False
    while pending or steps:
        for role, step in list(steps.items()):
            if step.returncode is not None:  # srun exited: the step ended
                monitor.job_states[role] = step.info().state
                del steps[role]
        try:
            infos = poller.poll(pending.values())
        except SlurmError as exc:
            if not silent:
                ctx.progress.line(f"Slurm did not answer while the jobs stop ({exc}); asking again")
            silent, infos = True, {}
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
            return False
        with suppress(SlurmError):  # the jobs are read above; this waits on etcd and shows progress
            monitor.poll()
    return True
