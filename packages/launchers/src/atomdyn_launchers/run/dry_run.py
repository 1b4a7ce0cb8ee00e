"""A dry run: the pipeline of a run stopped before submit. After the preflight (or none, offline), every job
script is written by the submit stage's own :func:`~atomdyn_launchers.run.submission.write_jobs`, with the sbatch
command that would submit it, ``recipe.json`` and ``dry-run.json``; nothing is submitted. A dry run that fails
leaves nothing: its directory (and the directories made for it) are removed before the error goes on."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.cluster import ClusterConfig, find_repo_root
from atomdyn_launchers.contract.rundir import RunDir
from atomdyn_launchers.engines import Engine
from atomdyn_launchers.profiles.models import ModelProfile
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.context import ready_timeout_s
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import RoleSpec, required_instances, write_resolved_recipe
from atomdyn_launchers.run.submission import Submission, step_command, write_jobs
from atomdyn_launchers.slurm.client import Slurm


def write_dry_run(
    config: ClusterConfig,
    options: LaunchOptions,
    engine: Engine,
    model: ModelProfile,
    roles: list[RoleSpec],
    *,
    slurm: Slurm,
    progress: Progress,
    preflight_state: str,
    problems: list[str] | None = None,
) -> Path:
    """Every job script and the resolved recipe in a run directory under <runs>/dry-run; its path."""
    runs_root = (options.runs_root or config.runs_dir) / "dry-run"
    if options.offline and options.runs_root is None and not config.shared_dir.is_dir():
        # The cluster's shared filesystem is not mounted here: the review goes into this checkout.
        runs_root = find_repo_root() / ".atomdyn" / "dry-run"
        progress.line(f"SHARED_DIR {config.shared_dir} is not here: writing under {runs_root}")
    made = list(itertools.takewhile(lambda p: not p.exists(), (runs_root, *runs_root.parents)))
    rundir = RunDir.create(runs_root, options.kind, engine.name)
    try:
        _write(
            rundir, config, options, engine, model, roles, slurm, progress, preflight_state, problems or []
        )
    except BaseException:
        shutil.rmtree(rundir.path, ignore_errors=True)
        for directory in made:  # the deepest first; one that holds something else stays
            try:
                directory.rmdir()
            except OSError:
                break
        raise
    return rundir.path


def _write(
    rundir: RunDir,
    config: ClusterConfig,
    options: LaunchOptions,
    engine: Engine,
    model: ModelProfile,
    roles: list[RoleSpec],
    slurm: Slurm,
    progress: Progress,
    preflight_state: str,
    problems: list[str],
) -> None:
    write_resolved_recipe(rundir.path, options, engine, model, roles)
    owned = config.etcd_endpoint is None
    endpoint = "http://run-owned-etcd.invalid:2379" if owned else config.require_etcd()
    submission = Submission(
        config, options, engine, model, rundir, endpoint, ready_timeout_s(options, engine)
    )
    planned: list[dict[str, object]] = []
    for role_job in write_jobs(submission, roles):
        spec = role_job.spec
        sbatch = slurm.sbatch_args(
            job_name=role_job.job.job_name,
            nodelist=spec.node,
            gres=role_job.gres,
            output=role_job.output,
            chdir=rundir.path,
        )
        planned.append(
            {"role": spec.role, "mode": spec.mode, "node": spec.node, "frontend": spec.with_frontend,
             "script": str(role_job.script.relative_to(rundir.path)), "sbatch": [*sbatch, str(role_job.script)]}
        )  # fmt: skip
        if options.allocation is not None:  # started as a step of the allocation instead
            del planned[-1]["sbatch"]
            planned[-1]["srun"] = step_command(
                slurm, role_job, options.allocation, rundir.path, rundir.run_id
            )
        progress.line(f"dry run: {spec.role} ({spec.mode}) on {spec.node} -> {role_job.script}")
    plan = {
        "dry_run": True,
        "submitted": [],
        "preflight": preflight_state,
        "problems": problems,
        "etcd": "run-owned: started in a job of its own at submit (endpoint known then)"
        if owned
        else endpoint,
        "roles": planned,
        **({"allocation": options.allocation} if options.allocation is not None else {}),
        "frontend_must_list": required_instances(
            options.kind, options.prefill_workers, options.decode_workers
        ),
    }
    atomic_write_text(rundir.path / "dry-run.json", json.dumps(plan, indent=2) + "\n")
    for problem in problems:
        progress.line(f"dry run: a run would be refused: {problem}")
    progress.line(f"dry run: nothing submitted; scripts and recipe.json in {rundir.path}")


def dry_run_problems(path: Path) -> list[str]:
    """What the dry run in ``path`` found that would refuse a run (dry-run.json's ``problems``)."""
    plan = json.loads((path / "dry-run.json").read_text(encoding="utf-8"))
    return [str(p) for p in plan.get("problems", [])]
