"""Invoke collections ``agg`` (run) and ``disagg`` (run, bench): the launchers' run-time entry points."""

from __future__ import annotations

import contextlib
import json as _json
import statistics
import sys
from pathlib import Path
from typing import Any

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.bench_figures import (
    KvTransfers,
    compile_cache,
    kv_nodes,
    kv_transfers,
    local_cluster_state_dir,
)
from atomdyn_launchers.config.cluster import ClusterConfigError, PreflightError
from atomdyn_launchers.config.recipes import RecipeError, load_recipe, merge_flags
from atomdyn_launchers.contract.readiness import ReadinessError
from atomdyn_launchers.launch import Outcome, dry_run, run
from atomdyn_launchers.profiles.models import DEFAULT_MODEL, ProfileError
from atomdyn_launchers.rawcopy import RawCopy, RawCopyError, measure_in_local_cluster
from atomdyn_launchers.slurm.client import SlurmError

_HELP = {
    "config": "cluster.env to use (default: $ATOMDYN_CLUSTER_ENV, else the local cluster)",
    "engine": "engine profile: mocker | vllm | atom (default: the config's ENGINE_PROFILE)",
    "model": f"model profile (default: the engine's; {DEFAULT_MODEL}, tiny-qwen3-bf16 for vllm-cpu)",
    "requests": "smoke requests to send (default: 8 single-node, 32 two-node and disaggregated)",
    "concurrency": "requests in flight at once (default 8)",
    "ready_timeout": "seconds to wait for every role to be ready (default: 120 mocker, 3600 GPU engines)",
    "run_dir_file": "also write the run directory's path to this file (pass or fail), for scripts "
    "(default: none)",
    "skip_node_check": "do not run nodes.check on the run's nodes before submitting",
    "recipe": "run recipe (YAML, recipes/*.yaml); flags given explicitly override its values (default: none)",
    "dry_run": "preflight, then write every job script and recipe.json into a run directory; submit nothing",
    "offline": "with --dry-run: skip the preflight (an offline review of the scripts; nothing is checked)",
}


def _number(name: str, value: str | float | None, kind: type[int] | type[float]) -> int | float | None:
    # invoke passes options whose default is None as strings.
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        raise Exit(f"error: --{name.replace('_', '-')} must be a number, not {value!r}", code=2) from None


def _resolve(
    command: str, kind: str | None, recipe: str | None, options: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The run kind and options: the recipe's, with every flag given explicitly over them."""
    options["requests"] = _number("requests", options.get("requests"), int)
    options["ready_timeout_s"] = _number("ready_timeout", options.get("ready_timeout_s"), float)
    options["concurrency"] = _number("concurrency", options.get("concurrency"), int)
    clean = {k: v for k, v in options.items() if v is not None}
    if recipe is None:
        return kind or command, clean
    try:
        merged = merge_flags(load_recipe(Path(recipe)), command, clean)
    except RecipeError as exc:
        raise Exit(f"error: {exc}", code=2) from None
    recipe_kind = str(merged.pop("kind"))
    if kind is not None and kind != recipe_kind:
        raise Exit(f"error: --nodes asks for {kind}, the recipe {recipe} for {recipe_kind}", code=2)
    return recipe_kind, merged


def _dry_run(kind: str, config: str | None, **options: Any) -> None:
    try:
        path = dry_run(kind, config_path=Path(config) if config else None, **options)
    except (ClusterConfigError, PreflightError, ProfileError, ReadinessError, SlurmError) as exc:
        raise Exit(f"error: {exc}", code=2) from exc
    print(f"dry run (nothing submitted): {path}")


def _launch(kind: str, config: str | None, **options: Any) -> Outcome:
    clean = {k: v for k, v in options.items() if v is not None}
    try:
        return run(kind, config_path=Path(config) if config else None, **clean)
    except (ClusterConfigError, PreflightError, ProfileError, ReadinessError, SlurmError) as exc:
        # Preflight: nothing was submitted.
        raise Exit(f"error: {exc}", code=2) from exc


def _finish(outcome: Outcome, run_dir_file: str | None) -> None:
    print(f"run directory: {outcome.run_dir}")
    if run_dir_file:
        atomic_write_text(Path(run_dir_file), f"{outcome.run_dir}\n")
    if not outcome.passed:
        raise Exit(f"FAIL: {outcome.failure}", code=1)
    print("PASS")


def _run_or_dry(
    command: str,
    kind: str | None,
    config: str | None,
    recipe: str | None,
    dry_run: bool,
    offline: bool,
    run_dir_file: str | None,
    options: dict[str, Any],
) -> None:
    if offline and not dry_run:
        raise Exit("error: --offline is only for --dry-run", code=2)
    resolved_kind, resolved = _resolve(command, kind, recipe, options)
    if dry_run:
        _dry_run(resolved_kind, config, offline=offline, **resolved)
        return
    _finish(_launch(resolved_kind, config, **resolved), run_dir_file)


@task(
    help={
        **_HELP,
        "nodes": "1: one node, frontend and worker; 2: one worker job per node (default 1, or the recipe's)",
    }
)
def agg_run(
    c: Context,
    nodes: int | None = None,
    config: str | None = None,
    engine: str | None = None,
    model: str | None = None,
    requests: int | None = None,
    concurrency: int | None = None,
    ready_timeout: float | None = None,
    run_dir_file: str | None = None,
    skip_node_check: bool = False,
    recipe: str | None = None,
    dry_run: bool = False,
    offline: bool = False,
) -> None:
    """Aggregated smoke run: one node (prefix caching on), or two separately pinned worker jobs."""
    count = _number("nodes", nodes, int)
    if count not in (None, 1, 2):
        raise Exit("error: --nodes must be 1 or 2", code=2)
    kind = None if count is None else ("agg-single" if count == 1 else "agg-two")
    if kind is None and recipe is None:
        kind = "agg-single"
    options = {
        "engine": engine,
        "model": model,
        "requests": requests,
        "concurrency": concurrency,
        "ready_timeout_s": ready_timeout,
        "node_check": not skip_node_check,
    }
    _run_or_dry("agg", kind, config, recipe, dry_run, offline, run_dir_file, options)


@task(help=_HELP)
def disagg_run(
    c: Context,
    config: str | None = None,
    engine: str | None = None,
    model: str | None = None,
    requests: int | None = None,
    concurrency: int | None = None,
    ready_timeout: float | None = None,
    run_dir_file: str | None = None,
    skip_node_check: bool = False,
    recipe: str | None = None,
    dry_run: bool = False,
    offline: bool = False,
) -> None:
    """Disaggregated run: prefill jobs and decode jobs (the first with the frontend), one node each; one of
    each on PREFILL_NODE and DECODE_NODE unless a recipe says more (xPyD)."""
    options = {
        "engine": engine,
        "model": model,
        "requests": requests,
        "concurrency": concurrency,
        "ready_timeout_s": ready_timeout,
        "node_check": not skip_node_check,
    }
    _run_or_dry("disagg", "disagg", config, recipe, dry_run, offline, run_dir_file, options)


_MILESTONES = (
    "submitted",
    "running",
    "registered",
    "healthy",
    "first_good_response",
    "requests_done",
    "done",
)


def timeline_figures(timeline: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds from the first submission to the last occurrence of each milestone before the first good
    response (both roles must be running and registered), and to the later milestones."""
    start = min(float(e["t"]) for e in timeline if e["event"] == "submitted")
    out: dict[str, float] = {}
    for name in _MILESTONES:
        times = [float(e["t"]) for e in timeline if e["event"] == name]
        if times:
            out[name] = max(times) - start
    return out


def kv_transfer_figures(run_dir: Path) -> str | None:
    """The decode workers' NIXL transfers of a run (vLLM's metrics): count, mean bytes and time per transfer."""
    transfers = kv_transfers(run_dir)
    return transfers.describe() if transfers else None


def _raw_copy_beside(run_dir: Path, transfers: KvTransfers, copies: int) -> RawCopy | str:
    """A raw TCP copy of one mean KV transfer's bytes between the run's prefill and decode nodes (the local
    cluster's namespaces, as they are right after the run); a string says why it was not measured."""
    state_dir = local_cluster_state_dir(run_dir)
    if state_dir is None:
        return "not measured: the run's cluster is not the local cluster"
    try:
        source, reader = kv_nodes(run_dir)
        return measure_in_local_cluster(state_dir, transfers.bytes_per_transfer, copies, source, reader)
    except (RawCopyError, ValueError, OSError) as exc:
        return f"not measured: {exc}"


def _bench_one(outcome: Outcome, copies: int, title: str) -> dict[str, Any]:
    """One run's figures, printed and returned for --json."""
    figures = timeline_figures(outcome.timeline)
    record: dict[str, Any] = {
        "run_id": outcome.run_id,
        "run_dir": str(outcome.run_dir),
        "passed": outcome.passed,
        "failure": outcome.failure,
        "timeline_s": figures,
    }
    print(f"{title}: {outcome.run_id} {'PASS' if outcome.passed else 'FAIL ' + str(outcome.failure)}")
    for name, seconds in figures.items():
        print(f"  {name:<20} +{seconds:6.2f} s")
    transfers = kv_transfers(outcome.run_dir)
    if transfers:
        # First, while the cluster is as the run left it.
        raw = _raw_copy_beside(outcome.run_dir, transfers, copies)
        record["kv_transfers"] = transfers.to_json()
        print(f"  {transfers.describe()}")
        if isinstance(raw, RawCopy):
            ratio = transfers.seconds_per_transfer / raw.p50_s
            record["raw_tcp_copy"] = raw.to_json()
            record["kv_time_over_raw_p50"] = ratio
            print(f"  {raw.describe()}")
            print(f"  mean NIXL transfer / raw copy p50: {ratio:.0f}x")
        else:
            record["raw_tcp_copy"] = raw
            print(f"  raw TCP copy: {raw}")
    caches = compile_cache(outcome.run_dir)
    if caches:
        record["compile_cache"] = [c.to_json() for c in caches]
        for cache in caches:
            print(f"  compile cache, {cache.describe()}")
    return record


@task(
    help={
        "runs": "number of disaggregated runs (default 3)",
        "requests": "smoke requests per run (default 8)",
        "config": _HELP["config"],
        "engine": "engine profile (default: the config's ENGINE_PROFILE); vllm-cpu also prints its KV transfers "
        "beside a raw TCP copy of the same bytes between the same nodes, and what its compile cache did",
        "copies": "raw TCP copies timed after each run with KV transfers (default 200)",
        "json": "print the figures as one JSON document on stdout (the per-run lines go to stderr)",
    }
)
def disagg_bench(
    c: Context,
    runs: int = 3,
    requests: int = 8,
    config: str | None = None,
    engine: str | None = None,
    copies: int = 200,
    json: bool = False,
) -> None:
    """Time `disagg.run` from submission to the first verified P/D response (target <= 10 s for the mocker);
    with a real engine, each run's KV transfers against a raw TCP copy of the same bytes."""
    if runs < 1 or copies < 1:
        raise Exit("error: --runs and --copies must be at least 1", code=2)
    records: list[dict[str, Any]] = []
    firsts: list[float] = []
    failed: str | None = None
    with contextlib.redirect_stdout(sys.stderr) if json else contextlib.nullcontext():
        for i in range(runs):
            outcome = _launch("disagg", config, requests=requests, engine=engine)
            record = _bench_one(outcome, copies, f"run {i + 1}/{runs}")
            records.append(record)
            if not outcome.passed:
                failed = f"FAIL: run {outcome.run_id}: {outcome.failure}"
                break
            if "first_good_response" not in record["timeline_s"]:
                failed = f"FAIL: run {outcome.run_id} did not reach a verified response"
                break
            firsts.append(record["timeline_s"]["first_good_response"])
        else:
            print(
                f"submission -> first verified P/D response: median {statistics.median(firsts):.2f} s "
                f"(min {min(firsts):.2f}, max {max(firsts):.2f}, n={runs})"
                + ("; target <= 10 s" if (engine or "mocker") == "mocker" else "")
            )
    if json:
        print(_json.dumps(_bench_document(engine, records, firsts), indent=1))
    if failed:
        raise Exit(failed, code=1)


def _bench_document(engine: str | None, records: list[dict[str, Any]], firsts: list[float]) -> dict[str, Any]:
    run_json: dict[str, Any] = {}
    if records:
        with contextlib.suppress(OSError, ValueError):
            run_dir = Path(records[0]["run_dir"])
            run_json = _json.loads((run_dir / "run.json").read_text())
    return {
        "bench": "disagg.bench",
        "engine": engine or run_json.get("engine_profile"),
        "platform": run_json.get("platform"),
        "lock_digest": run_json.get("lock_digest"),
        "runs": records,
        "first_good_response_s": {
            "median": statistics.median(firsts),
            "min": min(firsts),
            "max": max(firsts),
            "n": len(firsts),
        }
        if firsts
        else None,
    }


agg_ns = Collection("agg")
agg_ns.add_task(agg_run, name="run")
disagg_ns = Collection("disagg")
disagg_ns.add_task(disagg_run, name="run")
disagg_ns.add_task(disagg_bench, name="bench")
