"""Runs inside an existing allocation on the real local cluster (mock engine): a holder job pinned to both nodes
stands for ``salloc``; every role starts as a job step of it (srun), is stopped and recorded like a batch job, a
failed run leaves the allocation RUNNING and the next run in it passes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.rundir import read_jsonl
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import run_prefix
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.record import Outcome
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    return local_cluster_config


@pytest.fixture(scope="module")
def allocation(config: ClusterConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A job holding both nodes (``sleep infinity``), as ``salloc -N2`` would; cancelled at the end."""
    slurm = Slurm(config)
    nodes = f"{config.prefill_node},{config.decode_node}"
    out = tmp_path_factory.mktemp("holder") / "holder.out"
    args = slurm.sbatch_args(job_name="alloc-holder", nodelist=nodes, output=out, extra_args=["--nodes=2"])
    job = int(slurm.run([*args, "--wrap", "exec sleep infinity"]).strip())
    try:
        slurm.wait_for(job, lambda i: i.state == "RUNNING", timeout=30, what="running")
        yield job
    finally:
        slurm.cancel([job])


def _state(config: ClusterConfig, job: int) -> str:
    return Slurm(config).allocation(job).state


def _steps_left(config: ClusterConfig, job: int) -> list[str]:
    return [f"{s.job_id}.{s.step_id} {s.name}" for s in Slurm(config).steps(job)]


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
    assert _steps_left(config, allocation) == []
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
