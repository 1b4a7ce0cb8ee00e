"""xPyD on the real local cluster: 2 prefill x 2 decode mock workers on four namespaced nodes, joined through
etcd, behind Dynamo's KV router; readiness waits for all four, placement is verified per worker."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest
from clusterinfra import require_cluster_infrastructure

from atomdyn_launchers.config.cluster import find_repo_root
from atomdyn_launchers.config.recipes import load_recipe
from atomdyn_launchers.contract.rundir import read_jsonl
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.rehearsal.localcluster import LocalCluster, cli
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.options import Flags, resolve

pytestmark = pytest.mark.integration
REPO = find_repo_root(Path(__file__).parent)


@pytest.fixture(scope="module")
def four_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_cluster_infrastructure()
    base = tmp_path_factory.mktemp("lc4")
    cluster = LocalCluster(
        base / "state",
        shared_dir=base / "shared",
        python_venv=Path(sys.prefix),
        owner_pid=os.getpid(),
        nodes=("node1", "node2", "node3", "node4"),
    )
    cluster.up(log=lambda message: print(message, file=sys.stderr))
    try:
        yield cluster
    finally:
        cluster.down()


def test_2p2d_behind_the_kv_router(four_nodes: LocalCluster) -> None:
    config = four_nodes.config()
    assert [n for n, _ in config.node_addrs] == ["node1", "node2", "node3", "node4"]
    recipe = load_recipe(REPO / "recipes" / "rehearsal-2p2d.yaml")
    log = StringIO()
    outcome = Launch(config, resolve("disagg", None, Flags(), recipe), progress=Progress(log)).run()
    assert outcome.passed, outcome.failure
    run = json.loads((outcome.run_dir / "run.json").read_text(encoding="utf-8"))
    assert run["placement_verified"] is True
    placed = {j["role"]: (j["node_requested"], j["node_ran"]) for j in run["jobs"]}
    assert placed == {
        "prefill1": ("node1", "node1"),
        "prefill2": ("node2", "node2"),
        "decode1": ("node3", "node3"),
        "decode2": ("node4", "node4"),
    }
    assert set(run["registrations"]) == set(placed)
    healthy = [e for e in outcome.timeline if e["event"] == "healthy"]
    assert "'prefill': 2, 'backend': 2" in str(healthy[0]["detail"])
    text = log.getvalue()
    assert "0/2 P 0/2 D ready" in text and "2/2 P 2/2 D ready" in text
    records = read_jsonl(outcome.run_dir / "requests.jsonl")
    assert len(records) == 16 and all(r["ok"] for r in records)
    assert all(r["prefill_worker_id"] != r["decode_worker_id"] for r in records)
    # The KV router saw the repeated prefixes (hits) across the workers.
    assert max(r["kv_hit_rate"] for r in records) > 0.5
    resolved = json.loads((outcome.run_dir / "recipe.json").read_text(encoding="utf-8"))
    assert resolved["resolved"]["layout"] == "2P2D" and resolved["recipe"]["name"] == "rehearsal-2p2d"
    decode1 = (outcome.run_dir / "scripts" / "decode1.sbatch").read_text(encoding="utf-8")
    assert "--router-mode kv" in decode1


def test_cluster_up_keeps_the_running_node_count(four_nodes: LocalCluster) -> None:
    """`invoke cluster.up` without --nodes verifies the running 4-node cluster instead of reshaping it."""
    again = cli.cluster_from(str(four_nodes.state_dir), str(four_nodes.python_venv))
    assert again.nodes == four_nodes.nodes
    assert cli.cluster_from(str(four_nodes.state_dir), nodes=4).nodes == four_nodes.nodes


def test_node_count_bounds() -> None:
    assert cli.node_names(8) == tuple(f"node{i}" for i in range(1, 9))
    for bad in (1, cli.MAX_NODES + 1):
        with pytest.raises(
            cli.LocalClusterError, match=f"--nodes {bad}: the local cluster has 2 to 64 nodes"
        ):
            cli.node_names(bad)
