"""The local cluster for real: two nodes in their own namespaces, gres GPUs, etcd, preflight, wrappers."""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from invoke.collection import Collection
from invoke.program import Program

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.direct_http import DIRECT
from atomdyn_launchers.rehearsal import tasks as rehearsal_tasks
from atomdyn_launchers.rehearsal.localcluster import LocalCluster
from atomdyn_launchers.run.preflight import cluster_checks
from atomdyn_launchers.slurm.client import JobInfo, Slurm, SlurmError

pytestmark = pytest.mark.integration


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / f"job-{uuid.uuid4().hex[:8]}.sh"
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body)
    return path


def _run_job(slurm: Slurm, script: Path, tmp_path: Path, **kwargs: object) -> tuple[JobInfo, str]:
    out = tmp_path / f"{script.stem}.out"
    job_id = slurm.submit(script, output=out, job_name=script.stem, **kwargs)  # type: ignore[arg-type]
    info = slurm.wait_terminal(job_id, timeout=60)
    return info, out.read_text() if out.exists() else ""


def test_two_nodes_idle_and_status_healthy(
    local_cluster: LocalCluster, local_cluster_config: ClusterConfig
) -> None:
    slurm = Slurm(local_cluster_config)
    assert slurm.partitions() == ["local"]
    assert slurm.node_states() == {"node1": "idle", "node2": "idle"}
    assert not slurm.accounting_enabled()
    status = local_cluster.status()
    assert status.healthy, status.table()
    assert [d.name for d in status.daemons] == ["munged", "etcd", "slurmctld", "slurmd-node1", "slurmd-node2"]
    assert all(d.alive for d in status.daemons)
    assert status.etcd == "healthy"
    table = status.table()
    for daemon in status.daemons:
        assert f"{daemon.name}" in table and str(daemon.pid) in table


def test_gres_job_runs_in_node2_namespace_with_its_hostname(
    local_cluster: LocalCluster, local_cluster_config: ClusterConfig, tmp_path: Path
) -> None:
    cfg = local_cluster_config
    script = _script(
        tmp_path,
        'echo "host=$(hostname)"\n'
        'echo "netns=$(readlink /proc/self/ns/net)"\n'
        'echo "gpus=${CUDA_VISIBLE_DEVICES:-none}"\n'
        "echo \"addr=$(ip -4 -o addr show eth0 | awk '{print $4}')\"\n"
        "echo \"node1=$(getent hosts node1 | awk '{print $1}')\"\n",
    )
    info, out = _run_job(Slurm(cfg), script, tmp_path, nodelist="node2", gres="gpu:1")
    assert info.succeeded, (info, out)
    assert (info.nodes, info.exit_code, info.derived_exit_code, info.source) == (
        "node2",
        (0, 0),
        (0, 0),
        "scontrol",
    )
    fields = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    layout = local_cluster.layout()
    assert fields["host"] == "node2"
    assert fields["netns"] == f"net:[{layout.netns_path('node2').stat().st_ino}]"
    assert fields["gpus"] == "0"
    assert fields["addr"] == f"{cfg.node_address('node2')}/24"
    assert fields["node1"] == cfg.node_address("node1")


def test_node_to_node_traffic_etcd_and_venv_from_a_job(
    local_cluster: LocalCluster, local_cluster_config: ClusterConfig, tmp_path: Path
) -> None:
    cfg = local_cluster_config
    marker = uuid.uuid4().hex
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "marker").write_text(marker)
    node1 = cfg.node_address("node1")
    server = subprocess.Popen(
        local_cluster.node_command(
            "node1",
            [sys.executable, "-m", "http.server", "--bind", node1, "18080", "-d", str(tmp_path / "www")],
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_http(f"http://{node1}:18080/marker", "the HTTP server inside node1")
        key = f"atomdyn-test/{marker}"
        python = cfg.python_venv / "bin" / "python"
        job_py = tmp_path / "job.py"
        job_py.write_text(
            "import base64, json, socket, sys, urllib.request\n"
            "urllib.request.install_opener(urllib.request.build_opener(urllib.request.ProxyHandler({})))\n"
            "import atomdyn_launchers\n"  # the package is importable from the venv inside the job
            "got = urllib.request.urlopen('http://node1:18080/marker', timeout=5).read().decode()\n"
            "b = lambda s: base64.b64encode(s.encode()).decode()\n"
            "value = socket.gethostname() + ':' + got\n"
            f"body = json.dumps({{'key': b({key!r}), 'value': b(value)}}).encode()\n"
            f"urllib.request.urlopen('{cfg.etcd_endpoint}/v3/kv/put', body, timeout=5).read()\n"
            "print('fetched', got)\n"
        )
        script = _script(tmp_path, f"{python} {job_py}\n")
        info, out = _run_job(Slurm(cfg), script, tmp_path, nodelist="node2")
        assert info.succeeded, (info, out)
        assert f"fetched {marker}" in out
        # Read back on the host: the job on node2 wrote to etcd what it fetched from node1.
        query = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        with DIRECT.open(f"{cfg.etcd_endpoint}/v3/kv/range", query, timeout=5) as response:
            kvs = json.loads(response.read())["kvs"]
        assert base64.b64decode(kvs[0]["value"]).decode() == f"node2:{marker}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait_http(url: str, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with DIRECT.open(url, timeout=1) as response:
                response.read()
                return
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} did not answer {url} within {timeout:.0f} s: {exc}") from exc
            time.sleep(0.05)


def test_exit_codes_failed_step_and_failed_job(local_cluster_config: ClusterConfig, tmp_path: Path) -> None:
    slurm = Slurm(local_cluster_config)
    step_failed, _ = _run_job(slurm, _script(tmp_path, "srun bash -c 'exit 3' || true\n"), tmp_path)
    assert (step_failed.state, step_failed.exit_code, step_failed.derived_exit_code) == (
        "COMPLETED",
        (0, 0),
        (3, 0),
    )
    assert not step_failed.succeeded  # ExitCode alone would have said success
    failed, _ = _run_job(slurm, _script(tmp_path, "exit 2\n"), tmp_path)
    assert (failed.state, failed.exit_code) == ("FAILED", (2, 0))
    assert failed.terminal and not failed.succeeded


def test_submission_passes_account_partition_qos(local_cluster_config: ClusterConfig, tmp_path: Path) -> None:
    cfg = local_cluster_config
    slurm = Slurm(cfg)
    args = slurm.sbatch_args(job_name="x", nodelist="node1")
    assert args[:5] == ["sbatch", "--parsable", "--account=rehearsal", "--partition=local", "--qos=normal"]
    job_id = slurm.submit(_script(tmp_path, "sleep 30\n"), output=tmp_path / "sleep.out", nodelist="node1")
    try:
        running = slurm.wait_for(job_id, lambda i: i.state == "RUNNING", timeout=30, what="running")
        assert running.nodes == "node1"
        assert slurm.queue([job_id]) == {job_id: "RUNNING"} and job_id in slurm.queue()
        record = slurm.run(["scontrol", "show", "job", "-o", str(job_id)])
        assert "Account=rehearsal" in record and "Partition=local" in record
    finally:
        slurm.cancel([job_id])
    cancelled = slurm.wait_terminal(job_id, timeout=30)
    assert cancelled.state == "CANCELLED" and not cancelled.succeeded
    wrong = Slurm(dataclasses.replace(cfg, slurm_partition="nope"))
    with pytest.raises(SlurmError, match="invalid partition"):
        wrong.submit(_script(tmp_path, "true\n"))
    with pytest.raises(SlurmError, match="unknown to the controller"):
        slurm.job(999999)


def test_preflight_errors(local_cluster_config: ClusterConfig, tmp_path: Path) -> None:
    cfg = dataclasses.replace(local_cluster_config, model_path=tmp_path)
    cluster_checks(cfg, ["node1", "node2"])  # everything in order
    with pytest.raises(PreflightError, match=r"SLURM_PARTITION 'gpu' does not exist \(partitions: local\)"):
        cluster_checks(dataclasses.replace(cfg, slurm_partition="gpu"), ["node1"])
    with pytest.raises(PreflightError, match=r"node 'node9' does not exist in partition 'local'"):
        cluster_checks(cfg, ["node1", "node9"])
    with pytest.raises(PreflightError, match=r"MODEL_PATH .*/absent does not exist"):
        cluster_checks(dataclasses.replace(cfg, model_path=tmp_path / "absent"), ["node1"])
    head = local_cluster_config.etcd_endpoint
    assert head is not None
    dead = head.rsplit(":", 1)[0] + ":2999"  # the head's address, a port nothing listens on
    with pytest.raises(PreflightError, match=rf"ETCD_ENDPOINTS={dead}: etcd is unreachable"):
        cluster_checks(dataclasses.replace(cfg, etcd_endpoints=(dead,)), ["node1"])


def test_up_again_verifies_and_keeps_the_same_daemons(local_cluster: LocalCluster) -> None:
    before = [d.pid for d in local_cluster.status().daemons]
    result = local_cluster.up()
    assert result.already_up
    assert result.config == local_cluster.config()
    assert [d.pid for d in local_cluster.status().daemons] == before


def test_invoke_collection_status(local_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    root = Collection()
    root.add_collection(rehearsal_tasks.ns)
    program = Program(namespace=root)
    assert sorted(rehearsal_tasks.ns.task_names) == ["down", "status", "up"]
    program.run(["invoke", "cluster.status", "--state-dir", str(local_cluster.state_dir)], exit=False)
    out = capsys.readouterr().out
    assert f"local cluster at {local_cluster.state_dir}: healthy" in out
    assert "slurmd-node2" in out and "etcd health" in out
