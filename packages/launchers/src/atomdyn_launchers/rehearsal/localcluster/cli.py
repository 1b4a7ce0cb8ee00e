"""`atomdyn-cluster up|status|down [--state-dir DIR]`: the local cluster without invoke."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from atomdyn_core.console import quiet_broken_pipe
from atomdyn_launchers import __version__
from atomdyn_launchers.rehearsal.localcluster.cluster import LocalCluster, LocalClusterError

__all__ = ["LocalClusterError", "down", "main", "status", "up"]

MAX_NODES = 64  # addresses .1 to .64 of the cluster's /24; .253 and .254 are the host and head


# The state directory's parent becomes SHARED_DIR and both paths end up in slurm.conf and job scripts:
# plain path characters only, as the cluster configuration requires.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./@%+=:,-]+")


def _plain(option: str, value: str | None) -> None:
    if value and not _PLAIN_PATH.fullmatch(value):
        odd = " ".join(sorted({repr(c) for c in value if not _PLAIN_PATH.fullmatch(c)}))
        raise LocalClusterError(
            f"{option} {value!r} contains {odd}: use a path of letters, digits and _ . / @ % + = : , -"
        )


def node_names(count: int) -> tuple[str, ...]:
    """node1 .. nodeN: one Slurm node per network namespace (2 to 64)."""
    if not 2 <= count <= MAX_NODES:
        raise LocalClusterError(f"--nodes {count}: the local cluster has 2 to {MAX_NODES} nodes")
    return tuple(f"node{i}" for i in range(1, count + 1))


def cluster_from(
    state_dir: str | None, venv: str | None = None, docker: bool = False, nodes: int | None = None
) -> LocalCluster:
    """``nodes``: how many; None keeps the running cluster's count (2 when none is up)."""
    _plain("--state-dir", state_dir)
    _plain("--venv", venv)
    state = Path(state_dir) if state_dir else None
    python_venv = Path(venv) if venv else None
    cluster = LocalCluster(state, python_venv=python_venv, docker=docker)
    if nodes is None:
        try:
            names = cluster.layout().nodes  # keep what is up
        except LocalClusterError:
            return cluster
    else:
        names = node_names(nodes)
    return LocalCluster(state, python_venv=python_venv, docker=docker, nodes=names)


def up(cluster: LocalCluster) -> int:
    result = cluster.up(log=lambda m: print(m, file=sys.stderr))
    if result.already_up:
        print(f"local cluster already up and verified in {result.seconds:.2f} s ({cluster.state_dir})")
    else:
        print(f"local cluster up in {result.seconds:.2f} s ({cluster.state_dir})")
    cfg = result.config
    print(f"  nodes {', '.join(n for n, _ in cfg.node_addrs)}; etcd {cfg.etcd_endpoint}")
    if cfg.docker_host:
        print(f"  one docker daemon per node: DOCKER_HOST={cfg.docker_host} (%n = node)")
    print(f"  export SLURM_CONF={cfg.slurm_conf}  # for sinfo/sbatch by hand")
    return 0


def status(cluster: LocalCluster) -> int:
    st = cluster.status()
    print(st.table())
    return 0 if st.healthy else 1


def down(cluster: LocalCluster) -> int:
    result = cluster.down()
    if not result.was_up:
        print(f"local cluster was not up ({cluster.state_dir}); stray namespaces (if any) removed")
    else:
        print(f"local cluster down in {result.seconds:.2f} s")
    if result.killed:
        print(f"  had to kill: {', '.join(result.killed)}")
    for run_id in result.orphans:
        print(f"  orphaned run {run_id}: its jobs stopped with the cluster, its ports released")
    return 0


@quiet_broken_pipe
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="atomdyn-cluster", description=__doc__)
    parser.add_argument("--version", action="version", version=f"atomdyn-cluster {__version__}")
    parser.add_argument("command", choices=("up", "status", "down"))
    parser.add_argument("--state-dir", help="default: <repo>/.atomdyn/cluster")
    parser.add_argument("--venv", help="python virtualenv the jobs use (default: <repo>/.venv)")
    parser.add_argument("--docker", action="store_true", help="up: one docker daemon per node (own cache)")
    parser.add_argument("--nodes", type=int, help="up: how many nodes (2-64; default: as up now, else 2)")
    args = parser.parse_args(argv)
    try:
        cluster = cluster_from(args.state_dir, args.venv, args.docker, args.nodes)
        return {"up": up, "status": status, "down": down}[args.command](cluster)
    except LocalClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
