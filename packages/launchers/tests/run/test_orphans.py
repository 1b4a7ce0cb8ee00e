"""Orphaned runs on the real local cluster: a run whose launcher process is gone (its port lease says who held
it) while a job of the run still runs. cluster.status lists it; cleaning stops the job, deletes the run's etcd
keys and releases the lease; cluster.down releases it too."""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import pytest
from faultkit import wait_for

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import KEY_ROOT
from atomdyn_launchers.rehearsal.localcluster import LocalCluster
from atomdyn_launchers.run import orphans, ports
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration


def _lease_in_child(shared: str, run_id: str, run_dir: str) -> None:
    ports.allocate(Path(shared), run_id, Path(run_dir), [("prefill", 1), ("decode", 0)])


def _orphan(config: ClusterConfig, tmp_path: Path, run_id: str) -> tuple[Path, int, Path]:
    """A run directory whose lease holder exited, with a real job of the run still running in it."""
    run_dir = config.runs_dir / run_id
    run_dir.mkdir(parents=True)
    child = multiprocessing.get_context("fork").Process(
        target=_lease_in_child, args=(str(config.shared_dir), run_id, str(run_dir))
    )
    child.start()
    child.join(timeout=30)
    assert child.exitcode == 0
    release = tmp_path / f"{run_id}.release"
    script = tmp_path / f"{run_id}.sh"
    script.write_text(
        f"#!/bin/bash\nfor _ in $(seq 1200); do [ -e {release} ] && exit 0; sleep 0.1; done\nexit 1\n"
    )
    job = Slurm(config).submit(
        script, job_name="atomdyn-decode", nodelist=config.decode_node, output=run_dir / "out", chdir=run_dir
    )
    slurm = Slurm(config)
    wait_for(f"job {job} to run", lambda: slurm.job(job).state == "RUNNING", timeout_s=30)
    return run_dir, job, release


def test_status_lists_an_orphan_and_cleaning_stops_its_job_keys_and_lease(
    local_cluster: LocalCluster, local_cluster_config: ClusterConfig, tmp_path: Path
) -> None:
    config = local_cluster_config
    run_id = "20260101T000000Z-disagg-mocker-orphan"
    run_dir, job, release = _orphan(config, tmp_path, run_id)
    etcd = EtcdClient(config.require_etcd())
    etcd.put(f"{KEY_ROOT}/{run_id}/roles/decode", "{}")
    try:
        status = local_cluster.status()
        assert not status.healthy
        (line,) = [o for o in status.orphans if run_id in o]
        assert f"job {job} RUNNING" in line and "is gone" in line
        assert "the next disagg.run or cluster.down" in status.table()
        slurm = Slurm(config)
        (found,) = [o for o in orphans.find(config.shared_dir, slurm) if o.run_id == run_id]
        (done,) = orphans.clean(config.shared_dir, slurm, [found], etcd)
        assert done.startswith(f"orphaned run {run_id}: stopped jobs {job}") and "ports released" in done
        assert slurm.job(job).terminal
        assert etcd.get_prefix(f"{KEY_ROOT}/{run_id}/")[0] == {}
        assert run_id not in {lease.run_id for lease in ports.leases(config.shared_dir)}
        note = json.loads((run_dir / "orphan-cleanup.json").read_text())
        assert note["jobs_stopped"] == [job] and note["etcd_keys"] == "deleted"
        assert not any(run_id in o for o in local_cluster.status().orphans)
    finally:
        release.touch()
        Slurm(config).cancel([job])


def test_cluster_down_stops_an_orphan_and_releases_its_lease(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path / "state", shared_dir=tmp_path / "shared", python_venv=Path(sys.prefix))
    config = cluster.up().config
    try:
        run_id = "20260101T000000Z-disagg-mocker-down"
        run_dir, _, release = _orphan(config, tmp_path, run_id)
        assert any(run_id in o for o in cluster.status().orphans)
    finally:
        result = cluster.down()
    assert result.orphans == (run_id,)
    assert ports.leases(config.shared_dir) == []
    assert json.loads((run_dir / "orphan-cleanup.json").read_text())["by"] == "cluster.down"
    release.touch()
