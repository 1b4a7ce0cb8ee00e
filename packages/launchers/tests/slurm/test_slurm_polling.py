"""How hard the launchers poll Slurm, counted on the real local cluster: every Slurm command goes through a
wrapper that logs its name and then runs the real command (nothing of Slurm is mocked)."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import pytest
from faultkit import wait_for

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.slurm.client import (
    POLL_SCHEDULE,
    TRANSIENT_S,
    JobPoller,
    Slurm,
    SlurmError,
    poll_interval,
)

COMMANDS = ("squeue", "sacct", "scontrol", "sbatch", "scancel", "sinfo")


def test_the_schedule_backs_off_after_the_first_minute() -> None:
    assert poll_interval(0) == poll_interval(59.9) == 0.5
    assert poll_interval(60) == poll_interval(299) == 2.0
    assert poll_interval(300) == poll_interval(3600) == 10.0
    assert [since for since, _ in POLL_SCHEDULE] == sorted(since for since, _ in POLL_SCHEDULE)


def _counting_slurm(config: ClusterConfig, tmp_path: Path) -> tuple[Slurm, Path]:
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    log = tmp_path / "calls.log"
    for name in COMMANDS:
        real = shutil.which(name)
        assert real is not None, f"{name} is not installed"
        script = wrappers / name
        script.write_text(f'#!/bin/bash\necho "{name} $*" >>{log}\nexec {real} "$@"\n')
        script.chmod(0o755)
    slurm = Slurm(config)
    slurm.env["PATH"] = f"{wrappers}:{os.environ.get('PATH', '')}"
    return slurm, log


def _calls(log: Path) -> Counter[str]:
    return Counter(line.split()[0] for line in log.read_text().splitlines()) if log.exists() else Counter()


@pytest.mark.integration
def test_jobs_are_polled_with_squeue_and_backing_off_then_read_once_when_they_end(
    local_cluster_config: ClusterConfig, tmp_path: Path
) -> None:
    config = local_cluster_config
    slurm, log = _counting_slurm(config, tmp_path)
    release = tmp_path / "release"
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n# waits for the test to release it (bounded), then ends cleanly\n"
        f"for _ in $(seq 1200); do [ -e {release} ] && exit 0; sleep 0.1; done\nexit 1\n"
    )
    jobs = [
        slurm.submit(script, job_name="atomdyn-poll", nodelist=node, output=tmp_path / f"{node}.out")
        for node in (config.prefill_node, config.decode_node)
    ]
    try:
        assert slurm.call_counts()["calls"] == {"sbatch": 2}
        now = [0.0]
        poller = JobPoller(slurm, clock=lambda: now[0])
        wait_for(
            "both jobs to run",
            lambda: all(i.state == "RUNNING" for i in poller.poll(jobs, force=True).values()),
        )
        before = _calls(log)
        # Six simulated minutes of the launcher's loop (a poll every 0.2 s), against the real controller.
        expected = 0
        due = 0.0
        for step in range(1, 1801):
            now[0] = step * 0.2
            if now[0] >= due:
                expected += 1
                due = now[0] + poll_interval(now[0])
            states = poller.poll(jobs)
            assert all(info.state == "RUNNING" for info in states.values())
        during = _calls(log) - before
        assert during == Counter({"squeue": expected}), during  # one squeue for both jobs, nothing else
        # 0.5 s for a minute (0.6 s on the loop's 0.2 s steps), 2 s to five minutes, then 10 s: 226 calls where
        # a read of every job every 0.2 s made 3600.
        assert expected == 100 + 120 + 6
        release.touch()
        wait_for("both jobs to end", lambda: all(i.terminal for i in poller.poll(jobs, force=True).values()))
        ended = poller.poll(jobs, force=True)
        assert all(info.succeeded for info in ended.values()), ended
        finals = _calls(log)
        for _ in range(50):
            poller.poll(jobs, force=True)
        assert _calls(log) == finals  # a finished job is never asked again
        # Each job's final state (exit codes) read once: sacct with accounting, else scontrol.
        asked = [
            line.split()[2] if line.startswith("sacct") else line.split()[-1]
            for line in log.read_text().splitlines()
            if line.startswith(("sacct -j", "scontrol -d show job"))
        ]
        assert Counter(asked) == Counter(str(j) for j in jobs), asked
        counts = slurm.call_counts()
        assert counts["total"] == sum(_calls(log).values())
        assert isinstance(counts["per_minute"], float) and counts["per_minute"] > 0
    finally:
        release.touch()
        slurm.cancel(jobs)


@pytest.mark.integration
def test_a_controller_that_misses_answers_is_asked_again_until_it_has_been_silent_too_long(
    local_cluster_config: ClusterConfig, tmp_path: Path
) -> None:
    """squeue failing under load ("Unexpected missing socket error", seen on this 2-core machine) must not fail
    a run at once: the last states stand in until TRANSIENT_S without an answer."""
    config = local_cluster_config
    slurm, _log = _counting_slurm(config, tmp_path)
    flaky = tmp_path / "flaky"
    wrapper = tmp_path / "bin" / "squeue"
    real = shutil.which("squeue", path=os.environ.get("PATH"))
    wrapper.write_text(
        "#!/bin/bash\n"
        f'if [ -e {flaky} ]; then echo "squeue: error: slurm_load_jobs error: Unexpected missing socket error"'
        " >&2; exit 1; fi\n"
        f'exec {real} "$@"\n'
    )
    release = tmp_path / "release"
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/bash\nfor _ in $(seq 1200); do [ -e {release} ] && exit 0; sleep 0.1; done\nexit 1\n"
    )
    job = slurm.submit(
        script, job_name="atomdyn-flaky", nodelist=config.prefill_node, output=tmp_path / "j.out"
    )
    try:
        now = [0.0]
        poller = JobPoller(slurm, clock=lambda: now[0])
        wait_for("the job to run", lambda: poller.poll([job], force=True)[job].state == "RUNNING")
        flaky.touch()
        for step in range(1, 31):  # failed reads from t=1 s to t=30 s: the last answer stands
            now[0] = float(step)
            assert poller.poll([job], force=True)[job].state == "RUNNING"
        now[0] = 1.0 + TRANSIENT_S
        with pytest.raises(SlurmError, match=r"Unexpected missing socket error.*no answer for 30 s"):
            poller.poll([job], force=True)
        flaky.unlink()
        now[0] = 2.0 + TRANSIENT_S
        assert poller.poll([job], force=True)[job].state == "RUNNING"  # answered again: back to normal
    finally:
        release.touch()
        slurm.cancel([job])
