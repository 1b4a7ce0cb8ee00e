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

# Forks a child that only a signal stops, then exits at SIGTERM without stopping it.
LEAVES_A_CHILD = """
import os, pathlib, signal, sys
d = pathlib.Path(sys.argv[1])
child = os.fork()
if child == 0:
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


def test_what_a_process_left_behind_is_stopped_with_the_job(tmp_path: Path) -> None:
    job = JobSpec(
        role="prefill",
        job_name="atomdyn-prefill",
        node="node1",
        account="acct",
        partition="part",
        qos="normal",
        output=str(tmp_path / "logs" / "prefill.slurm.out"),
        log_dir=str(tmp_path / "logs"),
        processes=[ProcessSpec("worker", [sys.executable, "-c", LEAVES_A_CHILD, str(tmp_path)])],
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
        assert "processes left behind in the job's process group: " + str(child) in out
        assert not _alive(child), "the worker's child outlived the job"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
