"""Ports per run: leased blocks on the shared filesystem (real files, locks and processes), the run's
job scripts listen on the leased ports, and a job script refuses to start on a port taken on its node."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.contract.rundir import RunDir
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.profiles.models import DEFAULT_MODEL, get_model
from atomdyn_launchers.run import ports
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import plan_roles
from atomdyn_launchers.run.submission import Submission
from atomdyn_launchers.sbatch import PORTS_TAKEN_EXIT, JobSpec, ProcessSpec, failure_file, render

DISAGG_ROLES = [("prefill", 1), ("decode", 0)]


def _all_ports(lease: ports.Lease) -> set[int]:
    found: set[int] = set()
    for p in lease.roles.values():
        found |= {p.http, p.system, p.bootstrap, p.nixl_side_channel}
    return found


def test_two_runs_lease_disjoint_blocks_recorded_in_each_run_dir(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    a = ports.allocate(shared, "run-a", tmp_path / "a", DISAGG_ROLES)
    b = ports.allocate(shared, "run-b", tmp_path / "b", DISAGG_ROLES)
    assert a.block_start != b.block_start
    assert not _all_ports(a) & _all_ports(b)
    for lease in (a, b):
        ours = _all_ports(lease)
        assert all(ports.RANGE[0] <= p < ports.RANGE[1] < 32768 for p in ours)
        assert len(ours) == 7  # one frontend http, three per role: no two roles of a run share a port
        recorded = json.loads((lease.run_dir / "ports.json").read_text())
        assert recorded == json.loads((shared / "ports" / f"{lease.run_id}.json").read_text())
        assert recorded["roles"]["decode"]["http"] == lease.roles["decode"].http
        assert recorded["launcher"]["pid"] == os.getpid()


def test_a_recorded_run_gives_its_block_back_and_a_released_one_too(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    a = ports.allocate(shared, "run-a", tmp_path / "a", DISAGG_ROLES)
    (tmp_path / "a" / "run.json").write_text("{}")  # the run recorded its end
    b = ports.allocate(shared, "run-b", tmp_path / "b", DISAGG_ROLES)
    assert b.block_start == a.block_start
    assert [lease.run_id for lease in ports.leases(shared)] == ["run-b"]
    ports.release(shared, "run-b")
    assert ports.leases(shared) == []
    assert (tmp_path / "b" / "ports.json").is_file()  # the run's own record stays


def _allocate_in_child(shared: str, run_id: str, run_dir: str) -> None:
    ports.allocate(Path(shared), run_id, Path(run_dir), DISAGG_ROLES)


def test_a_lease_whose_launcher_died_is_orphaned_and_keeps_its_block(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    child = multiprocessing.get_context("fork").Process(
        target=_allocate_in_child, args=(str(shared), "run-dead", str(tmp_path / "dead"))
    )
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    (dead,) = ports.leases(shared)
    assert dead.launcher.pid == child.pid and dead.launcher.gone() is True and dead.orphaned()
    live = ports.allocate(shared, "run-live", tmp_path / "live", DISAGG_ROLES)
    assert live.block_start != dead.block_start  # its jobs may still hold the ports
    assert not live.orphaned() and live.launcher.gone() is False


def test_concurrent_launchers_never_get_the_same_block(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_allocate_in_child, args=(str(shared), f"run-{i}", str(tmp_path / f"r{i}")))
        for i in range(6)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    blocks = [lease.block_start for lease in ports.leases(shared)]
    assert len(blocks) == 6 and len(set(blocks)) == 6


def test_an_unreadable_lease_is_named(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "ports").mkdir(parents=True)
    (shared / "ports" / "run-x.json").write_text("{not json")
    with pytest.raises(ports.PortError, match=r"run-x\.json is unreadable"):
        ports.allocate(shared, "run-y", tmp_path / "y", DISAGG_ROLES)


def test_the_job_scripts_listen_on_and_check_the_leased_ports(tmp_path: Path) -> None:
    config = ClusterConfig(
        slurm_account="acct",
        slurm_partition="part",
        slurm_qos="normal",
        primary_node="n1",
        prefill_node="n1",
        decode_node="n2",
        shared_dir=tmp_path,
        model_path=tmp_path / "model",
        engine_profile="mocker",
        runtime="venv",
        project_dir=tmp_path,
        python_venv=Path(sys.prefix),
        gpus_per_node=0,
        etcd_endpoints=("http://127.0.0.1:2379",),
    )
    rundir = RunDir(tmp_path / "runs" / "r1", "r1")
    lease = ports.allocate(tmp_path, "r1", rundir.path, DISAGG_ROLES)
    engine = get_engine("mocker")
    submission = Submission(
        config,
        LaunchOptions(kind="disagg"),
        engine,
        get_model(DEFAULT_MODEL),
        rundir,
        "http://127.0.0.1:2379",
        60.0,
        lease.roles,
    )
    runtime = submission.runtime()
    for spec in plan_roles("disagg", config):
        plan, job = submission.role(spec, runtime)
        mine = lease.roles[spec.role]
        script = render(job)
        assert f"system={mine.system}" in script
        argv = " ".join(str(a) for p in plan.processes for a in p.argv)
        # Only the ports a role binds are checked: the mock engine's bootstrap port is the prefill's alone.
        assert (f"bootstrap={mine.bootstrap}" in script) is (spec.role == "prefill")
        if spec.role == "prefill":
            assert f"--bootstrap-ports {mine.bootstrap}" in argv
        else:
            assert f"--http-port {mine.http}" in argv and f"frontend-http={mine.http}" in script
        assert f"DYN_SYSTEM_PORT={mine.system}" in script


def test_a_taken_port_fails_the_job_before_anything_starts_and_is_named(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET6) as held:
        held.bind(("::", 0))  # any address, IPv6 socket: the check reads /proc/net/tcp6 as well
        held.listen()
        taken = held.getsockname()[1]
        with socket.socket() as free_probe:
            free_probe.bind(("127.0.0.1", 0))
            free = free_probe.getsockname()[1]
        marker = tmp_path / "started"
        job = JobSpec(
            role="decode",
            job_name="t",
            node="n1",
            account="a",
            partition="p",
            qos="q",
            output=str(tmp_path / "out"),
            log_dir=str(tmp_path / "logs"),
            processes=[ProcessSpec("frontend", ["touch", str(marker)])],
            ports={"frontend-http": free, "system": taken},
        )
        script = tmp_path / "job.sh"
        script.write_text(render(job))
        done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == PORTS_TAKEN_EXIT, done.stdout + done.stderr
    reason = Path(failure_file(str(tmp_path / "logs"), "decode")).read_text().strip()
    assert reason.startswith(f"port {taken} (system) already in use on {socket.gethostname()}")
    assert str(free) not in reason
    assert not marker.exists()


def _wait_for_file(path: Path, proc: subprocess.Popen[str], timeout_s: float = 30.0) -> None:
    """Until ``path`` exists; fails naming it when the job ends first or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the job ended (exit {proc.returncode}) before {path} appeared")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {path}")
        time.sleep(0.02)


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    job = JobSpec(
        role="decode",
        job_name="t",
        node="n1",
        account="a",
        partition="p",
        qos="q",
        output=str(tmp_path / "out"),
        log_dir=str(tmp_path / "logs"),
        processes=[
            ProcessSpec("decode", ["sh", "-c", f"trap '' TERM; touch {ready}; while :; do sleep 0.1; done"])
        ],
        stop_grace_s=1,
    )
    script = tmp_path / "job.sh"
    script.write_text(render(job))
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, text=True)
    try:
        _wait_for_file(ready, proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "decode still running 1 s after SIGTERM: SIGKILL" in out
    assert "all processes stopped" in out
