"""Stage submit: one sbatch job per role, each pinned to its node with --nodelist."""

from __future__ import annotations

from atomdyn_launchers.contract.rundir import JobRecord
from atomdyn_launchers.nodes.jobs import docker_host
from atomdyn_launchers.run.context import RunContext
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.submission import write_jobs


def submit(ctx: RunContext, monitor: Monitor) -> None:
    for role_job in write_jobs(ctx.submission(), ctx.roles):
        spec = role_job.spec
        monitor.plans[spec.role] = role_job.plan
        monitor.jobs[spec.role] = JobRecord(spec.role, None, spec.node)
        job_id = ctx.slurm.submit(
            role_job.script,
            job_name=role_job.job.job_name,
            nodelist=spec.node,
            gres=role_job.gres,
            output=role_job.output,
            chdir=ctx.rundir.path,
            env={"DOCKER_HOST": docker_host(ctx.config, spec.node)} if ctx.config.docker_host else None,
        )
        monitor.jobs[spec.role].job_id = job_id
        monitor.job_states[spec.role] = "SUBMITTED"
        monitor.event("submitted", role=spec.role, job_id=job_id, detail=f"node {spec.node}")
        ctx.progress.line(f"submitted {spec.role} as job {job_id} on {spec.node}")
