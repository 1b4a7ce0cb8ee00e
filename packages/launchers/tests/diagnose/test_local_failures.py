"""The local failures of issue 37 made for real on the session's local cluster, each diagnosed first in the
ranking by its named catalog entry: a model path missing and an unprepared node (the ladder's node check), a
container image missing (a run whose job's podman finds no image), a UCX_TLS naming transports the node's UCX
does not have (the NIXL rung's ucx_info), a Slurm job over its time limit (a run whose job reaches its limit).
A KV cache too small for the model, which needs the real vLLM CPU engine, is in test_local_kv_cache.py (a module
of its own: the real-engine tests share one worker of `nox -s tests`, and these need none).

Each is a fail-fast case of the mock engine (or no engine at all) on the shared cluster: the node check, the
ucx_info check or the first seconds of a run."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from faultkit import launch_with_fault, wait_clean

from atomdyn_launchers.certify.ladder import Certification, climb
from atomdyn_launchers.certify.nixl import cross_node
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.evidence.summary import collect
from atomdyn_launchers.evidence.verify import verify_evidence
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration
PROBE = ProbeOptions(blocks=16, transfer_blocks=(1, 4), iterations=5, large_mib=8, timeout_s=30.0)
# An image no node's store holds (RUNTIME=podman: each local node has its own store).
ABSENT_IMAGE = "localhost/atomdyn-absent:none"


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    return local_cluster_config


def _failed_rung(cert: Certification, name: str) -> dict[str, Any]:
    assert not cert.certified
    rung = cert.rungs[-1]
    assert rung["name"] == name and rung["verdict"] == "fail", cert.rungs
    return rung


def _run_diagnosis(run_dir: Path) -> dict[str, Any]:
    recorded = json.loads((run_dir / "run.json").read_text())["diagnosis"]
    assert isinstance(recorded, dict), recorded
    return recorded


def test_a_model_path_missing_on_the_nodes_is_diagnosed_first(config: ClusterConfig, tmp_path: Path) -> None:
    missing = tmp_path / "models" / "not-copied-here"
    options = LaunchOptions(kind="disagg", engine="mocker", runs_root=tmp_path / "runs")
    cert = climb(replace(config, model_path=missing), options, PROBE, root=tmp_path / "certify")
    rung = _failed_rung(cert, "preflight")
    assert f"model-path {missing} does not exist on this node" in rung["detail"], rung["detail"]
    diagnosis = rung["diagnosis"]
    assert diagnosis["first"] == "model-path-missing", diagnosis
    first = diagnosis["findings"][0]
    assert str(missing) in first["line"] and first["file"].endswith("node-check.json"), first
    assert diagnosis["rerun"] == "invoke nodes.check"


def test_an_unprepared_node_is_diagnosed_first(config: ClusterConfig, tmp_path: Path) -> None:
    # RUNTIME=podman with an image nodes.prepare never loaded: each node's own store lacks it.
    unprepared = replace(config, runtime="podman", dynamo_atom_image=ABSENT_IMAGE)
    options = LaunchOptions(kind="disagg", engine="mocker", runs_root=tmp_path / "runs")
    cert = climb(unprepared, options, PROBE, root=tmp_path / "certify")
    rung = _failed_rung(cert, "images")
    assert f"{ABSENT_IMAGE} is not present on this node" in rung["detail"], rung["detail"]
    diagnosis = rung["diagnosis"]
    assert diagnosis["first"] == "image-not-on-node", diagnosis
    assert ABSENT_IMAGE in diagnosis["findings"][0]["line"]
    assert "invoke nodes.prepare" in diagnosis["findings"][0]["fix"]


def test_a_container_image_missing_is_diagnosed_first(config: ClusterConfig, tmp_path: Path) -> None:
    # The node check left out (--no-node-check): the role's job starts podman, which finds no such image.
    missing = replace(config, runtime="podman", dynamo_atom_image=ABSENT_IMAGE)
    outcome = Launch(missing, LaunchOptions(kind="disagg", requests=1, node_check=False)).run()
    assert not outcome.passed and outcome.failure is not None
    diagnosis = _run_diagnosis(outcome.run_dir)
    assert diagnosis["first"] == "podman-image-not-known", diagnosis
    # podman's own refusal, from the job script's image inspect on the node (before any worker starts)
    assert diagnosis["findings"][0]["line"].endswith(f"{ABSENT_IMAGE}: image not known"), diagnosis[
        "findings"
    ]
    again = diagnose_run(outcome.run_dir)
    assert again.first is not None and again.first.entry.id == "podman-image-not-known", again.text()
    left = wait_clean(config, outcome.run_id)
    assert left.none(), left


def test_a_ucx_tls_naming_transports_this_ucx_lacks_is_diagnosed_first(
    config: ClusterConfig, tmp_path: Path
) -> None:
    # ATOM's ROCm path on a node whose UCX has no ROCm transports: UCX_TLS asks for rocm_copy and rocm_ipc.
    rocm = replace(config, atom_ucx_path="rocm")
    options = LaunchOptions(kind="disagg", engine="atom", runs_root=tmp_path / "runs")
    result = cross_node(rocm, options, PROBE)
    assert not result.passed and result.ucx is not None and not result.ucx.ok
    found = diagnose_run(result.run_dir)
    assert found.first is not None and found.first.entry.id == "ucx-check-transport-not-in-ucx", found.text()
    assert "'rocm_copy','rocm_ipc'" in found.first.line, found.first.line


def test_a_slurm_job_over_its_time_limit_is_diagnosed_first(config: ClusterConfig) -> None:
    # Slurm's smallest --time is a minute: the decode job's limit is lowered below what it has run (scontrol
    # update, as an operator would), so slurmctld ends it at its next time-limit check (every 30 s).
    def over_time(run: Monitor) -> str:
        job_id = run.jobs["decode"].job_id
        Slurm(config).run(["scontrol", "update", f"JobId={job_id}", "TimeLimit=0"])
        return f"TimeLimit=0 for job {job_id}"

    # requests enough that the smoke traffic outlasts the 30 s (the mock engine serves about 25 a second here)
    outcome, injected = launch_with_fault(config, over_time, requests=20000)
    assert not outcome.passed and outcome.failure is not None
    assert injected.at is not None
    jobs = {j["role"]: j for j in json.loads((outcome.run_dir / "run.json").read_text())["jobs"]}
    assert jobs["decode"]["state"] == "TIMEOUT", jobs
    diagnosis = _run_diagnosis(outcome.run_dir)
    assert diagnosis["first"] == "slurm-cancelled-time-limit", diagnosis
    assert "DUE TO TIME LIMIT" in diagnosis["findings"][0]["line"]
    ids = [f["id"] for f in diagnosis["findings"]]
    assert "slurm-time-limit" in ids, ids
    # Its evidence bundle shows the diagnosis in summary.md, sanitized (slurmstepd's line names the node), and
    # evidence.verify recomputes it from data/ like the gates.
    bundle, summary = collect(outcome.run_dir, outcome.run_dir.parent / "evidence", with_pictures=False)
    assert summary["diagnosis"]["first"] == "slurm-cancelled-time-limit", summary["diagnosis"]
    assert summary["diagnosis"]["source"] == "run.json"
    shown = (bundle / "summary.md").read_text()
    section = shown.split("## Diagnosis", 1)[1].split("\n## ", 1)[0]
    assert "First cause: `slurm-cancelled-time-limit`" in section, section
    assert "DUE TO TIME LIMIT" in section and "| 1 | `slurm-cancelled-time-limit` |" in section, section
    assert f"ON {config.decode_node} " not in shown and config.decode_node not in section, section
    assert str(config.shared_dir) not in shown
    assert "Rerun: `invoke disagg.run --engine mocker`" in section, section
    verified = verify_evidence(bundle)  # the run failed, so its verdict is fail; nothing in it disagrees
    assert verified.intact and "recomputed from data/, every file intact" in verified.lines[0], verified.lines
    left = wait_clean(config, outcome.run_id)
    assert left.none(), left
