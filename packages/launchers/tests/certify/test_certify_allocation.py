"""``invoke certify``, ``invoke nixl.cross-node``, ``invoke nodes.check`` and ``invoke validate.gpu`` inside an
existing allocation, without a cluster: ``--allocation`` (or the salloc shell's, as for the runs; ``none`` opts out)
reaches every rung that submits work, and the dry run shows the ladder's jobs as steps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from golden_launch import golden_config
from invoke.context import Context
from invoke.exceptions import Exit

from atomdyn_launchers.certify import nixl as certify_nixl
from atomdyn_launchers.certify import rungs
from atomdyn_launchers.certify import tasks as certify_tasks
from atomdyn_launchers.config import cluster as cluster_config
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.nodes import check as node_check
from atomdyn_launchers.nodes import invoke_tasks as node_tasks
from atomdyn_launchers.nodes.check import CheckReport
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.options import Flags, LaunchOptions, resolve
from atomdyn_launchers.slurm import client as slurm_client
from atomdyn_launchers.slurm.client import Allocation
from atomdyn_launchers.validate import gpu as validate_gpu
from atomdyn_launchers.validate import invoke_tasks as validate_tasks

CONFIG: ClusterConfig = golden_config("mocker", "venv")
SALLOC = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2"}
N1, N2 = CONFIG.prefill_node, CONFIG.decode_node


class Stop(Exception):
    """Raised by a stand-in once it has recorded what it was given."""


def _in_salloc_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment of a salloc shell holding allocation 4242 (not inside a step or a batch script)."""
    for key, value in SALLOC.items():
        monkeypatch.setenv(key, value)
    for key in ("SLURM_STEP_ID", "ENVIRONMENT"):
        monkeypatch.delenv(key, raising=False)


def _climb(tmp_path: Path, options: LaunchOptions, config: ClusterConfig = CONFIG) -> rungs.Climb:
    return rungs.Climb(config, options, ProbeOptions(), tmp_path, Progress())


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every rung's submitting call replaced by one that records the allocation it was given."""
    got: dict[str, Any] = {}

    def check_nodes(config: ClusterConfig, nodes: list[str], **kwargs: Any) -> CheckReport:
        got["check_nodes"] = kwargs["allocation"]
        return CheckReport("mocker", "venv", {n: [] for n in nodes})

    def held(slurm: object, job: int, nodes: list[str], *, detected: bool = False) -> None:
        got["held"] = (job, list(nodes), detected)

    def validation(config: ClusterConfig, **kwargs: Any) -> object:
        got.setdefault("validate", []).append(kwargs["allocation"])
        return SimpleNamespace(ok=True, run_dir=Path("/nonexistent"), lines=lambda: [])

    def probe(config: ClusterConfig, options: LaunchOptions, *args: Any, **kwargs: Any) -> None:
        got["nixl"] = options.allocation
        raise Stop

    def serve(options: LaunchOptions, config: ClusterConfig, **kwargs: Any) -> None:
        got.setdefault("serving", []).append((options.kind, options.allocation))
        raise Stop

    monkeypatch.setattr(rungs, "load_lock", lambda path: SimpleNamespace(digest="sha256:" + "0" * 64))
    monkeypatch.setattr(rungs, "find_lock_path", lambda path: path)
    monkeypatch.setattr(rungs, "check_nodes", check_nodes)
    monkeypatch.setattr(rungs, "held_allocation", held)
    monkeypatch.setattr(rungs, "Slurm", lambda config: None)
    monkeypatch.setattr(rungs, "run_gpu_validation", validation)
    monkeypatch.setattr(rungs, "cross_node", probe)
    monkeypatch.setattr(rungs, "run", serve)
    return got


def _every_rung(tmp_path: Path, options: LaunchOptions) -> None:
    assert rungs.preflight(_climb(tmp_path, options)).passed
    assert rungs.validate(_climb(tmp_path, options, replace(CONFIG, runtime="docker"))).passed
    for rung in (rungs.nixl, rungs.agg_single, rungs.agg_two, rungs.disagg):
        with pytest.raises(Stop):
            rung(_climb(tmp_path, options))


def test_the_allocation_reaches_every_rung_that_submits_work(seen: dict[str, Any], tmp_path: Path) -> None:
    options = resolve("disagg", "disagg", Flags.parse(allocation="4242"))
    _every_rung(tmp_path, options)
    assert seen["held"] == (4242, [N1, N2], False)  # checked to hold every node of the ladder first
    assert seen["check_nodes"] == 4242 and seen["nixl"] == 4242
    assert seen["validate"] == [4242, 4242]  # one validation per worker node
    assert seen["serving"] == [("agg-single", 4242), ("agg-two", 4242), ("disagg", 4242)]


def test_none_opts_out_of_the_salloc_shells_allocation(seen: dict[str, Any], tmp_path: Path) -> None:
    detected = resolve("disagg", "disagg", Flags.parse(environ=SALLOC))
    assert (detected.allocation, detected.allocation_detected) == (4242, True)
    options = resolve("disagg", "disagg", Flags.parse(allocation="none", environ=SALLOC))
    _every_rung(tmp_path, options)
    assert "held" not in seen
    assert seen["check_nodes"] is None and seen["nixl"] is None and seen["validate"] == [None, None]
    assert {a for _, a in seen["serving"]} == {None}


def test_a_ladder_node_outside_the_allocation_fails_the_first_rung(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    one = Allocation(77, "RUNNING", N1, (N1,))
    monkeypatch.setattr(rungs, "Slurm", lambda config: SimpleNamespace(allocation=lambda job: one))
    monkeypatch.setattr(rungs, "load_lock", lambda path: SimpleNamespace(digest="sha256:" + "0" * 64))
    monkeypatch.setattr(rungs, "find_lock_path", lambda path: path)
    result = rungs.preflight(_climb(tmp_path, LaunchOptions(kind="disagg", allocation=77)))
    assert not result.passed and f"node {N2!r} is not in allocation 77" in result.detail


def test_the_certify_task_takes_the_allocation_and_its_dry_run_shows_steps(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cluster_config, "load_cluster_config", lambda path: CONFIG)
    _in_salloc_shell(monkeypatch)
    certify_tasks.certify(Context(), config="cluster.env", engine="mocker", dry_run=True)  # detected
    shown = capsys.readouterr().out
    assert "inside allocation 4242: every job is a step of it (srun --jobid 4242" in shown
    assert "jobs: one nodes.check step per node" in shown and "two one-shot steps" in shown
    certify_tasks.certify(Context(), config="cluster.env", engine="mocker", dry_run=True, allocation="9")
    assert "inside allocation 9:" in capsys.readouterr().out
    certify_tasks.certify(Context(), config="cluster.env", engine="mocker", dry_run=True, allocation="none")
    batch = capsys.readouterr().out
    assert "inside allocation" not in batch and "one nodes.check job per node" in batch
    with pytest.raises(Exit) as err:
        certify_tasks.certify(Context(), config="cluster.env", dry_run=True, allocation="soon")
    assert err.value.code == 2 and "--allocation must be a Slurm job id or 'none'" in str(err.value.message)


def test_the_cross_node_task_runs_its_probe_pair_in_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[tuple[int | None, bool]] = []

    def probe(config: ClusterConfig, options: LaunchOptions, *args: Any) -> None:
        got.append((options.allocation, options.allocation_detected))
        raise Stop

    monkeypatch.setattr(certify_nixl, "cross_node", probe)
    monkeypatch.setattr(cluster_config, "resolve_cluster_config", lambda path: CONFIG)
    _in_salloc_shell(monkeypatch)
    for allocation in (None, "12", "none"):
        with pytest.raises(Stop):
            certify_tasks.nixl_cross_node(Context(), engine="mocker", allocation=allocation)
    assert got == [(4242, True), (12, False), (None, False)]


def test_the_node_check_task_checks_in_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[int | None] = []

    def check_nodes(config: ClusterConfig, nodes: list[str], **kwargs: Any) -> None:
        got.append(kwargs["allocation"])
        raise Stop

    both = Allocation(4242, "RUNNING", f"{N1},{N2}", (N1, N2))
    monkeypatch.setattr(node_check, "check_nodes", check_nodes)
    monkeypatch.setattr(cluster_config, "resolve_cluster_config", lambda path: CONFIG)
    monkeypatch.setattr(slurm_client, "Slurm", lambda config: SimpleNamespace(allocation=lambda job: both))
    _in_salloc_shell(monkeypatch)
    for allocation in (None, "4242", "none"):
        with pytest.raises(Stop):
            node_tasks.check_task(Context(), nodes=f"{N1},{N2}", allocation=allocation)
    assert got == [4242, 4242, None]
    with pytest.raises(Exit) as err:  # a node the allocation does not hold: refused before any check runs
        node_tasks.check_task(Context(), nodes=f"{N1},node3", allocation="4242")
    assert err.value.code == 2 and "node 'node3' is not in allocation 4242" in str(err.value.message)
    assert got == [4242, 4242, None]


def test_the_validate_task_runs_its_job_as_a_step_of_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    got: list[tuple[str, int | None]] = []

    def validation(config: ClusterConfig, **kwargs: Any) -> None:
        got.append((kwargs["node"], kwargs["allocation"]))
        raise Stop

    one = Allocation(4242, "RUNNING", N1, (N1,))
    monkeypatch.setattr(validate_gpu, "run_gpu_validation", validation)
    monkeypatch.setattr(cluster_config, "resolve_cluster_config", lambda path: CONFIG)
    monkeypatch.setattr(slurm_client, "Slurm", lambda config: SimpleNamespace(allocation=lambda job: one))
    _in_salloc_shell(monkeypatch)
    for allocation in (None, "4242", "none"):
        with pytest.raises(Stop):
            validate_tasks.gpu(Context(), node=N1, allocation=allocation)
    assert got == [(N1, 4242), (N1, 4242), (N1, None)]
    with pytest.raises(
        Exit
    ) as err:  # the salloc shell's allocation lacks the node: refused, with the opt-out
        validate_tasks.gpu(Context(), node=N2)
    message = str(err.value.message)
    assert err.value.code == 2 and f"node {N2!r} is not in allocation 4242" in message
    assert "--allocation none submits batch jobs instead" in message
    with pytest.raises(Exit) as err:
        validate_tasks.gpu(Context(), allocation="soon")
    assert err.value.code == 2 and "--allocation must be a Slurm job id or 'none'" in str(err.value.message)
    assert len(got) == 3
