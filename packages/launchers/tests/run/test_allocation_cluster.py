"""Runs inside an existing allocation on the real local cluster (mock engine): a holder job pinned to both nodes
stands for ``salloc``; every role starts as a job step of it (srun), is stopped and recorded like a batch job, a
failed run leaves the allocation RUNNING and the next run in it passes."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from allocations import QueueWatch, holder
from faultkit import wait_for

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.rundir import read_jsonl
from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import run_prefix
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.run import orphans, ports
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.record import Outcome
from atomdyn_launchers.slurm.client import Slurm
from atomdyn_launchers.slurm.steps import step_name

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    return local_cluster_config


@pytest.fixture(scope="module")
def allocation(config: ClusterConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A job holding both nodes (``sleep infinity``), as ``salloc -N2`` would; cancelled at the end."""
    out = tmp_path_factory.mktemp("holder") / "holder.out"
    with holder(config, [config.prefill_node, config.decode_node], out) as job:
        yield job


def _state(config: ClusterConfig, job: int) -> str:
    return Slurm(config).allocation(job).state


def _steps_left(config: ClusterConfig, job: int) -> list[str]:
    return [f"{s.job_id}.{s.step_id} {s.name}" for s in Slurm(config).steps(job)]


def _no_step_left(config: ClusterConfig, job: int) -> list[str]:
    """The steps still listed after up to 10 s: srun exits as its step ends, and the controller may list the
    step a moment longer (on a loaded machine) before it forgets it."""
    deadline = time.monotonic() + 10.0
    while (left := _steps_left(config, job)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _run(config: ClusterConfig, allocation: int, hook: Any = None, **options: Any) -> Outcome:
    opts = LaunchOptions(kind="disagg", allocation=allocation, **options)
    return Launch(config, opts, hook=hook).run()


def _assert_stepped(outcome: Outcome, config: ClusterConfig, allocation: int) -> dict[str, Any]:
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["allocation"] == {
        "job_id": allocation,
        "node_list": Slurm(config).allocation(allocation).node_list,
        "nodes": [config.prefill_node, config.decode_node],
        "source": "--allocation",
    }
    jobs = {j["role"]: j for j in run["jobs"]}
    assert {j["job_id"] for j in jobs.values()} == {allocation}
    steps = [j["step_id"] for j in jobs.values()]
    assert all(isinstance(s, int) for s in steps) and len(set(steps)) == len(steps), steps
    assert {r: j["node_ran"] for r, j in jobs.items()} == {
        "prefill": config.prefill_node,
        "decode": config.decode_node,
    }
    submitted = [e for e in outcome.timeline if e["event"] == "submitted"]
    assert all(f"a step of allocation {allocation}" in e["detail"] for e in submitted)
    running = {e["role"]: e["detail"] for e in outcome.timeline if e["event"] == "running"}
    assert running == {r: f"{j['node_ran']} (step {allocation}.{j['step_id']})" for r, j in jobs.items()}
    for role in jobs:
        assert (outcome.run_dir / "logs" / f"{role}.slurm.out").stat().st_size > 0
    return run


def _assert_nothing_left(config: ClusterConfig, allocation: int, outcome: Outcome) -> None:
    assert _state(config, allocation) == "RUNNING"  # the allocation outlives every run in it
    assert _no_step_left(config, allocation) == []
    etcd = EtcdClient(config.require_etcd())
    assert etcd.get_prefix(run_prefix(outcome.run_id))[0] == {}


def test_a_disaggregated_run_inside_an_allocation(config: ClusterConfig, allocation: int) -> None:
    outcome = _run(config, allocation, requests=8)
    assert outcome.passed, outcome.failure
    run = _assert_stepped(outcome, config, allocation)
    assert run["placement_verified"] is True and run["result"] == "pass"
    for job in run["jobs"]:  # stopped through the script's own SIGTERM handling, as a batch job is
        assert (job["state"], job["exit_code"]) == ("COMPLETED", "0:0")
    cancelled = [e["detail"] for e in outcome.timeline if e["event"] == "cancelled"]
    assert sorted(cancelled) == sorted(f"SIGTERM to step {allocation}.{j['step_id']}" for j in run["jobs"])
    assert (outcome.run_dir / "scripts" / "prefill.sbatch").read_text().startswith("#!/bin/bash")
    # The evidence reads a run of steps as it reads one of batch jobs.
    signals = collect_signals(outcome.run_dir)
    assert signals.get("jobs.clean") is True and signals.get("placement.as_requested") is True
    _assert_nothing_left(config, allocation, outcome)


def test_a_failed_run_leaves_the_allocation_for_the_next(config: ClusterConfig, allocation: int) -> None:
    killed: dict[str, float] = {}

    def hook(event: str, record: dict[str, Any]) -> None:
        if event != "first_good_response":
            return
        run: Monitor = record["run"]
        pid = run.registrations["decode"].pids["decode"]

        def kill() -> None:
            killed["t"] = time.time()
            os.kill(pid, signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()

    failed = _run(config, allocation, hook, requests=2000, concurrency=2)
    assert not failed.passed and failed.failure is not None
    assert "decode" in failed.failure and "status 137" in failed.failure, failed.failure
    run = _assert_stepped(failed, config, allocation)
    jobs = {j["role"]: j for j in run["jobs"]}
    assert (jobs["decode"]["state"], jobs["decode"]["exit_code"]) == ("FAILED", "137:0")
    assert (jobs["prefill"]["state"], jobs["prefill"]["exit_code"]) == ("COMPLETED", "0:0")
    assert len(read_jsonl(failed.run_dir / "requests.jsonl")) < 2000
    # A run of steps is diagnosed as one of batch jobs: the kill first, in run.json and read again.
    assert run["diagnosis"]["first"] == "process-killed-by-signal", run["diagnosis"]
    again = diagnose_run(failed.run_dir)
    assert again.first is not None and again.first.entry.id == "process-killed-by-signal", again.text()
    _assert_nothing_left(config, allocation, failed)

    again = _run(config, allocation, requests=8)
    assert again.passed, again.failure
    _assert_stepped(again, config, allocation)
    _assert_nothing_left(config, allocation, again)


def test_a_node_outside_the_allocation_is_refused_before_anything_runs(
    config: ClusterConfig, tmp_path: Path
) -> None:
    slurm = Slurm(config)
    args = slurm.sbatch_args(job_name="alloc-one", nodelist=config.prefill_node, output=tmp_path / "one.out")
    job = int(slurm.run([*args, "--wrap", "exec sleep infinity"]).strip())
    try:
        slurm.wait_for(job, lambda i: i.state == "RUNNING", timeout=30, what="running")
        runs = sorted(config.runs_dir.glob("*")) if config.runs_dir.exists() else []
        with pytest.raises(PreflightError, match=rf"node '{config.decode_node}' is not in allocation {job}"):
            _run(config, job)
        assert (sorted(config.runs_dir.glob("*")) if config.runs_dir.exists() else []) == runs
    finally:
        slurm.cancel([job])


def test_a_run_inside_an_allocation_checks_its_nodes_and_owns_its_etcd_in_steps_alone(
    config: ClusterConfig, allocation: int
) -> None:
    """No --skip-node-check, no ETCD_ENDPOINTS: the node check and the run's etcd are steps of the allocation
    too, so nothing but the allocation is ever in the queue (an allocation holding its nodes exclusively
    would leave a batch job of the run pending)."""
    no_etcd = dataclasses.replace(config, etcd_endpoints=())
    slurm = Slurm(no_etcd)
    opts = LaunchOptions(kind="disagg", allocation=allocation, requests=8)
    with QueueWatch(config) as watch:
        outcome = Launch(no_etcd, opts, slurm=slurm).run()
    assert outcome.passed, outcome.failure
    # squeue listed the holder alone: no job of the run was ever queued.
    assert watch.polls > 3 and allocation in watch.seen and watch.new == set(), (watch.before, watch.seen)
    assert "sbatch" not in slurm.call_counts()["calls"]  # type: ignore[operator]
    run = _assert_stepped(outcome, config, allocation)
    assert run["result"] == "pass"
    # The node check ran (as steps on both nodes) and admitted the run; its outputs where a batch check's go.
    report = json.loads((outcome.run_dir / "node-check.json").read_text())
    assert report["ok"] is True and set(report["nodes"]) == {config.prefill_node, config.decode_node}
    works = sorted((config.shared_dir / "nodes").glob("check-*"), key=lambda p: p.stat().st_mtime)
    for node in (config.prefill_node, config.decode_node):
        assert (works[-1] / f"check-{node}.json").is_file()
        assert (works[-1] / f"check-{node}.out").is_file()
    # The run's etcd: a step on the prefill node, stopped by SIGTERM, its output in logs/etcd.slurm.out.
    record = json.loads((outcome.run_dir / "etcd.json").read_text())
    assert record["node"] == config.prefill_node and record["job_id"] == str(allocation)
    assert record["stopped"] and record["exit_status"] == 0
    assert "etcd serving at" in (outcome.run_dir / "logs" / "etcd.slurm.out").read_text()
    scripts = (outcome.run_dir / "scripts" / "prefill.sbatch").read_text()
    assert record["endpoint"] in scripts and config.etcd_endpoint not in scripts
    assert _state(config, allocation) == "RUNNING"
    assert _no_step_left(config, allocation) == []


def _lease_in_child(shared: str, run_id: str, run_dir: str) -> None:
    ports.allocate(Path(shared), run_id, Path(run_dir), [("prefill", 1), ("decode", 0)])


def test_orphan_cleanup_stops_the_steps_a_killed_launcher_left(
    config: ClusterConfig, allocation: int, tmp_path: Path
) -> None:
    """A launcher killed hard leaves its steps running (srun leads a session of its own): the next run's orphan
    cleanup finds them by their name (``<job name>@<run id>``), stops each alone, and leaves the allocation."""
    run_id = "20260101T000000Z-disagg-mocker-stepped"
    run_dir = config.runs_dir / run_id
    run_dir.mkdir(parents=True)
    child = multiprocessing.get_context("fork").Process(
        target=_lease_in_child, args=(str(config.shared_dir), run_id, str(run_dir))
    )
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0  # the lease's launcher is gone
    script = tmp_path / "role.sh"
    script.write_text("#!/bin/bash\ntrap 'exit 0' TERM\nsleep 600 &\nwait\n")
    slurm = Slurm(config)
    started = []
    for role, node in (("prefill", config.prefill_node), ("decode", config.decode_node)):
        args = slurm.srun_args(
            allocation=allocation,
            nodelist=node,
            job_name=step_name(f"atomdyn-{role}", run_id),
            output=run_dir / f"{role}.out",
            chdir=run_dir,
        )
        started.append(slurm.start_step([*args, "bash"], script, log=run_dir / f"{role}.out"))
    try:
        wait_for("both steps listed", lambda: len(_steps_left(config, allocation)) == 2, timeout_s=30)
        (found,) = [o for o in orphans.find(config.shared_dir, slurm) if o.run_id == run_id]
        assert {s.name for s in found.steps} == {f"atomdyn-{r}@{run_id}" for r in ("prefill", "decode")}
        assert "RUNNING" in found.describe() and f"step {allocation}." in found.describe()
        (done,) = orphans.clean(config.shared_dir, slurm, [found], None)
        assert "stopped steps" in done and "cancelled hard" not in done, done
        for proc in started:
            assert proc.wait(timeout=30) == 0  # SIGTERM reached the script: it ended on its own
        assert _no_step_left(config, allocation) == []
        assert _state(config, allocation) == "RUNNING"
        note = json.loads((run_dir / "orphan-cleanup.json").read_text())
        assert sorted(note["steps_stopped"]) == sorted(f"{s.job_id}.{s.step_id}" for s in found.steps)
        assert note["steps_cancelled_hard"] == []
        assert run_id not in {lease.run_id for lease in ports.leases(config.shared_dir)}
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
