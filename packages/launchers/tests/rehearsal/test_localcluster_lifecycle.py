"""A second cluster beside the session's: restart after a crash, down with a job running, nothing left."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import PreflightError
from atomdyn_launchers.rehearsal.localcluster import LocalCluster, LocalClusterError, prune_orphans
from atomdyn_launchers.rehearsal.localcluster.procs import Proc, alive, procs_in_netns, wait_gone
from atomdyn_launchers.run.preflight import cluster_checks
from atomdyn_launchers.slurm.client import Slurm, SlurmError

pytestmark = pytest.mark.integration


def test_lifecycle_crash_restart_and_clean_down(local_cluster: LocalCluster, tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "state", shared_dir=tmp_path / "shared", python_venv=Path(sys.prefix))
    first = cluster.up()
    print(f"private cluster up in {first.seconds:.2f} s")
    try:
        assert not first.already_up
        layout, session = cluster.layout(), local_cluster.layout()
        # Two clusters side by side: different tags (namespaces, host veth) and different subnets.
        assert layout.tag != session.tag and not layout.subnet.overlaps(session.subnet)
        assert cluster.status().healthy

        # A job that finished before the restart below; the controller will forget it.
        slurm_before = Slurm(cluster.config())
        quick = tmp_path / "quick.sh"
        quick.write_text("#!/bin/bash\ntrue\n")
        old_job = slurm_before.submit(quick, nodelist="node2", output=tmp_path / "quick.out")
        assert slurm_before.wait_terminal(old_job, timeout=30).succeeded

        # A crashed node: status names it, up restarts the cluster (new daemons), which is healthy again.
        crashed = next(d for d in cluster.status().daemons if d.name == "slurmd-node2")
        os.kill(crashed.pid, signal.SIGKILL)
        proc = next(p for p in _recorded(cluster) if p.pid == crashed.pid)
        wait_gone([proc], timeout=10, what="the killed slurmd")
        status = cluster.status()
        assert not status.healthy
        assert f"slurmd-node2 (pid {crashed.pid}) is not running" in status.problems
        messages: list[str] = []
        again = cluster.up(log=messages.append)
        assert not again.already_up and any("partly up" in m for m in messages)
        # Up again with another venv: verified, not restarted; only cluster.env changes.
        pids = [d.pid for d in cluster.status().daemons]
        other = LocalCluster(cluster.state_dir, shared_dir=tmp_path / "shared", python_venv=tmp_path / "venv")
        moved = other.up()
        assert moved.already_up and moved.config.python_venv == tmp_path / "venv"
        assert cluster.config().python_venv == tmp_path / "venv"
        assert [d.pid for d in cluster.status().daemons] == pids
        assert cluster.status().healthy
        assert crashed.pid not in [d.pid for d in cluster.status().daemons]

        # The new controller does not know the old job: the Slurm object that saw it answers from memory.
        remembered = slurm_before.job(old_job)
        assert (remembered.source, remembered.state, remembered.succeeded) == ("cache", "COMPLETED", True)
        slurm = Slurm(cluster.config())
        with pytest.raises(SlurmError, match=f"job {old_job} is unknown to the controller"):
            slurm.job(old_job)

        # A drained node fails preflight by name; resumed, it passes.
        ok = dataclasses.replace(cluster.config(), model_path=tmp_path)
        slurm.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=maintenance"])
        with pytest.raises(PreflightError, match=r"node 'node2' is drain"):
            cluster_checks(ok, ["node1", "node2"], slurm=slurm)
        slurm.run(["scontrol", "update", "nodename=node2", "state=resume"])
        cluster_checks(ok, ["node1", "node2"], slurm=slurm)

        # A job still running at down: its processes go too.
        layout = cluster.layout()
        script = tmp_path / "sleep.sh"
        script.write_text("#!/bin/bash\nsleep 300\n")
        job_id = slurm.submit(script, nodelist="node1", output=tmp_path / "sleep.out")
        assert job_id > old_job  # job ids continue across restarts
        slurm.wait_for(job_id, lambda i: i.state == "RUNNING", timeout=30, what="running")
        inodes = {layout.netns_path(h).stat().st_ino for h in ("head", *layout.nodes)}
        in_namespaces = _wait_for_process(inodes, "sleep")
        recorded = _recorded(cluster)
    except BaseException:
        cluster.down()
        raise
    result = cluster.down()
    print(f"private cluster down in {result.seconds:.2f} s (killed: {result.killed})")
    assert result.was_up

    # Nothing left behind: processes, namespaces, the host veth, mounts, the generated config.
    assert not [p for p in [*recorded, *in_namespaces] if alive(p)]
    assert procs_in_netns(inodes) == []
    netns_list = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert layout.tag not in netns_list
    assert not Path("/sys/class/net", layout.host_if).exists()
    mounts = Path("/proc/self/mounts").read_text()
    assert layout.tag not in mounts and str(cluster.state_dir) not in mounts
    assert not layout.env_file.exists() and not layout.record.exists()
    assert not cluster.status().recorded
    with pytest.raises(LocalClusterError, match="is not up"):
        cluster.config()
    assert cluster.down().was_up is False
    # The session's cluster did not notice.
    assert local_cluster.status().healthy


def _wait_for_process(inodes: set[int], name: str, timeout: float = 15.0) -> list[Proc]:
    """All processes in the namespaces, once one named ``name`` is among them (RUNNING precedes the exec)."""
    deadline = time.monotonic() + timeout
    while True:
        found = procs_in_netns(inodes)
        if name in [p.name for p in found]:
            return found
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no process {name!r} in the node namespaces after {timeout:.0f} s: {found}")
        time.sleep(0.05)


def _recorded(cluster: LocalCluster) -> list[Proc]:
    raw = json.loads((cluster.state_dir / "cluster.json").read_text())
    return [Proc.from_json(p) for p in raw["procs"]]


def test_orphaned_cluster_is_pruned_even_without_its_state_dir(tmp_path: Path) -> None:
    owner = subprocess.Popen(["sleep", "120"])
    try:
        cluster = LocalCluster(tmp_path / "state", shared_dir=tmp_path / "shared", owner_pid=owner.pid)
        cluster.up()
    finally:
        owner.kill()
        owner.wait()
    layout = cluster.layout()
    recorded = _recorded(cluster)
    inodes = {layout.netns_path(h).stat().st_ino for h in ("head", *layout.nodes)}
    assert all(alive(p) for p in recorded)
    shutil.rmtree(cluster.state_dir)  # as pytest does with old temporary directories

    assert str(cluster.state_dir) in prune_orphans()
    assert not [p for p in recorded if alive(p)]
    assert procs_in_netns(inodes) == []
    assert not Path("/sys/class/net", layout.host_if).exists()
    assert not list(Path("/run/netns").glob(f"{layout.tag}-*"))
    assert not layout.etcd_dir.exists()  # in memory (/dev/shm), outside the state directory
    assert str(cluster.state_dir) not in prune_orphans()
