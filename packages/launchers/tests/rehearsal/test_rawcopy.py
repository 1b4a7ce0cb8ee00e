"""The raw TCP copy between two nodes of the local cluster, and disagg.bench setting a run's KV transfers
beside it (a real run's metrics and timeline, the copy measured on this session's local cluster; no vLLM)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from atomdyn_launchers.rehearsal.localcluster import LocalCluster
from atomdyn_launchers.rehearsal.rawcopy import WARMUP_COPIES, RawCopyError, measure, measure_in_local_cluster
from atomdyn_launchers.rehearsal.tasks import _bench_one
from atomdyn_launchers.run.stages.record import Outcome

pytestmark = pytest.mark.integration

REAL_RUN = (
    Path(__file__).parents[1]
    / "evidence"
    / "fixtures"
    / "vllm-cpu-disagg"
    / "20261201T124322Z-disagg-vllm-cpu"
)


def _eth0_rx_bytes(cluster: LocalCluster, node: str) -> int:
    done = subprocess.run(
        cluster.node_command(node, ["ip", "-s", "-j", "link", "show", "eth0"]),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(json.loads(done.stdout)[0]["stats64"]["rx"]["bytes"])


def test_the_copy_crosses_the_link_from_node1_to_node2(local_cluster: LocalCluster) -> None:
    nbytes, copies = 211_456, 30  # a real run's mean KV transfer
    before = _eth0_rx_bytes(local_cluster, "node2")
    result = measure_in_local_cluster(local_cluster.state_dir, nbytes, copies)
    received = _eth0_rx_bytes(local_cluster, "node2") - before
    assert (result.source, result.reader, result.nbytes, result.copies) == ("node1", "node2", nbytes, copies)
    assert 0 < result.min_s <= result.p50_s
    # Every copy, warm-up included, came in through node2's link from node1's address.
    assert received >= (copies + WARMUP_COPIES) * nbytes
    assert "node1 -> node2 of 211456 bytes: p50 " in result.describe()


def test_a_server_that_cannot_listen_is_named(local_cluster: LocalCluster) -> None:
    # node2's address does not exist in node1's namespace: the server there cannot bind it.
    node2_addr = local_cluster.layout().node_addr("node2")
    with pytest.raises(RawCopyError, match=r"raw-copy server on node1 exited: .*assign requested address"):
        measure(local_cluster.node_command, "node1", node2_addr, "node2", 1024, 1, timeout_s=30)


def test_bad_sizes_and_nodes_are_named(local_cluster: LocalCluster) -> None:
    with pytest.raises(RawCopyError, match="bytes per copy must be between 1 and"):
        measure_in_local_cluster(local_cluster.state_dir, 0)
    with pytest.raises(RawCopyError, match="copies must be at least 1"):
        measure_in_local_cluster(local_cluster.state_dir, 10, copies=0)
    with pytest.raises(RawCopyError, match="no node 'node9' in the local cluster"):
        measure_in_local_cluster(local_cluster.state_dir, 10, source="node9")


def test_bench_sets_a_runs_kv_transfers_beside_the_raw_copy(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    run_dir = tmp_path / REAL_RUN.name
    shutil.copytree(REAL_RUN, run_dir)
    record = json.loads((run_dir / "run.json").read_text())
    # The real run on this session's cluster: its Slurm config, its nodes.
    record["config"]["SLURM_CONF"] = str(local_cluster.layout().slurm_conf)
    for job, node in zip(record["jobs"], ("node1", "node2"), strict=True):
        job["node_ran"] = node
    (run_dir / "run.json").write_text(json.dumps(record))
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]

    figures = _bench_one(Outcome(run_dir.name, run_dir, True, None, timeline), 20, "run 1/1")

    assert figures["kv_transfers"]["count"] == 9 and figures["kv_transfers"]["bytes_per_transfer"] == 211_172
    raw = figures["raw_tcp_copy"]
    assert (raw["source"], raw["reader"], raw["nbytes"], raw["copies"]) == ("node1", "node2", 211_172, 20)
    assert figures["kv_time_over_raw_p50"] == pytest.approx(
        figures["kv_transfers"]["seconds_per_transfer"] / raw["p50_s"]
    )
    assert figures["timeline_s"]["first_good_response"] > 0


def test_measure_by_hand_from_the_command_line(local_cluster: LocalCluster) -> None:
    # Run as a script, the module's own name is __main__: the nodes' sides must be started by the real one.
    argv = [
        "measure",
        "--bytes",
        "4096",
        "--copies",
        "5",
        "--state-dir",
        str(local_cluster.state_dir),
        "--json",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.rehearsal.rawcopy", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert (figures["source"], figures["reader"], figures["nbytes"], figures["copies"]) == (
        "node1",
        "node2",
        4096,
        5,
    )


def test_bench_json_is_the_only_thing_on_stdout(local_cluster: LocalCluster, tmp_path: Path) -> None:
    # The mock engine moves no KV: the document holds its timeline, no transfers and no copy.
    (tmp_path / "tasks.py").write_text(
        "from invoke import Collection\nfrom atomdyn_launchers.tasks import disagg_ns\nns = Collection(disagg_ns)\n"
    )
    env_file = local_cluster.state_dir / "cluster.env"
    argv = ["disagg.bench", "--runs", "1", "--requests", "2", "--json", "--config", str(env_file)]
    done = subprocess.run(
        [sys.executable, "-m", "invoke", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(done.stdout)
    assert document["bench"] == "disagg.bench" and document["engine"] == "mocker"
    assert document["lock_digest"].startswith("sha256:") and document["platform"]
    (run,) = document["runs"]
    assert run["passed"] and run["timeline_s"]["first_good_response"] > 0
    assert "kv_transfers" not in run and "raw_tcp_copy" not in run
    assert document["first_good_response_s"]["n"] == 1
    assert "run 1/1: " in done.stderr and "submission -> first verified P/D response" in done.stderr
