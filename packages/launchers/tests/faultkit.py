"""Fault injection into real rehearsal runs on the local cluster: shared by the quick fault tests (in the
normal suite) and the fault suite (``nox -s faults``).

A run is started in this process (:func:`launch_with_fault`, the fault injected from the launcher's own
timeline hook once the first verified response came back) or in a child process (:class:`ChildLaunch`,
for faults that kill or interrupt the launcher itself). Leftovers are counted on the real system:
processes, network namespaces, mounts, listening ports, etcd keys and the launcher's file descriptors.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.contract.rundir import read_jsonl
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import KEY_ROOT
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.record import Outcome
from atomdyn_launchers.slurm.client import Slurm


class _Quiet(Progress):
    def line(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def status(self, *args: Any, **kwargs: Any) -> None:
        return None


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Injected:
    """When the fault was injected (wall clock, as the timeline records) and what it was."""

    at: float | None = None
    what: str = ""
    error: str = ""


Fault = Callable[[Monitor], str]  # injects the fault; returns what it did


def launch_with_fault(
    config: ClusterConfig, fault: Fault | None, *, requests: int = 2000, concurrency: int = 2, **options: Any
) -> tuple[Outcome, Injected]:
    """A disaggregated run; ``fault`` runs (in a thread) once the first verified response came back."""
    injected = Injected()

    def hook(event: str, record: dict[str, Any]) -> None:
        if event != "first_good_response" or fault is None:
            return
        run: Monitor = record["run"]

        def inject() -> None:
            try:
                injected.what = fault(run)
                injected.at = time.time()
            except Exception as exc:  # reported by the test, never swallowed
                injected.error = f"{type(exc).__name__}: {exc}"

        threading.Thread(target=inject, daemon=True).start()

    opts = LaunchOptions(kind="disagg", requests=requests, concurrency=concurrency, **options)
    outcome = Launch(config, opts, hook=hook, progress=_Quiet()).run()
    assert not injected.error, f"the fault could not be injected: {injected.error}"
    return outcome, injected


def first_event(outcome: Outcome, name: str) -> float:
    return min(float(str(e["t"])) for e in outcome.timeline if e["event"] == name)


def time_to_fail(outcome: Outcome, injected: Injected) -> float:
    assert injected.at is not None, "the fault was never injected"
    return first_event(outcome, "failed") - injected.at


def time_to_end(outcome: Outcome, injected: Injected) -> float:
    assert injected.at is not None, "the fault was never injected"
    return first_event(outcome, "done") - injected.at


class ChildLaunch:
    """A disaggregated run in a child process (the launcher as a user runs it), for faults aimed at it."""

    CODE = (
        "import sys\nfrom pathlib import Path\n"
        "from atomdyn_launchers.config.cluster import load_cluster_config\n"
        "from atomdyn_launchers.run.launch import run\n"
        "from atomdyn_launchers.run.options import LaunchOptions\n"
        "o = run(LaunchOptions(kind='disagg', requests=int(sys.argv[2]), concurrency=1), load_cluster_config(Path(sys.argv[1])))\n"
        "print('RESULT', o.passed, o.run_dir, flush=True)\n"
    )

    def __init__(self, config: ClusterConfig, env_file: Path, requests: int = 2000) -> None:
        config.write(env_file)
        self.config = config
        self.before = set(config.runs_dir.iterdir()) if config.runs_dir.exists() else set()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.CODE, str(env_file), str(requests)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.run_dir: Path | None = None

    def wait_first_response(self, timeout_s: float = 120.0) -> Path:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"the launcher exited early: {self.proc.communicate()}")
            new = (
                set(self.config.runs_dir.iterdir()) - self.before if self.config.runs_dir.exists() else set()
            )
            for path in new:
                if any(e["event"] == "first_good_response" for e in read_jsonl(path / "timeline.jsonl")):
                    self.run_dir = path
                    return True
            return False

        wait_for("the run to serve its first response", seen, timeout_s)
        assert self.run_dir is not None
        return self.run_dir

    def job_ids(self) -> list[int]:
        assert self.run_dir is not None
        timeline = read_jsonl(self.run_dir / "timeline.jsonl")
        return [int(str(e["job_id"])) for e in timeline if e["event"] == "submitted"]

    def signal(self, signum: int) -> float:
        self.proc.send_signal(signum)
        return time.time()

    def finish(self, timeout_s: float = 120.0) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode, out, err


# --- leftovers ---------------------------------------------------------------------------------------------


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or entry.name == str(os.getpid()):
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{entry.name}: {cmdline[:160]}")
    return found


def count_netns() -> int:
    return len(list(Path("/run/netns").iterdir())) if Path("/run/netns").is_dir() else 0


def count_mounts() -> int:
    return len(Path("/proc/self/mounts").read_text().splitlines())


def count_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def listening_ports_in(pid: int) -> set[int]:
    """TCP ports listening in the network namespace of ``pid`` (a node's slurmd)."""
    found: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":
                found.add(int(fields[1].rsplit(":", 1)[1], 16))
    return found


def run_keys(config: ClusterConfig) -> int:
    return len(EtcdClient(config.require_etcd()).get_prefix(KEY_ROOT + "/")[0])


def dynamo_keys(config: ClusterConfig, run_id: str) -> int:
    namespace = f"atomdyn-{run_id.lower()}"
    client = EtcdClient(config.require_etcd())
    return sum(len(client.get_prefix(f"v1/{sub}/{namespace}")[0]) for sub in ("instances", "mdc"))


@dataclass
class Leftovers:
    processes: list[str] = field(default_factory=list)
    run_keys: int = 0
    dynamo_keys: int = 0

    def none(self) -> bool:
        return not self.processes and not self.run_keys and not self.dynamo_keys


def leftovers_of(config: ClusterConfig, run_id: str) -> Leftovers:
    namespace = f"atomdyn-{run_id.lower()}"
    return Leftovers(
        processes=processes_mentioning(namespace) + processes_mentioning(f"{run_id}/roles/"),
        run_keys=len(EtcdClient(config.require_etcd()).get_prefix(f"{KEY_ROOT}/{run_id}/")[0]),
        dynamo_keys=dynamo_keys(config, run_id),
    )


def wait_clean(config: ClusterConfig, run_id: str, timeout_s: float = 20.0) -> Leftovers:
    """Leftovers of the run once Dynamo's own keys had their lease time to expire (a hard kill leaves them
    for the lease TTL)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = leftovers_of(config, run_id)
        if left.none() or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def job_ended(slurm: Slurm, job_id: int) -> Callable[[], bool]:
    return lambda: slurm.job(job_id).terminal
