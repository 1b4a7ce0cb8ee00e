"""--dry-run: every shipped recipe's job scripts and resolved recipe written, nothing submitted.

Offline (a real cluster's configuration, unreachable from here): the preflight is skipped and says so, and a
Slurm whose every command is recorded shows that no sbatch ran. On the local cluster the preflight runs for
real and Slurm's queue is the same before and after."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.config.cluster import (
    ClusterConfig,
    PreflightError,
    find_repo_root,
    load_cluster_config,
)
from atomdyn_launchers.config.recipes import load_recipe
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.dry_run import dry_run_problems
from atomdyn_launchers.run.launch import dry_run
from atomdyn_launchers.run.options import Flags, resolve
from atomdyn_launchers.run.plan import plan_roles, required_instances
from atomdyn_launchers.slurm.client import Slurm

REPO = find_repo_root(Path(__file__).parent)
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
NODES = [f"gpu-node-0{i}" for i in range(1, 9)]


class RecordingSlurm(Slurm):
    """Slurm for a cluster this machine cannot reach: records every command and runs none."""

    def __init__(self, config: ClusterConfig) -> None:
        super().__init__(config)
        self.calls: list[list[str]] = []

    def run(self, args: Sequence[str], *args_: Any, **kwargs: Any) -> str:
        self.calls.append(list(args))
        raise AssertionError(f"a dry run ran {' '.join(args)}")


def _real_cluster_config(tmp_path: Path) -> ClusterConfig:
    """config/cluster.env.example (a real MI355X cluster's keys) with eight nodes and a writable SHARED_DIR."""
    text = (REPO / "config" / "cluster.env.example").read_text(encoding="utf-8")
    text = re.sub(r"^SHARED_DIR=\S+", f"SHARED_DIR={tmp_path / 'shared'}", text, flags=re.M)
    text = re.sub(r"^PROJECT_DIR=\S+", f"PROJECT_DIR={REPO}", text, flags=re.M)
    text = re.sub(r"^(# )?NODE_ADDRS=.*$", "", text, flags=re.M)
    text += "NODE_ADDRS='" + ",".join(f"{n}=10.0.0.{i + 1}" for i, n in enumerate(NODES)) + "'\n"
    path = tmp_path / "cluster.env"
    path.write_text(text, encoding="utf-8")
    (tmp_path / "shared").mkdir(exist_ok=True)
    return load_cluster_config(path)


@pytest.mark.parametrize("recipe_path", RECIPES, ids=[p.stem for p in RECIPES])
def test_offline_dry_run_of_each_recipe_writes_scripts_and_submits_nothing(
    recipe_path: Path, tmp_path: Path
) -> None:
    config = _real_cluster_config(tmp_path)
    slurm = RecordingSlurm(config)
    recipe = load_recipe(recipe_path)
    options = resolve(recipe.kind, None, Flags(offline=True), recipe)
    path = dry_run(options, config, progress=Progress(enabled=False), slurm=slurm)
    assert slurm.calls == []
    assert path.parent == config.runs_dir / "dry-run"
    plan = json.loads((path / "dry-run.json").read_text(encoding="utf-8"))
    assert plan["dry_run"] is True and plan["submitted"] == []
    assert plan["preflight"].startswith("not run (--offline)")
    kind = options.kind
    roles = plan_roles(kind, config, options.prefill_workers, options.decode_workers)
    assert [r["role"] for r in plan["roles"]] == [r.role for r in roles]
    assert len({r["node"] for r in plan["roles"]}) == len(roles), "one node per worker"
    for role in plan["roles"]:
        script = path / role["script"]
        text = script.read_text(encoding="utf-8")
        assert text.startswith("#!") and f"role {role['role']}" in text
        assert f"#SBATCH --time={recipe.time_limit}\n" in text  # the recipe's Slurm time limit
        assert role["sbatch"][0] == "sbatch" and role["sbatch"][-1] == str(script)
        assert f"--nodelist={role['node']}" in role["sbatch"] or role["node"] in role["sbatch"]
        if shutil.which("shellcheck"):
            done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
            assert done.returncode == 0, done.stdout
    resolved = json.loads((path / "recipe.json").read_text(encoding="utf-8"))
    assert resolved["recipe"]["name"] == recipe.name
    assert resolved["resolved"]["engine"] == recipe.engine
    frontends = [r for r in plan["roles"] if r["frontend"]]
    assert len(frontends) == 1
    if kind == "disagg":
        assert plan["frontend_must_list"] == required_instances(
            "disagg",
            recipe.prefill.workers if recipe.prefill else 1,
            recipe.decode.workers if recipe.decode else 1,
        )


def test_mocker_kv_model_reaches_the_workers(tmp_path: Path) -> None:
    config = _real_cluster_config(tmp_path)
    recipe = load_recipe(REPO / "recipes" / "rehearsal-2p4d.yaml")
    options = resolve("disagg", None, Flags(engine="mocker", offline=True), recipe)
    path = dry_run(options, config, progress=Progress(enabled=False), slurm=RecordingSlurm(config))
    for role in ("prefill1", "prefill2", "decode1", "decode4"):
        text = (path / "scripts" / f"{role}.sbatch").read_text(encoding="utf-8")
        assert "--kv-transfer-bandwidth 9.49 --kv-bytes-per-token 147456" in text, role
    assert "--router-mode kv" in (path / "scripts" / "decode1.sbatch").read_text(encoding="utf-8")
    assert "dynamo.frontend" not in (path / "scripts" / "decode2.sbatch").read_text(encoding="utf-8")


def test_xpyd_needs_a_node_per_worker(tmp_path: Path) -> None:
    config = _real_cluster_config(tmp_path)
    with pytest.raises(PreflightError, match=r"5P4D needs 9 nodes \(one per worker\); NODE_ADDRS names 8"):
        plan_roles("disagg", config, 5, 4)
    roles = plan_roles("disagg", config, 2, 4)
    assert [(r.role, r.node, r.with_frontend) for r in roles][:3] == [
        ("prefill1", NODES[0], False),
        ("prefill2", NODES[1], False),
        ("decode1", NODES[2], True),
    ]
    assert len({r.index for r in roles}) == 6
    explicit = plan_roles("disagg", config, 1, 2, ("a", "b", "c"))
    assert [(r.role, r.node) for r in explicit] == [("prefill", "a"), ("decode1", "b"), ("decode2", "c")]


@pytest.mark.integration
def test_dry_run_on_the_local_cluster_runs_the_preflight_and_submits_nothing(
    local_cluster_config: ClusterConfig,
) -> None:
    config = local_cluster_config
    slurm = Slurm(config)
    before = slurm.queue()
    recipe = load_recipe(REPO / "recipes" / "rehearsal-1p1d.yaml")
    options = resolve("disagg", None, Flags(), recipe)
    path = dry_run(options, config, progress=Progress(enabled=False), slurm=slurm)
    assert slurm.queue() == before
    plan = json.loads((path / "dry-run.json").read_text(encoding="utf-8"))
    assert plan["preflight"] == "passed"
    assert [r["node"] for r in plan["roles"]] == [config.prefill_node, config.decode_node]
    assert sorted(p.name for p in (path / "scripts").iterdir()) == ["decode.sbatch", "prefill.sbatch"]
    assert not (path / "run.json").exists()


@pytest.mark.integration
def test_a_dry_run_that_a_run_would_fail_still_writes_every_script_and_lists_why(
    local_cluster_config: ClusterConfig,
) -> None:
    """The README's `disagg.run --recipe recipes/qwen3-8b-1p1d.yaml --dry-run` on the local cluster: the atom
    recipe names no RDMA device for its nodes. A review still gets every script, and the problems, listed."""
    config = dataclasses.replace(local_cluster_config, ucx_net_devices=())  # as the embedded default has none
    recipe = load_recipe(REPO / "recipes" / "qwen3-8b-1p1d.yaml")
    options = resolve("disagg", None, Flags(), recipe)
    path = dry_run(options, config, progress=Progress(enabled=False), slurm=Slurm(config))
    plan = json.loads((path / "dry-run.json").read_text(encoding="utf-8"))
    assert plan["preflight"] == "failed"
    problems = dry_run_problems(path)
    assert problems == plan["problems"]
    for node in (config.prefill_node, config.decode_node):
        assert any(p.startswith(f"UCX_NET_DEVICES names no device for {node}") for p in problems), problems
    # The preflight went on after the launch problems: this machine has no GPU or RDMA device for atom.
    assert "node node1: check gpu-devices failed: missing /dev/kfd, /dev/dri" in problems[-1]
    assert sorted(p.name for p in (path / "scripts").iterdir()) == ["decode.sbatch", "prefill.sbatch"]


def test_offline_review_without_the_shared_filesystem_writes_into_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A laptop reviewing a real cluster's scripts has no SHARED_DIR: nothing is created at that path."""
    config = dataclasses.replace(_real_cluster_config(tmp_path), shared_dir=tmp_path / "not-mounted")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.setenv("ATOMDYN_REPO", str(checkout))
    recipe = load_recipe(REPO / "recipes" / "qwen3-8b-1p1d.yaml")
    options = resolve("disagg", None, Flags(offline=True), recipe)
    path = dry_run(options, config, progress=Progress(enabled=False), slurm=RecordingSlurm(config))
    assert path.parent == checkout / ".atomdyn" / "dry-run"
    assert not (tmp_path / "not-mounted").exists()
    assert (path / "scripts" / "prefill.sbatch").exists()


@pytest.mark.parametrize("runs_exist", [True, False], ids=["runs-dir-exists", "runs-dir-new"])
def test_a_dry_run_that_fails_leaves_no_directory(tmp_path: Path, runs_exist: bool) -> None:
    """A script the renderer refuses (here a time limit ending in a newline, past the recipe's check) used to
    leave an empty runs/dry-run/<id>/ behind, and the directories made for it."""
    config = _real_cluster_config(tmp_path)
    if runs_exist:
        config.runs_dir.mkdir()
    recipe = load_recipe(REPO / "recipes" / "rehearsal-1p1d.yaml")
    options = dataclasses.replace(
        resolve("disagg", None, Flags(offline=True), recipe), time_limit="02:00:00\n"
    )
    with pytest.raises(ValueError, match="sbatch option --time has an unusable value"):
        dry_run(options, config, progress=Progress(enabled=False), slurm=RecordingSlurm(config))
    left = sorted(p.relative_to(tmp_path) for p in (tmp_path / "shared").rglob("*"))
    assert left == ([Path("shared/runs")] if runs_exist else []), left
