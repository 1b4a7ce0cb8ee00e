"""Which roles a run has and where each goes: one job per role, each pinned to its own node; what the frontend
must list before traffic starts; and ``recipe.json``, the recipe as read and what the run resolved it to."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.kinds import KINDS
from atomdyn_launchers.contract.rundir import RunDir
from atomdyn_launchers.engines import Engine
from atomdyn_launchers.profiles.models import ModelProfile
from atomdyn_launchers.run.options import LaunchOptions


@dataclass(frozen=True)
class RoleSpec:
    role: str
    node: str
    mode: str
    with_frontend: bool
    index: int


def plan_roles(
    kind: str,
    config: ClusterConfig,
    prefill_workers: int = 1,
    decode_workers: int = 1,
    nodes: tuple[str, ...] = (),
) -> list[RoleSpec]:
    """One role per job, each pinned to its own node. ``nodes`` (a recipe's layout.nodes) gives the placement
    order; without it one prefill and one decode go to PREFILL_NODE and DECODE_NODE, more to NODE_ADDRS's
    nodes in order (prefill workers first). The first decode (or agg) worker also runs the frontend."""
    if kind == "agg-single":
        return [RoleSpec("agg", nodes[0] if nodes else config.primary_node, "agg", True, 0)]
    if kind == "agg-two":
        if nodes:
            if len(nodes) < 2:
                raise PreflightError("agg-two needs two nodes; the recipe's layout.nodes lists one")
            first, other = nodes[0], nodes[1]
        else:
            first = config.primary_node
            other = config.decode_node if config.decode_node != config.primary_node else config.prefill_node
        if other == first:
            raise PreflightError(
                "agg-two needs two nodes: PREFILL_NODE or DECODE_NODE must differ from PRIMARY_NODE"
            )
        return [RoleSpec("agg1", first, "agg", True, 0), RoleSpec("agg2", other, "agg", False, 1)]
    if kind != "disagg":
        raise PreflightError(f"unknown run kind {kind!r}; known: {', '.join(KINDS)}")
    if prefill_workers < 1 or decode_workers < 1:
        raise PreflightError("a disaggregated run needs at least one prefill and one decode worker")
    need = prefill_workers + decode_workers
    if nodes:
        pool, source = list(nodes), "the recipe's layout.nodes lists"
    elif need == 2:
        pool, source = [config.prefill_node, config.decode_node], "PREFILL_NODE and DECODE_NODE name"
        if config.prefill_node == config.decode_node:
            raise PreflightError("disagg needs two nodes: PREFILL_NODE and DECODE_NODE are the same")
    else:
        pool, source = [n for n, _ in config.node_addrs], "NODE_ADDRS names"
    if len(set(pool)) < need:
        raise PreflightError(
            f"{prefill_workers}P{decode_workers}D needs {need} nodes (one per worker); {source} "
            f"{len(set(pool))}: list the nodes in the recipe's layout.nodes or NODE_ADDRS"
        )
    pool = list(dict.fromkeys(pool))

    def name(mode: str, i: int, count: int) -> str:
        return mode if count == 1 else f"{mode}{i + 1}"

    roles = [
        RoleSpec(name("prefill", i, prefill_workers), pool[i], "prefill", False, 1 + i)
        for i in range(prefill_workers)
    ]
    roles += [
        RoleSpec(
            name("decode", j, decode_workers),
            pool[prefill_workers + j],
            "decode",
            j == 0,
            0 if j == 0 else prefill_workers + j,
        )
        for j in range(decode_workers)
    ]
    return roles


def required_instances(kind: str, prefill_workers: int = 1, decode_workers: int = 1) -> dict[str, int]:
    """Generate instances per Dynamo component the frontend must list before traffic starts."""
    if kind == "disagg":
        return {"prefill": prefill_workers, "backend": decode_workers}
    return {"agg-single": {"backend": 1}, "agg-two": {"backend": 2}}[kind]


def model_path(config: ClusterConfig, model: ModelProfile) -> Path:
    """MODEL_PATH, or for a model the project builds itself, its directory under SHARED_DIR/models."""
    return config.shared_dir / "models" / model.name if model.build_digest else config.model_path


def write_resolved_recipe(
    path: Path, options: LaunchOptions, engine: Engine, model: ModelProfile, roles: list[RoleSpec]
) -> None:
    """recipe.json: the recipe as read (if any) and what the run resolved it to, flags included."""
    resolved = {
        "kind": options.kind,
        "engine": engine.name,
        "model": model.name,
        "layout": f"{options.prefill_workers}P{options.decode_workers}D"
        if options.kind == "disagg"
        else options.kind,
        "roles": [
            {"role": r.role, "mode": r.mode, "node": r.node, "frontend": r.with_frontend} for r in roles
        ],
        "router_mode": options.router_mode,
        "time_limit": options.time_limit or engine.timeouts.time_limit,
        "requests": options.resolved_requests(),
        "concurrency": options.concurrency,
        "max_tokens": options.max_tokens,
        "speedup_ratio": options.speedup_ratio if engine.mock_timing else None,
        "kv_transfer_bandwidth_gbps": options.kv_transfer_bandwidth_gbps,
        "kv_bytes_per_token": options.kv_bytes_per_token,
    }
    recipe = options.recipe.to_json() if options.recipe is not None else None
    text = json.dumps({"recipe": recipe, "resolved": resolved}, indent=2) + "\n"
    atomic_write_text(path / "recipe.json", text)


def new_run_dir(
    runs_root: Path, options: LaunchOptions, engine: Engine, model: ModelProfile, roles: list[RoleSpec]
) -> RunDir:
    """A new run directory under ``runs_root`` with the resolved recipe in it."""
    rundir = RunDir.create(runs_root, options.kind, engine.name)
    write_resolved_recipe(rundir.path, options, engine, model, roles)
    return rundir
