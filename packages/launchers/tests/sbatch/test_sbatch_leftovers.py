"""A job script stops what its processes leave behind: a worker that exits on SIGTERM while its own child
(vLLM's engine core, here a forked stand-in) lives on must not leave that child running after the job ends.

Seen with real vLLM workers: the engine core, reparented away from the job script, kept a core busy and
1.7 GB of memory after the job had ended. The script runs with bash as a process-group leader, as Slurm's
batch step runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from atomdyn_launchers.sbatch import JobSpec, ProcessSpec, render

# Forks a child that only a signal stops, then exits at SIGTERM without stopping it. With "slow" the child
# takes half a second to shut down at SIGTERM (an engine core draining), and records that it finished.
LEAVES_A_CHILD = """
import os, pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1])
child = os.fork()
if child == 0:
    def drain(*_):
        time.sleep(0.5)
        (d / "child.stopped").write_text("ok")
        os._exit(0)
    if sys.argv[2] == "slow":
        signal.signal(signal.SIGTERM, drain)
    (d / "child.pid").write_text(str(os.getpid()))
    while True:
        signal.pause()
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
(d / "worker.started").write_text("ok")
while True:
    signal.pause()
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for(what: str, condition: object, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def _run_job(tmp_path: Path, child_stops: str) -> tuple[str, int]:
    """Start the job, SIGTERM it once its worker's child runs, wait for it; (its output, the child's pid)."""
    job = JobSpec(
        role="prefill",
        job_name="atomdyn-prefill",
        node="node1",
        account="acct",
        partition="part",
        qos="normal",
        output=str(tmp_path / "logs" / "prefill.slurm.out"),
        log_dir=str(tmp_path / "logs"),
        processes=[ProcessSpec("worker", [sys.executable, "-c", LEAVES_A_CHILD, str(tmp_path), child_stops])],
    )
    script = tmp_path / "prefill.sbatch"
    script.write_text(render(job))
    proc = subprocess.Popen(
        ["bash", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    child = 0
    try:
        _wait_for("the worker and its child", lambda: (tmp_path / "child.pid").exists())
        _wait_for("the worker's start", lambda: (tmp_path / "worker.started").exists())
        child = int((tmp_path / "child.pid").read_text())
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out
        return out, child
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_what_a_process_left_behind_is_stopped_with_the_job(tmp_path: Path) -> None:
    out, child = _run_job(tmp_path, "at-once")
    assert "processes left behind in the job's process group: " + str(child) in out
    assert not _alive(child), "the worker's child outlived the job"


def test_what_was_left_behind_gets_its_grace_period_to_stop(tmp_path: Path) -> None:
    out, child = _run_job(tmp_path, "slow")
    assert (tmp_path / "child.stopped").exists(), f"the child was killed before it finished stopping:\n{out}"
    assert "(SIGKILL)" not in out.split("left behind", 1)[1]
    assert not _alive(child)
