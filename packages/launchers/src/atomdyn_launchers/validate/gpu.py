"""``invoke validate.gpu``: the in-image validator as one Slurm job on one node, through the launchers.

The job runs ``atomdyn-validate --json`` in the built image with the launchers' docker runtime (the same
``docker run`` flags, devices and GPU binding the engines get), writes the report into a run directory under
the cluster's shared directory, and exits with the validator's status. The submit side waits for the job
to finish and reports every check. The job is rendered as every run's job is (:func:`atomdyn_launchers.sbatch.render`),
one-shot: its supervisor stops the validator's container by name when the job is cancelled, and the job's
status is the validator's.

The job gives the validator the workers' command lines a run of the engine would write (``--worker-args``:
the arguments after ``python -m dynamo.vllm`` of the agg, prefill and decode roles, planned by the submit
stage's own code, :mod:`atomdyn_launchers.run.worker_args`); it puts each through Dynamo's ``parse_args`` in the
image, on the node, where vLLM finds its device. They are also kept in the run directory (``worker-args.json``).
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.job.images import docker_client
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.worker_args import planned_worker_args
from atomdyn_launchers.runtimes import image_runtime, runtime_for
from atomdyn_launchers.sbatch import JobSpec, render
from atomdyn_launchers.slurm.client import JobInfo, Slurm, held_allocation
from atomdyn_launchers.slurm.steps import StepSet, step_name


@dataclass(frozen=True)
class GpuValidation:
    job: JobInfo
    run_dir: Path
    report: dict[str, Any] | None  # the validator's JSON, None when it produced none

    @property
    def ok(self) -> bool:
        return self.job.succeeded and self.report is not None and bool(self.report.get("ok"))

    def lines(self) -> list[str]:
        out = [
            f"job {self.job.job_id} on {self.job.nodes or '?'}: {self.job.state} exit {self.job.exit_code}"
        ]
        if self.report is None:
            out.append(f"FAIL no validator report (see {self.run_dir})")
            return out
        for check in self.report.get("checks", []):
            out.append(f"{'PASS' if check.get('ok') else 'FAIL'} {check.get('name')}: {check.get('reason')}")
        out.append("RESULT " + ("PASS" if self.ok else "FAIL"))
        return out


def job_script(
    config: ClusterConfig,
    image: str,
    run_dir: Path,
    docker: str,
    worker_args: Mapping[str, Sequence[str]] | None = None,
    *,
    node: str = "",
    timeout_s: float = 900.0,
) -> str:
    """The validation job: a one-shot job of the launchers' renderer (the supervisor every run's job has), whose
    one process is the validator in the image, its report (stdout) in ``validate.json``, its log (stderr) in
    ``validate.check.log`` of ``run_dir``; Slurm ends it when the submit side stops waiting (``timeout_s``)."""
    engine = get_engine(config.engine_profile)
    devices = engine.container_devices()
    # The configured runtime's (docker's where it runs no image): the node's image store that nodes.prepare
    # filled, or the squashfs it imported, as a step of this job. Without GPUs nothing is pinned for RDMA, and
    # an unprivileged node may refuse to raise the memlock limit.
    runtime = runtime_for(
        config,
        image=image,
        container_prefix=f"atomdyn-validate-{run_dir.name}",
        docker=docker,
        lock_memory=engine.vendor != "none",
        in_image=True,
    )
    # The checks ask the GPU stack questions (ROCm torch, the active vLLM platform): the job gets the devices.
    validate = ["atomdyn-validate", "--json"]
    if worker_args is not None:  # one JSON word: the workers' argv, compact, in the script for review
        validate += [
            "--worker-args",
            json.dumps({k: list(v) for k, v in worker_args.items()}, separators=(",", ":")),
        ]
    check = runtime.wrap("check", validate, {}, devices)
    node = node or config.primary_node
    job = JobSpec(
        role="validate",
        job_name="atomdyn-validate",
        node=node,
        account=config.slurm_account,
        partition=config.slurm_partition,
        qos=config.slurm_qos,
        output=str(run_dir / "slurm-%j.out"),
        log_dir=str(run_dir),
        processes=[replace(check, argv=["report_to", str(run_dir / "validate.json"), *check.argv])],
        prelude=[*runtime.prelude(devices), *REPORT_TO],
        gpus=validation_gpus(config),
        time_limit=_time_limit(timeout_s),
        one_shot=True,
        header_comment=(
            f"atomdyn validate.gpu: atomdyn-validate in {image} on {node}, runtime {config.runtime}. "
            "Generated; do not edit."
        ),
    )
    return render(job)


# The validator's stdout is its report, one JSON document: the process's own, while its stderr stays in its log.
REPORT_TO = [
    "# report_to FILE COMMAND...: COMMAND (this process, by exec) with its standard output in FILE.",
    "# shellcheck disable=SC2317  # called through start",
    'report_to() { local out=$1; shift; exec "$@" >"$out"; }',
]


def validation_gpus(config: ClusterConfig) -> int:
    """GPUs the validation job asks of Slurm: one, for an engine with a GPU vendor."""
    return 1 if get_engine(config.engine_profile).vendor != "none" else 0


def _time_limit(timeout_s: float) -> str:
    minutes = max(1, math.ceil(timeout_s / 60))
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def run_gpu_validation(
    config: ClusterConfig,
    *,
    image: str = "",
    node: str = "",
    docker_host: str = "",
    timeout_s: float = 900.0,
    allocation: int | None = None,
    options: LaunchOptions | None = None,
) -> GpuValidation:
    """Validate in the image on ``node``: one batch job, or, with ``allocation``, one step of it (srun).
    ``options`` (engine, model, recipe): the run whose workers' command lines the validator parses; default the
    configured engine's default model, 1P1D."""
    image = image or config.dynamo_atom_image or ""
    if not image:
        raise PreflightError(f"no image: set DYNAMO_ATOM_IMAGE in {config.source} or pass --image")
    options = options or LaunchOptions(kind="disagg")
    if options.engine and options.engine != config.engine_profile:  # the run's engine: its devices, its argv
        config = replace(config, engine_profile=options.engine)
    worker_args = planned_worker_args(config, options, image)
    node = node or config.primary_node
    slurm = Slurm(config)
    slurm.check_partition()
    slurm.check_nodes([node])
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    run_dir = config.runs_dir / f"validate-{stamp}"
    run_dir.mkdir(parents=True)
    script = run_dir / "validate.sbatch"
    atomic_write_text(run_dir / "worker-args.json", json.dumps(worker_args, indent=2) + "\n")
    text = job_script(config, image, run_dir, docker_client(), worker_args, node=node, timeout_s=timeout_s)
    atomic_write_text(script, text, mode=0o755)
    gres = f"gpu:{validation_gpus(config)}" if validation_gpus(config) else None
    env = image_runtime(config.runtime).job_env(config, node, docker_host) or None
    if allocation is not None:
        job = _validate_step(slurm, allocation, script, node=node, gres=gres, env=env, timeout_s=timeout_s)
    else:
        job_id = slurm.submit(
            script,
            job_name="atomdyn-validate",
            nodelist=node,
            gres=gres,
            output=run_dir / "slurm-%j.out",
            chdir=run_dir,
            env=env,
        )
        job = slurm.wait_terminal(job_id, timeout=timeout_s)
    report_path = run_dir / "validate.json"
    report: dict[str, Any] | None = None
    if report_path.is_file():
        try:
            loaded = json.loads(report_path.read_text(encoding="utf-8"))
            report = loaded if isinstance(loaded, dict) else None
        except json.JSONDecodeError:
            report = None
    return GpuValidation(job, run_dir, report)


def _validate_step(
    slurm: Slurm,
    allocation: int,
    script: Path,
    *,
    node: str,
    gres: str | None,
    env: dict[str, str] | None,
    timeout_s: float,
) -> JobInfo:
    """The validation job's script as a step of ``allocation`` on ``node``, its output in slurm-step.out of the
    run directory; cancelled (the step alone) when it does not end in ``timeout_s``."""
    held_allocation(slurm, allocation, [node])
    run_dir = script.parent
    steps = StepSet.open(slurm, allocation)
    name = step_name("atomdyn-validate", run_dir.name)
    out = run_dir / "slurm-step.out"
    args = slurm.srun_args(
        allocation=allocation, nodelist=node, job_name=name, gres=gres, output=out, chdir=run_dir
    )
    step = steps.start("validate", [*args, "bash"], script, name=name, node=node, log=out, env=env)
    try:
        if not step.wait(timeout_s):
            raise TimeoutError(f"validation step on {node} not finished after {timeout_s:.0f} s")
        return step.info()
    finally:
        steps.cancel_live()
