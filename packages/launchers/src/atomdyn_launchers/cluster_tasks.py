"""The invoke collection ``cluster``: ``invoke cluster.up | cluster.status | cluster.down``."""

from __future__ import annotations

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_launchers.localcluster import cli

_HELP = {
    "state_dir": "state directory; its parent is the cluster's SHARED_DIR (default: <repo>/.atomdyn/cluster)",
    "venv": "python virtualenv the jobs run (default: <repo>/.venv)",
    "docker": "also one docker daemon per node, each with its own image cache (adds ~1 s to up)",
    "nodes": "how many nodes, node1..nodeN (2-64; default: as the running cluster, else 2)",
}


def _run(command: str, state_dir: str, venv: str = "", docker: bool = False, nodes: int = 0) -> None:
    try:
        cluster = cli.cluster_from(state_dir or None, venv or None, docker, nodes or None)
        code = {"up": cli.up, "status": cli.status, "down": cli.down}[command](cluster)
    except cli.LocalClusterError as exc:
        raise Exit(f"error: {exc}", code=1) from exc
    if code:
        raise Exit(code=code)


@task(help=_HELP)
def up(c: Context, state_dir: str = "", venv: str = "", docker: bool = False, nodes: int = 0) -> None:
    """Bring the local Slurm cluster (two nodes, or --nodes N) and etcd up, or verify it is up; prints the
    time taken."""
    _run("up", state_dir, venv, docker, nodes)


@task(help={"state_dir": _HELP["state_dir"]})
def status(c: Context, state_dir: str = "") -> None:
    """Each daemon with its pid and liveness, the nodes' Slurm state, etcd health, orphaned runs (launcher gone);
    exit 1 if unhealthy or a run is orphaned."""
    _run("status", state_dir)


@task(help={"state_dir": _HELP["state_dir"]})
def down(c: Context, state_dir: str = "") -> None:
    """Stop everything by PID and remove the namespaces and the host veth."""
    _run("down", state_dir)


ns = Collection("cluster")
ns.add_task(up)
ns.add_task(status)
ns.add_task(down)

__all__ = ["ns"]
