"""The invoke tasks ``agg.run`` and ``disagg.run``: the launchers' run-time entry points.

Each task turns its flags into :class:`~atomdyn_launchers.run.options.Flags` (numbers parsed once, a bad one
named), merges them over the recipe into one :class:`~atomdyn_launchers.run.options.LaunchOptions` and runs it
(or dry-runs it). Errors before anything is submitted exit 2; a run that fails exits 1.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_launchers.profiles.models import DEFAULT_MODEL
from atomdyn_launchers.slurm.flags import ALLOCATION_HELP

if TYPE_CHECKING:  # the run path is imported when a task runs: every `invoke` call loads this module
    from atomdyn_launchers.run.options import Flags, LaunchOptions
    from atomdyn_launchers.run.stages.record import Outcome

HELP = {
    "config": "cluster.env to use (default: $ATOMDYN_CLUSTER_ENV, else the local cluster)",
    "engine": "engine profile: mocker | vllm | atom (default: the config's ENGINE_PROFILE)",
    "model": f"model profile (default: the engine's; {DEFAULT_MODEL}, tiny-qwen3-bf16 for vllm-cpu)",
    "requests": "smoke requests to send (default: 8 single-node, 32 two-node and disaggregated)",
    "concurrency": "requests in flight at once (default 8)",
    "ready_timeout": "seconds to wait for every role to be ready (default: 120 mocker, 3600 GPU engines)",
    "first_response_timeout": "seconds from the frontend listing every worker to the first verified response "
    "(default: the engine's: 300 vllm-cpu, 1200 GPU engines; the mocker has none)",
    "run_dir_file": "also write the run directory's path to this file (pass or fail), for scripts "
    "(default: none)",
    "skip_node_check": "do not run nodes.check on the run's nodes before submitting",
    "recipe": "run recipe (YAML, recipes/*.yaml); flags given explicitly override its values (default: none)",
    "dry_run": "preflight, then write every job script and recipe.json into a run directory; submit nothing",
    "offline": "with --dry-run: skip the preflight (an offline review of the scripts; nothing is checked)",
    "allocation": ALLOCATION_HELP,
}


def preflight_errors() -> tuple[type[Exception], ...]:
    """Raised before anything is submitted: the command exits 2 with the message."""
    from atomdyn_launchers.config.cluster import ClusterConfigError, PreflightError
    from atomdyn_launchers.contract.readiness import ReadinessError
    from atomdyn_launchers.profiles.models import ProfileError
    from atomdyn_launchers.slurm.client import SlurmError

    return (ClusterConfigError, PreflightError, ProfileError, ReadinessError, SlurmError)


def options_of(command: str, kind: str | None, recipe: str | None, flags: Flags) -> LaunchOptions:
    """The run the command line asks for: the recipe's (if any), with every flag given explicitly over it."""
    from atomdyn_launchers.config.recipes import RecipeError, load_recipe
    from atomdyn_launchers.run.options import OptionError, resolve

    try:
        return resolve(command, kind, flags, load_recipe(Path(recipe)) if recipe is not None else None)
    except (OptionError, RecipeError) as exc:
        raise Exit(f"error: {exc}", code=2) from None


def launch(options: LaunchOptions, config: str | None) -> Outcome:
    """Run ``options``; a preflight error (nothing was submitted) exits 2."""
    from atomdyn_launchers.run.launch import run

    try:
        return run(options, config_path=Path(config) if config else None)
    except preflight_errors() as exc:
        raise Exit(f"error: {exc}", code=2) from exc


def _dry_run(options: LaunchOptions, config: str | None) -> None:
    from atomdyn_launchers.run.dry_run import dry_run_problems
    from atomdyn_launchers.run.launch import dry_run

    try:
        path = dry_run(options, config_path=Path(config) if config else None)
    except preflight_errors() as exc:
        raise Exit(f"error: {exc}", code=2) from exc
    print(f"dry run (nothing submitted): {path}")
    problems = dry_run_problems(path)
    if problems:
        raise Exit(f"error: a run would be refused ({len(problems)} problem(s), in dry-run.json)", code=2)


def _finish(outcome: Outcome, run_dir_file: str | None) -> None:
    from atomdyn_core.atomic import atomic_write_text

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
    dry: bool,
    run_dir_file: str | None,
    flags: Flags,
) -> None:
    options = options_of(command, kind, recipe, flags)
    if dry:
        _dry_run(options, config)
        return
    _finish(launch(options, config), run_dir_file)


def _flags(
    engine: str | None,
    model: str | None,
    requests: int | None,
    concurrency: int | None,
    waits: tuple[float | None, float | None],  # --ready-timeout, --first-response-timeout
    skip_node_check: bool,
    offline: bool,
    dry: bool,
    allocation: str | None = None,
) -> Flags:
    from atomdyn_launchers.run.options import Flags, OptionError

    ready_timeout, first_response_timeout = waits
    if offline and not dry:
        raise Exit("error: --offline is only for --dry-run", code=2)
    try:
        return Flags.parse(
            engine=engine,
            model=model,
            requests=requests,
            concurrency=concurrency,
            ready_timeout=ready_timeout,
            first_response_timeout=first_response_timeout,
            node_check=not skip_node_check,
            offline=offline,
            allocation=allocation,
            environ=os.environ,
        )
    except OptionError as exc:
        raise Exit(f"error: {exc}", code=2) from None


@task(
    help={
        **HELP,
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
    first_response_timeout: float | None = None,
    run_dir_file: str | None = None,
    skip_node_check: bool = False,
    recipe: str | None = None,
    dry_run: bool = False,
    offline: bool = False,
    allocation: str | None = None,
) -> None:
    """Aggregated smoke run: one node (prefix caching on), or two separately pinned worker jobs."""
    from atomdyn_launchers.run.options import OptionError, parse_int

    try:
        count = parse_int("nodes", nodes)
    except OptionError as exc:
        raise Exit(f"error: {exc}", code=2) from None
    if count not in (None, 1, 2):
        raise Exit("error: --nodes must be 1 or 2", code=2)
    kind = None if count is None else ("agg-single" if count == 1 else "agg-two")
    if kind is None and recipe is None:
        kind = "agg-single"
    waits = (ready_timeout, first_response_timeout)
    flags = _flags(engine, model, requests, concurrency, waits, skip_node_check, offline, dry_run, allocation)
    _run_or_dry("agg", kind, config, recipe, dry_run, run_dir_file, flags)


@task(help=HELP)
def disagg_run(
    c: Context,
    config: str | None = None,
    engine: str | None = None,
    model: str | None = None,
    requests: int | None = None,
    concurrency: int | None = None,
    ready_timeout: float | None = None,
    first_response_timeout: float | None = None,
    run_dir_file: str | None = None,
    skip_node_check: bool = False,
    recipe: str | None = None,
    dry_run: bool = False,
    offline: bool = False,
    allocation: str | None = None,
) -> None:
    """Disaggregated run: prefill jobs and decode jobs (the first with the frontend), one node each; one of
    each on PREFILL_NODE and DECODE_NODE unless a recipe says more (xPyD)."""
    waits = (ready_timeout, first_response_timeout)
    flags = _flags(engine, model, requests, concurrency, waits, skip_node_check, offline, dry_run, allocation)
    _run_or_dry("disagg", "disagg", config, recipe, dry_run, run_dir_file, flags)
