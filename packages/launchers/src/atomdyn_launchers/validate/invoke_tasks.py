"""The invoke collection ``validate``: ``invoke validate.gpu``."""

from __future__ import annotations

from pathlib import Path

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task


@task(
    help={
        "config": "cluster.env (default: $ATOMDYN_CLUSTER_ENV, else the local cluster)",
        "image": "image to validate (default: DYNAMO_ATOM_IMAGE from the cluster config)",
        "node": "node to run on (default: PRIMARY_NODE)",
        "docker_host": "DOCKER_HOST for the job (e.g. unix:///path/docker.sock), when not the node's default",
        "timeout": "seconds to wait for the job",
    }
)
def gpu(
    c: Context, config: str = "", image: str = "", node: str = "", docker_host: str = "", timeout: int = 900
) -> None:
    """Run atomdyn-validate in the image as one Slurm job; print PASS/FAIL per check; exit 1 on any FAIL."""
    from atomdyn_launchers.config.cluster import ClusterConfigError, PreflightError, resolve_cluster_config
    from atomdyn_launchers.progress import Progress
    from atomdyn_launchers.slurm.client import SlurmError
    from atomdyn_launchers.validate.gpu import run_gpu_validation

    try:
        cfg = resolve_cluster_config(Path(config) if config else None)
        with Progress().heartbeat(
            f"validate.gpu on {node or cfg.primary_node}"
        ):  # a line every 15 s (stderr)
            result = run_gpu_validation(
                cfg, image=image, node=node, docker_host=docker_host, timeout_s=timeout
            )
    except (ClusterConfigError, PreflightError, SlurmError, TimeoutError) as exc:
        raise Exit(f"error: {exc}", code=2) from exc
    print("\n".join(result.lines()))
    print(f"report: {result.run_dir / 'validate.json'}")
    if not result.ok:
        raise Exit(code=1)


ns = Collection("validate")
ns.add_task(gpu)

__all__ = ["ns"]
