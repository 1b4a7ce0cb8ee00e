"""Stage smoke: probe until one response is verified (P/D: different prefill and decode workers), ask the
fixed prompt where the engine's answers are compared with an aggregated run's, then send the smoke requests,
each checked, and keep the workers' metrics."""

from __future__ import annotations

import shutil
import threading
import time
from contextlib import suppress

from atomdyn_launchers.contract.answers import (
    ANSWER_FILE,
    ANSWERS_DIR,
    FIXED_PROMPT,
    REFERENCE_FILE,
    Answer,
    write_answer,
)
from atomdyn_launchers.contract.kinds import DISAGG_KINDS
from atomdyn_launchers.contract.rundir import requests_done_detail
from atomdyn_launchers.run.answers import AnswerError, ask, reference_for
from atomdyn_launchers.run.context import LaunchFailure, RunContext
from atomdyn_launchers.run.metrics import scrape_metrics
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.plan import model_path
from atomdyn_launchers.run.reference_prompts import ask_reference_prompts, model_reference
from atomdyn_launchers.run.reference_prompts import record as record_reference
from atomdyn_launchers.run.smoke import (
    ABORTED,
    SmokeClient,
    SmokeRequest,
    SmokeResult,
    build_requests,
    run_smoke,
)


def smoke(ctx: RunContext, monitor: Monitor) -> None:
    first_good(ctx, monitor)
    fixed_answer(ctx, monitor)
    requests(ctx, monitor)
    scrape_metrics(ctx, monitor)


def _client(ctx: RunContext, monitor: Monitor) -> SmokeClient:
    return SmokeClient(
        monitor.frontend_url(), monitor.served_model_name(), timeout_s=ctx.options.request_timeout_s
    )


def first_good(ctx: RunContext, monitor: Monitor) -> None:
    """Probe until one response is verified, within what is left of the readiness budget and, where the engine
    or --first-response-timeout sets one, the first-response budget counted from now (the frontend lists every
    worker): a pair that is healthy but cannot serve fails then, not at the end of the readiness budget."""
    budget_s = ctx.first_response_timeout_s
    if budget_s is not None and time.monotonic() + budget_s < monitor.deadline:
        monitor.deadline = time.monotonic() + budget_s
        monitor.deadline_budget = (
            f"{budget_s:.0f} s after the frontend listed every worker (the first-response budget: "
            "--first-response-timeout)"
        )
    client = _client(ctx, monitor)
    probe = SmokeRequest(index=-1, prompt_group=-1, prompt="Readiness probe: say hello.", max_tokens=8)
    attempts = 0
    last: SmokeResult | None = None

    def verified() -> str | None:
        nonlocal attempts, last
        attempts += 1
        last = client.send(probe, ctx.options.kind == "disagg")
        return None if last.ok else f"last probe: {last.error}"

    monitor.wait_until("a verified response", verified)
    assert last is not None
    detail = f"after {attempts} probe(s): prefill {last.prefill_worker_id} decode {last.decode_worker_id}"
    monitor.event("first_good_response", detail=detail)
    ctx.progress.line(f"first verified response {detail}")
    scrape_metrics(ctx, monitor, at_ready=True)


def fixed_answer(ctx: RunContext, monitor: Monitor) -> None:
    """For engines whose P/D answers are checked against aggregated ones: ask the fixed prompt once; an
    aggregated run records the reference, a P/D run takes the reference it finds (answers.py)."""
    if not ctx.engine.expectations.aggregated_answer:
        return
    key, reference = reference_for(ctx.config, ctx.engine, ctx.model, ctx.options.lock_path)
    try:
        tokens, logprobs, text = ask(
            monitor.frontend_url(), monitor.served_model_name(), ctx.options.request_timeout_s
        )
    except AnswerError as exc:
        raise LaunchFailure(str(exc)) from None
    answer = Answer(ctx.rundir.run_id, key, FIXED_PROMPT, tokens, text, logprobs)
    out = ctx.rundir.path / ANSWERS_DIR
    write_answer(out / ANSWER_FILE, answer)
    if ctx.options.kind not in DISAGG_KINDS:
        write_answer(reference, answer)
        ctx.progress.line(f"fixed prompt answered ({len(tokens)} tokens): the reference for P/D runs ({key})")
    elif reference.is_file():
        shutil.copyfile(reference, out / REFERENCE_FILE)
        ctx.progress.line(f"fixed prompt answered ({len(tokens)} tokens); aggregated reference {key} taken")
    else:
        ctx.progress.line(
            f"fixed prompt answered; no aggregated reference for {key} yet "
            f"(an aggregated run of engine {ctx.engine.name} records it)"
        )
    independent_reference(ctx, monitor)


def independent_reference(ctx: RunContext, monitor: Monitor) -> None:
    """For a model whose build recorded transformers' answers (reference_prompts.py): ask the same prompts and
    keep both in ``answers/``, aggregated and P/D alike; the evidence compares them token for token."""
    try:
        reference = model_reference(model_path(ctx.config, ctx.model))
        if reference is None:
            return
        answers = ask_reference_prompts(
            monitor.frontend_url(), monitor.served_model_name(), reference, ctx.rundir.run_id,
            ctx.options.request_timeout_s,
        )  # fmt: skip
    except AnswerError as exc:
        raise LaunchFailure(str(exc)) from None
    record_reference(ctx.rundir.path / ANSWERS_DIR, reference, ctx.model.build_digest or "", answers)
    ctx.progress.line(
        f"reference prompts answered ({len(answers.answers)}): kept beside transformers' answers"
    )


def requests(ctx: RunContext, monitor: Monitor) -> None:
    options = ctx.options
    total = options.resolved_requests()
    batch = build_requests(total, options.prompt_groups, max_tokens=options.max_tokens)
    client = _client(ctx, monitor)
    stop = threading.Event()
    lock = threading.Lock()

    def on_result(result: SmokeResult) -> None:
        if result.error == ABORTED:
            return  # never sent: not a smoke request of this run
        with lock:
            monitor.results.append(result)
            monitor.done_count += 1
        ctx.rundir.request(result.record())

    worker = threading.Thread(
        target=lambda: run_smoke(
            client,
            batch,
            concurrency=options.concurrency,
            require_pd=options.kind == "disagg",
            on_result=on_result,
            stop=stop,
        ),
        name="smoke",
        daemon=True,
    )
    monitor.done_count = 0
    # Started inside the try: a Ctrl-C that lands while start() waits for the new thread to run (a wait that
    # grows with the machine's load) must still stop the requests. Outside it, the interrupt skipped stop.set()
    # and the smoke thread went on sending every request of the run while the jobs stopped, after run.json was
    # written, and (its pool's workers being joined at exit) the launcher could not exit until all were sent.
    try:
        worker.start()
        while worker.is_alive():
            monitor.poll()
            worker.join(timeout=0)
    except BaseException:
        stop.set()
        _abandon(ctx, worker)
        raise
    bad = [r for r in monitor.results if not r.ok]
    ok = total - len(bad)
    monitor.event("requests_done", detail=requests_done_detail(ok, total))
    ctx.progress.line(f"requests done: {requests_done_detail(ok, total)}")
    if bad:
        first = sorted(bad, key=lambda r: r.index)[0]
        raise LaunchFailure(
            f"{len(bad)} of {total} smoke requests failed; first: #{first.index}: {first.error}"
        )


SMOKE_JOIN_S = 5.0  # how long a stopping run waits for the smoke requests in flight


def _abandon(ctx: RunContext, worker: threading.Thread) -> None:
    """After ``stop`` is set: wait up to SMOKE_JOIN_S for the requests in flight (they end once the jobs stop),
    then leave them to their daemon threads, saying so: none holds up the stop or the launcher's exit."""
    if worker.ident is None:  # interrupted before the thread existed: nothing was sent
        return
    with suppress(RuntimeError):  # started, but not yet running when interrupted: its requests see stop set
        worker.join(timeout=SMOKE_JOIN_S)
    if worker.is_alive():
        ctx.progress.line(
            f"smoke: requests still in flight after {SMOKE_JOIN_S:.0f} s were left unanswered (nothing new is sent)"
        )
