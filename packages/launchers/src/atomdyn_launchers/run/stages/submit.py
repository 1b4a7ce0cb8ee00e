"""Stage submit: one sbatch job per role, each pinned to its node with --nodelist; inside an allocation
(``--allocation``), one job step per role instead, the same script started by srun on the role's node."""

from __future__ import annotations

from atomdyn_launchers.contract.rundir import JobRecord
from atomdyn_launchers.run.context import RunContext
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.submission import RoleJob, role_step_name, step_command, write_jobs
from atomdyn_launchers.slurm.steps import StepSet


def submit(ctx: RunContext, monitor: Monitor) -> None:
    allocation = ctx.options.allocation
    if allocation is not None and monitor.steps is None:
        monitor.steps = StepSet.open(ctx.slurm, allocation)  # the steps already there are not the run's
    for role_job in write_jobs(ctx.submission(), ctx.roles):
        spec = role_job.spec
        monitor.plans[spec.role] = role_job.plan
        monitor.jobs[spec.role] = JobRecord(spec.role, None, spec.node)
        env = ctx.config.container_env_for(spec.node) or None
        if monitor.steps is not None:
            _start_step(ctx, monitor, monitor.steps, role_job, env)
            continue
        job_id = ctx.slurm.submit(
            role_job.script,
            job_name=role_job.job.job_name,
            nodelist=spec.node,
            gres=role_job.gres,
            output=role_job.output,
            chdir=ctx.rundir.path,
            env=env,
        )
        monitor.jobs[spec.role].job_id = job_id
        monitor.job_states[spec.role] = "SUBMITTED"
        monitor.event("submitted", role=spec.role, job_id=job_id, detail=f"node {spec.node}")
        ctx.progress.line(f"submitted {spec.role} as job {job_id} on {spec.node}")


def _start_step(
    ctx: RunContext, monitor: Monitor, steps: StepSet, role_job: RoleJob, env: dict[str, str] | None
) -> None:
    spec = role_job.spec
    args = step_command(ctx.slurm, role_job, steps.allocation, ctx.rundir.path, ctx.rundir.run_id)[:-1]
    steps.start(
        spec.role,
        args,
        role_job.script,
        name=role_step_name(role_job, ctx.rundir.run_id),
        node=spec.node,
        log=role_job.output,
        env=env,
    )
    monitor.jobs[spec.role].job_id = steps.allocation
    monitor.job_states[spec.role] = "SUBMITTED"
    detail = f"node {spec.node}, a step of allocation {steps.allocation}"
    monitor.event("submitted", role=spec.role, job_id=steps.allocation, detail=detail)
    ctx.progress.line(f"started {spec.role} as a step of allocation {steps.allocation} on {spec.node}")
