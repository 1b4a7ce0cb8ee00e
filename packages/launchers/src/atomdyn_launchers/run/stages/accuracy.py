"""Stage accuracy: the recipe's accuracy check (its task from the registry,
:mod:`atomdyn_launchers.profiles.accuracy_tasks`; greedy) against the frontend, after the smoke traffic and
before the benchmark; its answers per item in ``accuracy/``. An aggregated run records them as the reference a
P/D run of the same engine, model, build, settings and data is compared with. A question left unanswered, a
score below the threshold or a P/D score further from the aggregated one than allowed fails the run (the
evidence judges the same from the files)."""

from __future__ import annotations

import time
from pathlib import Path

from atomdyn_launchers.contract.accuracy import reference_key
from atomdyn_launchers.contract.answers import reference_path
from atomdyn_launchers.contract.kinds import DISAGG_KINDS
from atomdyn_launchers.profiles.datasets import DatasetError
from atomdyn_launchers.run import accuracy as check
from atomdyn_launchers.run.answers import reference_for
from atomdyn_launchers.run.context import LaunchFailure, RunContext
from atomdyn_launchers.run.monitor import Monitor


def accuracy(ctx: RunContext, monitor: Monitor) -> None:
    recipe = ctx.options.recipe
    if recipe is None or recipe.accuracy is None:
        return
    settings = recipe.accuracy
    try:
        task = check.task_of(settings)
        dataset = task.load(Path(settings.data) if settings.data else None, ctx.config.project_dir)
    except check.AccuracyError as exc:
        raise LaunchFailure(str(exc)) from None
    except DatasetError as exc:
        raise LaunchFailure(f"accuracy: {exc}") from None
    fixed_key, _ = reference_for(ctx.config, ctx.engine, ctx.model, ctx.options.lock_path)
    key = reference_key(fixed_key, settings.settings(), dataset.sha256)
    reference = reference_path(ctx.config.shared_dir, key)
    ctx.progress.line(
        f"accuracy: {settings.items} {task.title} questions, {settings.few_shot}-shot, greedy, "
        f"{settings.concurrency} at a time"
    )
    started = time.monotonic()
    try:
        results = check.ask_all(
            settings, dataset, monitor.frontend_url(), monitor.served_model_name(),
            timeout_s=ctx.options.request_timeout_s, poll=lambda: monitor.poll(0.01), progress=ctx.progress,
        )  # fmt: skip
    except check.AccuracyError as exc:
        raise LaunchFailure(str(exc)) from None
    record = check.summary(
        settings,
        dataset,
        results,
        kind=ctx.options.kind,
        reference_key=key,
        seconds=time.monotonic() - started,
    )
    check.write(ctx.rundir.path, results, record)
    score = record["scores"][task.gated_filter]
    detail = f"{score:.4f} ({task.gated_filter}) over {len(results)} items, {record['unanswered']} unanswered"
    monitor.event("accuracy_done", detail=detail)
    problems = []
    if record["unanswered"]:
        problems.append(f"{record['unanswered']} question(s) unanswered")
    if score < settings.threshold:
        problems.append(f"accuracy {score:.4f} below the threshold {settings.threshold}")
    if ctx.options.kind not in DISAGG_KINDS:
        check.record_reference(reference, check.reference_document(ctx.rundir.run_id, key, record, results))
        ctx.progress.line(f"accuracy {detail}: the reference for P/D runs ({key})")
    elif check.take_reference(reference, ctx.rundir.path):
        aggregated = check.aggregated_score(ctx.rundir.path, task.gated_filter)
        ctx.progress.line(f"accuracy {detail}; aggregated {aggregated:.4f} ({key})")
        if round(abs(score - aggregated), check.SCORE_DIGITS) > settings.max_pd_difference:
            problems.append(
                f"P/D {score:.4f} differs from aggregated {aggregated:.4f} by more than {settings.max_pd_difference}"
            )
    else:
        problems.append(
            f"no aggregated answers for {key} (an aggregated run of the same recipe records them)"
        )
    if problems:
        raise LaunchFailure("accuracy: " + "; ".join(problems))
