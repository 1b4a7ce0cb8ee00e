"""Quick fault tests on the real local cluster (the long suite is ``nox -s faults``): two runs at once, a port
taken on a node, the frontend killed, etcd hung, the launcher killed. Each checks the headline names the cause
and that the run ends within a bound; a failed run's diagnosis (run.json, and ``invoke diagnose`` of its
directory; a killed launcher's run has no run.json) names the fault's catalog entry first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from faultkit import (
    ChildLaunch,
    job_ended,
    launch_with_fault,
    time_to_end,
    time_to_fail,
    wait_clean,
    wait_for,
)

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.rehearsal.localcluster import LocalCluster
from atomdyn_launchers.run import ports
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.record import Outcome
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    return local_cluster_config


def _run_json(outcome: Outcome) -> dict[str, object]:
    loaded = json.loads((outcome.run_dir / "run.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def assert_diagnosed_first(outcome: Outcome, entry: str) -> None:
    """The run's own record and a later ``invoke diagnose`` of its directory both name ``entry`` first."""
    recorded = _run_json(outcome)["diagnosis"]
    assert isinstance(recorded, dict) and recorded["first"] == entry, recorded
    again = diagnose_run(outcome.run_dir)
    assert again.first is not None and again.first.entry.id == entry, again.text()
    assert again.rerun.startswith("invoke disagg.run"), again.rerun


def test_two_launchers_at_once_on_one_cluster_both_pass(config: ClusterConfig, tmp_path: Path) -> None:
    """Two launcher processes, as two users' `invoke disagg.run` would be, on the same two nodes at once."""
    children = [ChildLaunch(config, tmp_path / f"cluster{i}.env", requests=8) for i in range(2)]
    finished = [child.finish(timeout_s=300) for child in children]
    run_dirs: list[Path] = []
    for code, out, err in finished:
        assert code == 0, err[-3000:]
        result = next(line.split() for line in out.splitlines() if line.startswith("RESULT"))
        assert result[1] == "True", err[-3000:]
        run_dirs.append(Path(result[2]))
    a, b = (json.loads((d / "ports.json").read_text()) for d in run_dirs)
    assert a["block"] != b["block"] and a["launcher"]["pid"] != b["launcher"]["pid"]
    for run_dir in run_dirs:
        run = json.loads((run_dir / "run.json").read_text())
        assert run["ports"] == json.loads((run_dir / "ports.json").read_text())["roles"]
        calls = run["slurm_calls"]
        assert calls["calls"].get("squeue", 0) >= 1 and calls["per_minute"] > 0
    assert not {d.name for d in run_dirs} & {lease.run_id for lease in ports.leases(config.shared_dir)}
    for run_dir in run_dirs:
        left = wait_clean(config, run_dir.name)
        assert left.none(), left


def _next_block(config: ClusterConfig) -> int:
    taken = {lease.block_start for lease in ports.leases(config.shared_dir) if not lease.recorded()}
    return ports._first_free_block(taken)


def test_a_port_taken_on_a_node_is_named_in_the_headline(
    config: ClusterConfig, local_cluster: LocalCluster
) -> None:
    port = ports.role_ports(_next_block(config), 1).system  # prefill's system port in the next block
    holder = subprocess.Popen(
        local_cluster.node_command(
            config.prefill_node,
            [sys.executable, "-c", "import socket,sys\ns=socket.socket()\n"
             f"s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('0.0.0.0',{port}))\n"
             "s.listen()\nprint('listening',flush=True)\nsys.stdin.read()"],
        ),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "listening"
        outcome = Launch(config, LaunchOptions(kind="disagg", requests=4)).run()
    finally:
        holder.kill()
        holder.communicate(timeout=10)  # reaps it and closes its pipes
    assert not outcome.passed and outcome.failure is not None
    assert f"port {port} (system) already in use on {config.prefill_node}" in outcome.failure, outcome.failure
    assert "(prefill) ended early" in outcome.failure
    assert_diagnosed_first(outcome, "port-taken")


def _kill_frontend(run: Monitor) -> str:
    pid = run.registrations["decode"].pids["frontend"]
    os.kill(pid, signal.SIGKILL)
    return f"SIGKILL to the frontend (pid {pid})"


def test_a_killed_frontend_is_named_in_the_headline(config: ClusterConfig) -> None:
    outcome, injected = launch_with_fault(config, _kill_frontend)
    assert not outcome.passed and outcome.failure is not None
    assert "process frontend exited first, on its own (status 137, signal KILL)" in outcome.failure
    assert outcome.failure.startswith(("role decode", "job ")), outcome.failure
    assert time_to_fail(outcome, injected) < 10
    assert_diagnosed_first(outcome, "process-killed-by-signal")
    left = wait_clean(config, outcome.run_id)
    assert left.none(), left


def _etcd_pid(cluster: LocalCluster) -> int:
    record = cluster._read_record()
    assert record is not None
    return next(p.pid for p in record[1] if p.name == "etcd")


def test_a_hung_etcd_fails_the_run_naming_etcd_and_every_job_stops(
    config: ClusterConfig, local_cluster: LocalCluster
) -> None:
    pid = _etcd_pid(local_cluster)

    def hang(run: Monitor) -> str:
        os.kill(pid, signal.SIGSTOP)
        return f"SIGSTOP to etcd (pid {pid})"

    try:
        outcome, injected = launch_with_fault(config, hang)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert not outcome.passed and outcome.failure is not None
    assert "etcd" in outcome.failure, outcome.failure
    # readiness.ETCD_LOST_S + REFRESH_S + the client's 3 s timeout = 9 s; the rest is the launcher's poll.
    assert time_to_fail(outcome, injected) < 12, outcome.failure
    run = _run_json(outcome)
    jobs = run["jobs"]
    assert isinstance(jobs, list)
    assert all(j["state"] in ("COMPLETED", "FAILED") for j in jobs), jobs
    # Every job stopped within its SIGTERM grace: no settle timeout, no hard cancel.
    assert not any(j["state"] == "CANCELLED" for j in jobs)
    assert time_to_end(outcome, injected) < 45
    assert_diagnosed_first(outcome, "etcd-not-answering")
    left = wait_clean(config, outcome.run_id)
    assert left.none(), left


def test_a_killed_launcher_leaves_an_orphan_that_status_lists_and_the_next_run_cleans(
    config: ClusterConfig, local_cluster: LocalCluster, tmp_path: Path
) -> None:
    child = ChildLaunch(config, tmp_path / "cluster.env")
    run_dir = child.wait_first_response()
    child.signal(signal.SIGKILL)
    child.finish()
    status = local_cluster.status()
    assert not status.healthy
    (orphan,) = [line for line in status.orphans if run_dir.name in line]
    assert "launcher pid" in orphan and "is gone" in orphan
    assert f"orphaned run {run_dir.name}" in status.table()
    launch = Launch(config, LaunchOptions(kind="disagg", requests=4))
    launch.clean_orphans()
    note = json.loads((run_dir / "orphan-cleanup.json").read_text())
    assert note["jobs_stopped"] or note["jobs_cancelled_hard"] == []
    # No run.json: the cleanup's own line names the run, or the roles' when they noticed the launcher gone first.
    found = diagnose_run(run_dir)
    assert found.first is not None, found.text()
    assert found.first.entry.id in ("launcher-died-run-orphaned", "launcher-gone"), found.text()
    assert run_dir.name not in {lease.run_id for lease in ports.leases(config.shared_dir)}
    assert not any(run_dir.name in line for line in local_cluster.status().orphans)
    slurm = Slurm(config)
    for job_id in child.job_ids():
        wait_for(f"job {job_id} to end", job_ended(slurm, job_id), timeout_s=30)
    left = wait_clean(config, run_dir.name)
    assert left.none(), left
