"""Stopping a run when slurmctld refuses the SIGTERM: on the real local cluster, with scancel wrapped so that
its ``--batch`` signal fails the way a controller that timed out under load answers (everything else is the
real scancel). A refusal is retried while the job runs; only a signal that never gets through cancels it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from atomdyn_launchers import launch
from atomdyn_launchers.config import ClusterConfig
from atomdyn_launchers.launch import Launch, LaunchOptions, Outcome
from atomdyn_launchers.slurm import Slurm

pytestmark = pytest.mark.integration

# What scancel prints when slurmctld does not answer in time (slurm_strerror of the protocol timeout).
REFUSAL = "scancel: error: Kill job error on job id $3: Socket timed out on send/recv operation"


def _refusing_slurm(config: ClusterConfig, tmp_path: Path, refusals: int) -> tuple[Slurm, Path]:
    """A Slurm whose ``scancel --batch`` fails ``refusals`` times (counted in a file), then works."""
    real = shutil.which("scancel")
    assert real is not None, "scancel is not installed"
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    count = tmp_path / "refused"
    count.write_text("0")
    (wrappers / "scancel").write_text(
        "#!/bin/bash\n"
        f'n=$(cat {count})\nif [ "$1" = --batch ] && [ "$n" -lt {refusals} ]; then\n'
        f'  echo $((n + 1)) >{count}\n  echo "{REFUSAL}" >&2\n  exit 1\nfi\n'
        f'exec {real} "$@"\n'
    )
    (wrappers / "scancel").chmod(0o755)
    slurm = Slurm(config)
    slurm.env["PATH"] = f"{wrappers}:{os.environ.get('PATH', '')}"
    return slurm, count


def _agg_run(config: ClusterConfig, tmp_path: Path, refusals: int) -> tuple[Outcome, Path]:
    """One small aggregated run (mock engine) whose stop meets ``refusals`` refused SIGTERMs; the file
    counting them."""
    slurm, refused = _refusing_slurm(config, tmp_path, refusals)
    options = LaunchOptions(kind="agg-single", requests=2, runs_root=tmp_path / "runs")
    return Launch(config, options, slurm=slurm).run(), refused


def _jobs(run_dir: Path) -> dict[str, dict[str, str]]:
    run = json.loads((run_dir / "run.json").read_text())
    return {j["role"]: j for j in run["jobs"]}


def test_a_refused_sigterm_is_retried_and_the_job_still_stops_cleanly(
    local_cluster_config: ClusterConfig, tmp_path: Path
) -> None:
    outcome, refused = _agg_run(local_cluster_config, tmp_path, refusals=2)
    assert refused.read_text().strip() == "2"
    assert outcome.passed, outcome.failure
    job = _jobs(outcome.run_dir)["agg"]
    assert (job["state"], job["exit_code"]) == ("COMPLETED", "0:0")
    cancelled = [e for e in outcome.timeline if e["event"] == "cancelled"]
    assert [e["detail"] for e in cancelled] == ["SIGTERM to the job script"]


def test_a_sigterm_that_never_gets_through_cancels_the_job_and_says_why(
    local_cluster_config: ClusterConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "_SIGNAL_RETRY_S", 2.0)
    outcome, _ = _agg_run(local_cluster_config, tmp_path, refusals=1000)
    assert not outcome.passed and outcome.failure is not None
    assert "agg (CANCELLED" in outcome.failure, outcome.failure
    assert "SIGTERM not delivered" in outcome.failure and "Socket timed out" in outcome.failure
    assert _jobs(outcome.run_dir)["agg"]["state"] == "CANCELLED"
