"""Parsing what the Slurm tools print (sacct: accounting is off here; scontrol records); the embedded shell."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from atomdyn_launchers.rehearsal.localcluster import cluster, procs
from atomdyn_launchers.slurm.client import parse_exit_code, parse_sacct, parse_scontrol_record

# `scontrol -d show job -o` as Slurm 22.05 prints it (values may contain spaces; -d adds DerivedExitCode).
SCONTROL = (
    "JobId=42 JobName=decode job UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=1 Nice=0 "
    "Account=rehearsal QOS=(null) JobState=CANCELLED Reason=Job's cancelled by user Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 DerivedExitCode=3:0 RunTime=00:00:04 "
    "NodeList=node2 BatchHost=node2 Command=/runs/my run/decode.sbatch WorkDir=/runs/my run "
    "TresPerNode=gres:gpu:1"
)


def test_scontrol_record_keeps_values_with_spaces() -> None:
    rec = parse_scontrol_record(SCONTROL)
    assert rec["JobName"] == "decode job"
    assert rec["Reason"] == "Job's cancelled by user"
    assert rec["Command"] == "/runs/my run/decode.sbatch"
    assert rec["WorkDir"] == "/runs/my run"
    assert (rec["ExitCode"], rec["DerivedExitCode"], rec["NodeList"]) == ("0:15", "3:0", "node2")
    assert rec["TresPerNode"] == "gres:gpu:1"


def test_exit_codes() -> None:
    assert parse_exit_code("0:15") == (0, 15)
    assert parse_exit_code("137:0") == (137, 0)
    assert parse_exit_code("") is None and parse_exit_code("n/a") is None


def test_sacct_allocation_line() -> None:
    out = "\n".join(
        [
            "41|other|COMPLETED|None|node1|0:0|0:0",
            "42|decode|CANCELLED by 0|None|node2|0:15|3:0",
            "43|pending|PENDING|Resources|None assigned|0:0|0:0",
        ]
    )
    cancelled = parse_sacct(out, 42)
    assert cancelled is not None
    assert (cancelled.state, cancelled.nodes, cancelled.exit_code, cancelled.derived_exit_code) == (
        "CANCELLED",
        "node2",
        (0, 15),
        (3, 0),
    )
    assert cancelled.terminal and not cancelled.succeeded and cancelled.source == "sacct"
    pending = parse_sacct(out, 43)
    assert pending is not None and pending.nodes is None and pending.reason == "Resources"
    assert not pending.terminal
    assert parse_sacct(out, 44) is None


@pytest.mark.parametrize("name", ["NODE_SHELL", "SPAWN_SHELL"])
def test_embedded_shell_is_shellcheck_clean(name: str, tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is not installed (.ci/run must provide it)")
        pytest.skip("shellcheck is not installed")
    text = {"NODE_SHELL": cluster.NODE_SHELL, "SPAWN_SHELL": procs.SPAWN_SHELL}[name]
    script = tmp_path / f"{name}.sh"
    script.write_text(text)
    done = subprocess.run(
        ["shellcheck", "-s", "sh", str(script)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout
