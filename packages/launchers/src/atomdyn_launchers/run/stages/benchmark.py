"""Stage benchmark: the recipe's serving benchmark (an aiperf sweep) against the frontend, after the smoke
traffic; a verdict that fails fails the run."""

from __future__ import annotations

import json

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.run import benchmark as serving_benchmark
from atomdyn_launchers.run.context import LaunchFailure, RunContext
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.plan import model_path


def benchmark(ctx: RunContext, monitor: Monitor) -> None:
    recipe = ctx.options.recipe
    if recipe is None or recipe.benchmark is None:
        return
    out = ctx.rundir.path / "benchmark"
    try:
        result = serving_benchmark.run_sweep(
            recipe.benchmark,
            base_url=monitor.frontend_url(),
            model=monitor.served_model_name(),
            tokenizer=str(model_path(ctx.config, ctx.model)),
            out_dir=out,
            project_dir=ctx.config.project_dir,
            workers=len(ctx.roles),
            gpus=sum(plan.gpus for plan in monitor.plans.values()),
            progress=ctx.progress,
        )
    except serving_benchmark.BenchmarkError as exc:
        raise LaunchFailure(f"benchmark: {exc}") from None
    atomic_write_text(out / "benchmark.json", json.dumps(result.to_json(), indent=2) + "\n")
    ctx.progress.line(f"benchmark: {result.verdict}")
    if not result.passed:
        raise LaunchFailure(f"benchmark {result.verdict}")
