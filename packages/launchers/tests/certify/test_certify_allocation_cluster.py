"""The mock engine's climb of the bring-up ladder inside an existing allocation on the local cluster: a holder job
of both nodes stands for ``salloc``, every rung's jobs (the node checks, the NIXL probe pair, the serving runs)
start as steps of it (and rung 3's validation job, not needed in the venv runtime, started as the rung
would start it), the climb is certified, and ``squeue --me`` lists no job but the holder throughout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from allocations import QueueWatch, holder
from clusterinfra import require_vllm_cpu_venv

from atomdyn_launchers.certify.ladder import climb
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.slurm.client import Slurm
from atomdyn_launchers.validate.gpu import _validate_step

pytestmark = pytest.mark.integration
PROBE = ProbeOptions(blocks=16, transfer_blocks=(1, 4), iterations=5, large_mib=8, timeout_s=60.0)


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    require_vllm_cpu_venv(local_cluster_config)  # the mock engine's NIXL rung runs as the rehearsal's workers
    return local_cluster_config


@pytest.fixture(scope="module")
def allocation(config: ClusterConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    out = tmp_path_factory.mktemp("holder") / "holder.out"
    with holder(config, [config.prefill_node, config.decode_node], out) as job:
        yield job


def test_the_mock_climb_inside_an_allocation_is_certified_and_queues_nothing(
    config: ClusterConfig, allocation: int, tmp_path: Path
) -> None:
    options = LaunchOptions(
        kind="disagg", engine="mocker", runs_root=tmp_path / "runs", allocation=allocation
    )
    # Rung 3 is "not needed" in the venv runtime: its job (validate.gpu's script) is started as the rung would
    # start it in an image runtime, a stand-in script of the same name, so its step is watched too.
    script = tmp_path / "validate" / "validate.sbatch"
    script.parent.mkdir()
    script.write_text("#!/bin/bash\n#SBATCH --job-name=atomdyn-validate\necho validated on $(hostname)\n")
    with QueueWatch(config) as watch:
        cert = climb(config, options, PROBE, root=tmp_path / "runs" / "certify")
        job = _validate_step(
            Slurm(config), allocation, script, node=config.decode_node, gres=None, env=None, timeout_s=60.0
        )
    assert cert.certified, cert.to_json()
    # squeue listed the holder alone: no rung's job was ever queued.
    assert watch.polls > 3 and allocation in watch.seen and watch.new == set(), (watch.before, watch.seen)
    rows = {r["name"]: r for r in cert.rungs}
    assert all(rows[n]["verdict"] == "pass" for n in ("preflight", "nixl", "agg-single", "agg-two", "disagg"))
    report = json.loads(Path(rows["preflight"]["evidence"]).read_text())
    assert report["ok"] is True and set(report["nodes"]) == {config.prefill_node, config.decode_node}
    for name in ("nixl", "agg-single", "agg-two", "disagg"):  # every run's jobs were steps of the holder
        run = json.loads((Path(rows[name]["evidence"]) / "run.json").read_text())
        assert run["allocation"]["job_id"] == allocation, name
        assert {j["job_id"] for j in run["jobs"]} == {allocation} and all(
            isinstance(j["step_id"], int) for j in run["jobs"]
        ), (name, run["jobs"])
    assert (job.state, job.exit_code, job.source) == ("COMPLETED", (0, 0), "srun")
    assert "validated on" in (script.parent / "slurm-step.out").read_text()
    assert Slurm(config).allocation(allocation).state == "RUNNING"  # the allocation outlives the climb
