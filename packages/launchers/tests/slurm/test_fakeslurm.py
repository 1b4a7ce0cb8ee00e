"""The fake Slurm (tests/fakeslurm.py) as the real client reads it: its answers parsed by the client's own
parsers, its jobs moving through Slurm's states, scancel's exit statuses, a job the controller forgot. The
stage tests rely on it (tests/run/test_stages_fake.py); these keep it honest without etcd or a cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeslurm import EXIT_ALREADY_DONE, FakeCluster, FakeSlurm, Script, Unmodelled, expand_hostlist
from golden_launch import golden_config

from atomdyn_launchers.config.cluster import PreflightError
from atomdyn_launchers.slurm.client import JobPoller, SlurmError

CONFIG = golden_config("mocker", "venv")


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\nsleep infinity\n")
    return path


def _submit(slurm: FakeSlurm, script: Path, name: str = "atomdyn-decode") -> int:
    return slurm.submit(script, job_name=name, nodelist="gpu-node-02", output=script.parent / "out")


def test_a_job_runs_then_completes_on_sigterm_to_its_script(cluster: FakeCluster, script: Path) -> None:
    cluster.script("decode", Script(pending_s=0.2))
    slurm = FakeSlurm(CONFIG, cluster)
    job_id = _submit(slurm, script)
    pending = slurm.job(job_id)
    assert (pending.state, pending.reason, pending.nodes, pending.source) == (
        "PENDING",
        "Priority",
        None,
        "scontrol",
    )
    running = slurm.wait_for(job_id, lambda i: i.state == "RUNNING", timeout=5, what="running")
    assert running.nodes == "gpu-node-02" and not running.terminal
    slurm.signal_batch([job_id])
    done = slurm.wait_terminal(job_id, timeout=5)
    assert (done.state, done.exit_code, done.succeeded) == ("COMPLETED", (0, 0), True)
    assert cluster.job(job_id).history == ["PENDING", "RUNNING", "COMPLETING", "COMPLETED"]


@pytest.mark.parametrize("accounting", [False, True], ids=["scontrol", "sacct"])
def test_a_cancelled_job_reads_cancelled_from_either_source(
    cluster: FakeCluster, script: Path, accounting: bool
) -> None:
    cluster.accounting = accounting
    slurm = FakeSlurm(CONFIG, cluster)
    job_id = _submit(slurm, script)
    slurm.wait_for(job_id, lambda i: i.state == "RUNNING", timeout=5, what="running")
    slurm.cancel([job_id])
    done = slurm.wait_terminal(job_id, timeout=5)
    assert (done.state, done.exit_code, done.succeeded) == ("CANCELLED", (0, 15), False)
    assert done.source == ("sacct" if accounting else "scontrol")


def test_a_failed_job_carries_its_exit_status(cluster: FakeCluster, script: Path) -> None:
    cluster.script("decode", Script(exit_after_s=0.1, exit_code=3))
    slurm = FakeSlurm(CONFIG, cluster)
    done = slurm.wait_terminal(_submit(slurm, script), timeout=5)
    assert (done.state, done.exit_code, done.reason) == ("FAILED", (3, 0), "NonZeroExitCode")


def test_the_poller_asks_squeue_while_queued_and_the_controller_once_after(
    cluster: FakeCluster, script: Path
) -> None:
    slurm = FakeSlurm(CONFIG, cluster)
    job_id = _submit(slurm, script)
    poller = JobPoller(slurm)
    assert poller.poll([job_id], force=True)[job_id].source == "squeue"
    cluster.finish(job_id)
    cluster.wait(lambda: cluster.job(job_id).state == "COMPLETED")
    assert poller.poll([job_id], force=True)[job_id].state == "COMPLETED"
    before = slurm.call_counts()["total"]
    assert poller.poll([job_id], force=True)[job_id].state == "COMPLETED"
    assert slurm.call_counts()["total"] == before  # a finished job is not asked again


def test_a_job_the_controller_forgot_reads_its_last_answer(cluster: FakeCluster, script: Path) -> None:
    cluster.min_job_age_s = 1.0  # longer than a poll: Slurm's own minimum is 2 s
    slurm = FakeSlurm(CONFIG, cluster)
    job_id = _submit(slurm, script)
    slurm.wait_for(job_id, lambda i: i.state == "RUNNING", timeout=5, what="running")
    cluster.finish(job_id)
    slurm.wait_terminal(job_id, timeout=5)
    cluster.wait(lambda: cluster.job(job_id).purged)
    with pytest.raises(SlurmError, match="Invalid job id specified"):
        slurm.queue([job_id])
    info = slurm.job(job_id)
    assert (info.state, info.source) == ("COMPLETED", "cache")


def test_scancel_answers_as_slurm_for_jobs_done_pending_or_unknown(
    cluster: FakeCluster, script: Path
) -> None:
    cluster.script("decode", Script(hold=True))
    slurm = FakeSlurm(CONFIG, cluster)
    job_id = _submit(slurm, script)
    with pytest.raises(SlurmError, match="Job is pending execution"):
        slurm.signal_batch([job_id])
    cluster.finish(job_id)
    cluster.wait(lambda: cluster.job(job_id).state == "COMPLETED")
    slurm.cancel([job_id])  # SIGKILL to a job already done: scancel ignores it
    with pytest.raises(SlurmError, match=f"failed \\(exit {EXIT_ALREADY_DONE}\\)"):
        slurm.signal_batch([job_id])
    with pytest.raises(SlurmError, match="Kill job error on job id 99: Invalid job id specified"):
        slurm.signal_batch([99])


def test_a_held_job_stays_pending_with_its_reason_until_released(cluster: FakeCluster, script: Path) -> None:
    cluster.script("decode", Script(hold=True, pending_reason="Resources"))
    slurm = FakeSlurm(CONFIG, cluster)
    job_id = _submit(slurm, script)
    assert slurm.queue([job_id]) == {job_id: "PENDING"}
    assert (slurm.job(job_id).state, slurm.job(job_id).reason) == ("PENDING", "Resources")
    cluster.release(job_id)
    assert slurm.wait_for(job_id, lambda i: i.state == "RUNNING", timeout=5, what="running").reason is None


def test_a_refusal_fails_the_next_commands_and_then_passes(cluster: FakeCluster, script: Path) -> None:
    slurm = FakeSlurm(CONFIG, cluster)
    cluster.refuse("sbatch", 2, "sbatch: error: Batch job submission failed: Socket timed out")
    for _ in range(2):
        with pytest.raises(SlurmError, match=r"sbatch --parsable .* failed \(exit 1\): .*Socket timed out"):
            _submit(slurm, script)
    assert _submit(slurm, script) > 0
    assert len(cluster.jobs) == 1


def test_an_allocation_and_its_nodes_read_as_the_client_parses_them(cluster: FakeCluster) -> None:
    slurm = FakeSlurm(CONFIG, cluster)
    alloc = cluster.allocate(["gpu-node-01", "gpu-node-02"])
    read = slurm.allocation(alloc)
    assert (read.state, read.nodes) == ("RUNNING", ("gpu-node-01", "gpu-node-02"))
    assert slurm.steps(alloc) == []  # the batch step is not one of the run's
    assert expand_hostlist("gpu-node-0[1-2],login") == ["gpu-node-01", "gpu-node-02", "login"]


def test_the_partition_and_node_checks_read_sinfo(cluster: FakeCluster) -> None:
    slurm = FakeSlurm(CONFIG, cluster)
    slurm.check_partition()
    slurm.check_nodes(["gpu-node-01"])
    with pytest.raises(PreflightError, match="node 'gpu-node-09' does not exist in partition 'gpu'"):
        slurm.check_nodes(["gpu-node-09"])


def test_a_command_the_fake_does_not_model_fails_the_test(cluster: FakeCluster) -> None:
    with pytest.raises(Unmodelled):
        FakeSlurm(CONFIG, cluster).run(["sbcast", "x", "y"])
    with pytest.raises(Unmodelled):
        FakeSlurm(CONFIG, cluster).run(["squeue", "-h", "-o", "%Q"])
