"""Stopping a run when slurmctld does not answer: on the real local cluster, with one Slurm command wrapped so
that it fails the way a controller that timed out under load answers (everything else is the real command).
A refused SIGTERM is retried while the job runs, and only one that never gets through cancels it; a
controller that does not answer while the jobs stop is asked again, and never makes the stop itself fail."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.run.context import Hook
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages import stop as stop_stage
from atomdyn_launchers.run.stages.record import Outcome
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration

# What the commands print when slurmctld does not answer in time (slurm_strerror of the protocol timeout).
TIMED_OUT = "Socket timed out on send/recv operation"
SCANCEL_REFUSAL = f"scancel: error: Kill job error on job id $3: {TIMED_OUT}"
SQUEUE_REFUSAL = f"slurm_load_jobs error: {TIMED_OUT}"


def _refusing_slurm(
    config: ClusterConfig, tmp_path: Path, command: str, refusals: int, message: str, when: str
) -> tuple[Slurm, Path]:
    """A Slurm whose ``command`` fails ``refusals`` times (counted in a file) while the shell test ``when``
    holds, printing ``message``; the real command otherwise."""
    real = shutil.which(command)
    assert real is not None, f"{command} is not installed"
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    count = tmp_path / "refused"
    count.write_text("0")
    (wrappers / command).write_text(
        "#!/bin/bash\n"
        f'n=$(cat {count})\nif {when} && [ "$n" -lt {refusals} ]; then\n'
        f'  echo $((n + 1)) >{count}\n  echo "{message}" >&2\n  exit 1\nfi\n'
        f'exec {real} "$@"\n'
    )
    (wrappers / command).chmod(0o755)
    slurm = Slurm(config)
    slurm.env["PATH"] = f"{wrappers}:{os.environ.get('PATH', '')}"
    return slurm, count


def _agg_run(config: ClusterConfig, tmp_path: Path, slurm: Slurm, hook: Hook | None = None) -> Outcome:
    """One small aggregated run (mock engine) through ``slurm``."""
    options = LaunchOptions(kind="agg-single", requests=2, runs_root=tmp_path / "runs")
    return Launch(config, options, slurm=slurm, hook=hook).run()


def _jobs(run_dir: Path) -> dict[str, dict[str, str]]:
    run = json.loads((run_dir / "run.json").read_text())
    return {j["role"]: j for j in run["jobs"]}


def _refused_sigterms(config: ClusterConfig, tmp_path: Path, refusals: int) -> tuple[Slurm, Path]:
    return _refusing_slurm(config, tmp_path, "scancel", refusals, SCANCEL_REFUSAL, '[ "$1" = --batch ]')


def test_a_refused_sigterm_is_retried_and_the_job_still_stops_cleanly(
    local_cluster_config: ClusterConfig, tmp_path: Path
) -> None:
    slurm, refused = _refused_sigterms(local_cluster_config, tmp_path, refusals=2)
    outcome = _agg_run(local_cluster_config, tmp_path, slurm)
    assert refused.read_text().strip() == "2"
    assert outcome.passed, outcome.failure
    job = _jobs(outcome.run_dir)["agg"]
    assert (job["state"], job["exit_code"]) == ("COMPLETED", "0:0")
    cancelled = [e for e in outcome.timeline if e["event"] == "cancelled"]
    assert [e["detail"] for e in cancelled] == ["SIGTERM to the job script"]


def test_a_sigterm_that_never_gets_through_cancels_the_job_and_says_why(
    local_cluster_config: ClusterConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stop_stage, "SIGNAL_RETRY_S", 2.0)
    slurm, _ = _refused_sigterms(local_cluster_config, tmp_path, refusals=1000)
    outcome = _agg_run(local_cluster_config, tmp_path, slurm)
    assert not outcome.passed and outcome.failure is not None
    assert "agg (CANCELLED" in outcome.failure, outcome.failure
    assert "SIGTERM not delivered" in outcome.failure and TIMED_OUT in outcome.failure
    assert _jobs(outcome.run_dir)["agg"]["state"] == "CANCELLED"


def test_a_controller_silent_while_the_jobs_stop_is_asked_again(
    local_cluster_config: ClusterConfig, tmp_path: Path
) -> None:
    """squeue fails three times once the stop has begun (the launcher then reads the jobs with a fresh
    poller, which knows no job yet): the stop waits it out, the job ends cleanly, the run passes."""
    stopping = tmp_path / "stopping"
    slurm, refused = _refusing_slurm(
        local_cluster_config, tmp_path, "squeue", 3, SQUEUE_REFUSAL, f"[ -e {stopping} ]"
    )

    def hook(event: str, _record: dict[str, Any]) -> None:
        if event == "cancelled":
            stopping.touch()

    outcome = _agg_run(local_cluster_config, tmp_path, slurm, hook)
    assert refused.read_text().strip() == "3"
    assert outcome.passed, outcome.failure
    job = _jobs(outcome.run_dir)["agg"]
    assert (job["state"], job["exit_code"]) == ("COMPLETED", "0:0")
