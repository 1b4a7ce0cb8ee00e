"""A node Slurm will start no job on, met by the node jobs (`nodes.check`, `nodes.prepare`), on a local cluster of
its own: a drained node, and a node whose slurmd died (the controller has not noticed yet when the check is
submitted). Each is reported as a failure naming the node, its Slurm state and reason, at once or as soon as
Slurm gives up on the node, not as a busy node whose checks are "unknown" (which let the run go on to wait
out its ready timeout with a job pending on `ReqNodeNotAvail`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterinfra import require_cluster_infrastructure

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.job.node_check import FAIL
from atomdyn_launchers.nodes.check import check_nodes
from atomdyn_launchers.rehearsal.localcluster import LocalCluster, prune_orphans
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration
NODES = ("node1", "node2")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of the test's own: one of its slurmd is killed."""
    require_cluster_infrastructure()
    prune_orphans(log=lambda message: print(message, file=sys.stderr))
    own = LocalCluster(
        tmp_path / "state",
        shared_dir=tmp_path / "shared",
        python_venv=Path(sys.prefix),
        owner_pid=os.getpid(),
    )
    own.up(log=lambda message: print(message, file=sys.stderr))
    try:
        yield own
    finally:
        own.down()


def _the_row(config: ClusterConfig, node: str, pending_grace_s: float) -> tuple[str, str, int]:
    report = check_nodes(config, NODES, pending_grace_s=pending_grace_s)
    assert not report.ok, report.table()
    [row] = report.nodes[node]
    assert row.name == "job", report.table()
    return row.status, row.detail, int(row.detail.split()[4])  # "checks not run: job N cannot start: ..."


def test_a_drained_node_fails_the_check_at_once_naming_its_state_and_reason(cluster: LocalCluster) -> None:
    config = cluster.config()
    slurm = Slurm(config)
    slurm.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=atomdyn-test maintenance"])
    status, detail, job = _the_row(config, "node2", pending_grace_s=600.0)  # no grace is waited out
    assert status == FAIL
    assert "cannot start: Slurm has node2 drained (atomdyn-test maintenance)" in detail, detail
    assert "scontrol update nodename=<node> state=resume" in detail
    assert slurm.job(job).state == "CANCELLED"


def test_a_node_whose_slurmd_died_fails_the_check_naming_it_not_responding(cluster: LocalCluster) -> None:
    """The controller still lists node2 idle when the check is submitted: it finds the slurmd gone when it
    launches the job there (MessageTimeout, about 80 s here), requeues the job and marks the node down."""
    [slurmd] = [d for d in cluster.status().daemons if d.name == "slurmd-node2"]
    os.kill(slurmd.pid, signal.SIGKILL)
    status, detail, _ = _the_row(cluster.config(), "node2", pending_grace_s=15.0)
    assert status == FAIL
    assert "cannot start: Slurm has node2 down* (Not responding)" in detail, detail
