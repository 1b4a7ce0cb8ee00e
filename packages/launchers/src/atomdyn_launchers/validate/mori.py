"""``invoke validate.mori``: the project's dma-buf offset reproducer (``mori-repro run --json``,
docs/mori-path.md) in the engine's image on one node, as one one-shot Slurm job, before any model loads.

For an engine whose KV moves over MORI (``Engine.mori_repro``: the sglang engine) the ladder's validate rung runs it
on every worker node after the in-image validator: the proof of concept's SGLang case study lost days to a
sub-allocated dma-buf registered at offset 0 (ROCm/mori#509); here the node's GPU runtime, ionic NIC, driver and
firmware show in minutes whether a registration with the exporter's offset lands where it should. The job is
rendered as validate.gpu's is (the runtime's devices, RDMA included; its supervisor; one-shot), the program's
JSON report (its stdout) kept as ``mori-repro.json`` in the run directory.

The report's own verdict decides, not the job's status: ``bug-reproduced`` (exit 10) is a pass here, since it
says that offset 0 misplaces the transfer on this node (the bug class is real) and that the exporter's offset,
MORI's since 0d05a4d2, lands correctly; so is ``fixed-behaviour-confirmed`` (exit 0). ``fix-not-confirmed`` (11,
another defect of the driver, provider or firmware), ``environment-cannot-run`` (20: no GPU runtime, RDMA device
or dma-buf support where the worker runs), a usage or internal error fail, naming it.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.job.images import docker_client
from atomdyn_launchers.runtimes import image_runtime, runtime_for
from atomdyn_launchers.runtimes.devices import RdmaMounts
from atomdyn_launchers.sbatch import JobSpec, render
from atomdyn_launchers.slurm.client import JobInfo, Slurm
from atomdyn_launchers.validate.gpu import REPORT_TO, _time_limit, validation_gpus

REPORT = "mori-repro.json"
# mori-repro's verdicts (mori_repro/exitcodes.py) under which the engine's KV path can run: the exporter's offset
# landed where it should.
PASSING = {0: "fixed-behaviour-confirmed", 10: "bug-reproduced"}


@dataclass(frozen=True)
class MoriRepro:
    job: JobInfo
    run_dir: Path
    report: dict[str, Any] | None  # mori-repro's JSON, None when it produced none

    @property
    def ok(self) -> bool:
        return judge(self.report)[0]

    def detail(self) -> str:
        return (
            judge(self.report)[1] if self.report is not None else f"no mori-repro report (see {self.run_dir})"
        )


def judge(report: dict[str, Any] | None) -> tuple[bool, str]:
    """Whether ``report`` (mori-repro's JSON) lets the KV path run, and why, in its own words."""
    if report is None:
        return False, "no mori-repro report"
    code, verdict = report.get("exit_code"), report.get("verdict")
    summary = str(report.get("summary") or "").strip()
    said = f"{verdict} (exit {code})" + (f": {summary}" if summary else "")
    if isinstance(code, int) and PASSING.get(code) == verdict:
        return True, said
    return False, said


def repro_args(config: ClusterConfig, node: str) -> list[str]:
    """``mori-repro run`` on the node's first RDMA device:port of UCX_NET_DEVICES (the one the workers' MORI gets
    first), at the configured GID index (mori-repro's default, 1, where it is ``auto``)."""
    entries = (config.ucx_net_devices_for(node) or "").split(",")
    ports = [(device, port) for device, sep, port in (e.partition(":") for e in entries) if sep]
    if not ports:
        raise PreflightError(
            f"UCX_NET_DEVICES names no RDMA device:port for {node}: mori-repro needs the NIC"
        )
    device, port = ports[0]
    args = ["mori-repro", "run", "--device", device, "--port", port]
    if config.ucx_ib_gid_index != "auto":
        args += ["--gid-index", config.ucx_ib_gid_index]
    return [*args, "--json"]


def job_script(
    config: ClusterConfig, image: str, run_dir: Path, docker: str, *, node: str, timeout_s: float = 600.0
) -> str:
    """The reproducer's job: one process, mori-repro in the image with a P/D worker's devices (the GPUs, the RDMA
    devices and verbs providers), its report (stdout) in ``mori-repro.json`` of ``run_dir``."""
    engine = get_engine(config.engine_profile)
    rdma = RdmaMounts(str(config.rdma_verbs_config_dir), tuple(str(p) for p in config.rdma_provider_libs))
    devices = engine.container_devices(rdma)
    runtime = runtime_for(
        config,
        image=image,
        container_prefix=f"atomdyn-mori-repro-{run_dir.name}",
        docker=docker,
        lock_memory=True,
        in_image=True,
    )
    repro = runtime.wrap("mori-repro", repro_args(config, node), {}, devices)
    job = JobSpec(
        role="mori-repro",
        job_name="atomdyn-mori-repro",
        node=node,
        account=config.slurm_account,
        partition=config.slurm_partition,
        qos=config.slurm_qos,
        output=str(run_dir / "slurm-%j.out"),
        log_dir=str(run_dir),
        processes=[replace(repro, argv=["report_to", str(run_dir / REPORT), *repro.argv])],
        prelude=[*runtime.prelude(devices), *REPORT_TO],
        gpus=validation_gpus(config),
        time_limit=_time_limit(timeout_s),
        one_shot=True,
        header_comment=(
            f"atomdyn validate.mori: mori-repro (the dma-buf offset reproducer) in {image} on {node}, runtime "
            f"{config.runtime}. Generated; do not edit."
        ),
    )
    return render(job)


def run_mori_repro(
    config: ClusterConfig, *, image: str = "", node: str = "", docker_host: str = "", timeout_s: float = 600.0
) -> MoriRepro:
    """mori-repro in the image on ``node`` as one batch job; its report read back from the run directory."""
    image = image or config.dynamo_atom_image or ""
    if not image:
        raise PreflightError(f"no image: set DYNAMO_ATOM_IMAGE in {config.source} or pass --image")
    node = node or config.primary_node
    slurm = Slurm(config)
    slurm.check_partition()
    slurm.check_nodes([node])
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    run_dir = config.runs_dir / f"mori-repro-{stamp}"
    run_dir.mkdir(parents=True)
    script = run_dir / "mori-repro.sbatch"
    text = job_script(config, image, run_dir, docker_client(), node=node, timeout_s=timeout_s)
    atomic_write_text(script, text, mode=0o755)
    gpus = validation_gpus(config)
    env = image_runtime(config.runtime).job_env(config, node, docker_host) or None
    job_id = slurm.submit(
        script,
        job_name="atomdyn-mori-repro",
        nodelist=node,
        gres=f"gpu:{gpus}" if gpus else None,
        output=run_dir / "slurm-%j.out",
        chdir=run_dir,
        env=env,
    )
    job = slurm.wait_terminal(job_id, timeout=timeout_s)
    return MoriRepro(job, run_dir, read_report(run_dir / REPORT))


def read_report(path: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None
