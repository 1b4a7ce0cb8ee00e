"""Asking the recipe's accuracy task through the frontend and scoring it (its row in
:mod:`atomdyn_launchers.profiles.accuracy_tasks` says how; :mod:`atomdyn_launchers.contract.accuracy` which files it
leaves), and keeping the aggregated run's per-item answers that a P/D run is compared with."""

from __future__ import annotations

import json
import queue
import shutil
import threading
import time
import urllib.error
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.recipes import Accuracy
from atomdyn_launchers.contract import direct_http
from atomdyn_launchers.contract.accuracy import (
    ACCURACY_DIR,
    AGGREGATED_FILE,
    ITEMS_FILE,
    SUMMARY_FILE,
    ItemResult,
    accuracy,
    items_text,
    split,
)
from atomdyn_launchers.profiles.accuracy_tasks import AccuracyTask, get_task
from atomdyn_launchers.profiles.datasets import Dataset
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.daemon_threads import DaemonWorkers
from atomdyn_launchers.run.smoke import chat_request

POLL_S = 1.0
SCORE_DIGITS = 6  # accuracy.json's scores, and the aggregated score a P/D run's is compared with


class AccuracyError(RuntimeError):
    """The accuracy check could not run (its data, its settings); a wrong or missing answer is a result."""


def task_of(settings: Accuracy) -> AccuracyTask:
    """The recipe's task (the schema admits only the registry's names)."""
    try:
        return get_task(settings.task)
    except KeyError as exc:
        raise AccuracyError(f"accuracy: {exc.args[0]}") from None


def ask(
    base_url: str, served_model: str, text: str, max_tokens: int, timeout_s: float, stop: tuple[str, ...]
) -> tuple[str, int]:
    """One question, greedy, until the task's stop sequences: the answer's text and its completion tokens."""
    body = {
        "model": served_model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stop": list(stop),
    }
    with direct_http.urlopen(chat_request(base_url, body), timeout=timeout_s) as response:
        reply: Any = json.loads(response.read())
    content = reply["choices"][0]["message"]["content"]
    if not isinstance(content, str) or not content.strip():
        raise ValueError(f"an empty answer: {json.dumps(reply)[:200]}")
    usage = reply.get("usage") or {}
    return content, int(usage.get("completion_tokens") or 0)


def ask_all(
    settings: Accuracy,
    dataset: Dataset,
    base_url: str,
    served_model: str,
    *,
    timeout_s: float,
    poll: Callable[[], None],
    progress: Progress | None = None,
) -> list[ItemResult]:
    """Every scored item asked, ``settings.concurrency`` at a time, each scored; ``poll`` is called while they
    run (the run's monitor: a failed role raises, and the questions not yet sent are not sent)."""
    task = task_of(settings)
    try:
        scored, shots = split(len(dataset.items), settings.items, settings.few_shot)
    except ValueError as exc:
        raise AccuracyError(f"accuracy: {exc} ({dataset.path})") from None
    examples = [(dataset.items[i].question, dataset.items[i].answer) for i in shots]
    stopped = threading.Event()

    def one(index: int) -> ItemResult:
        item = dataset.items[index]
        if stopped.is_set():
            return task.score(None, item.answer, index, error="not sent: the run stopped")
        try:
            text, tokens = ask(base_url, served_model, task.prompt(item.question, examples), settings.max_tokens,
                               timeout_s, task.stop)  # fmt: skip
        except (OSError, urllib.error.URLError, ValueError, KeyError, IndexError, TypeError) as exc:
            return task.score(None, item.answer, index, error=f"{type(exc).__name__}: {exc}"[:300])
        return task.score(text, item.answer, index, completion_tokens=tokens)

    results: dict[int, ItemResult] = {}
    # Daemon threads (run/daemon_threads.py): on a failure or Ctrl-C the questions not sent are not sent, and
    # those in flight (each up to timeout_s) hold up neither the stop of the jobs nor the launcher's exit, as a
    # pool's shutdown (and the interpreter's join of its workers) did.
    workers = DaemonWorkers(one, scored, settings.concurrency, "accuracy").start()
    last_shown = time.monotonic()
    try:
        while len(results) < len(scored):
            with suppress(queue.Empty):
                _, outcome = workers.done.get(timeout=POLL_S)
                if isinstance(outcome, BaseException):
                    raise outcome
                results[outcome.index] = outcome
            poll()
            if progress is not None and time.monotonic() - last_shown >= 15:
                last_shown = time.monotonic()
                progress.line(f"accuracy: {len(results)}/{len(scored)} questions answered")
    except BaseException:
        stopped.set()
        raise
    return [results[i] for i in scored]


def summary(
    settings: Accuracy, dataset: Dataset, results: list[ItemResult], *, kind: str, reference_key: str,
    seconds: float,
) -> dict[str, Any]:  # fmt: skip
    """``accuracy/accuracy.json``: what was asked, from which data, and what it scored."""
    task = task_of(settings)
    answered = sum(1 for r in results if r.answered)
    return {
        "task": settings.task,
        "scorer": task.scorer,
        "settings": settings.settings(),
        "data": dataset.provenance(),
        "kind": kind,
        "items": len(results),
        "answered": answered,
        "unanswered": len(results) - answered,
        "scores": {name: round(accuracy(results, name), SCORE_DIGITS) for name in task.filters},
        "gated_filter": task.gated_filter,
        "threshold": settings.threshold,
        "threshold_source": settings.threshold_source,
        "max_pd_difference": settings.max_pd_difference,
        "max_differing_items": settings.max_differing_items,
        "reference_key": reference_key,
        "seconds": round(seconds, 1),
    }


def write(run_dir: Path, results: list[ItemResult], record: dict[str, Any]) -> Path:
    out = run_dir / ACCURACY_DIR
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / ITEMS_FILE, items_text(results))
    atomic_write_text(out / SUMMARY_FILE, json.dumps(record, indent=2) + "\n")
    return out


def reference_document(run_id: str, key: str, record: dict[str, Any], results: list[ItemResult]) -> str:
    """The aggregated run's answers, as a P/D run of the same engine, model, build, settings and data reads them."""
    document = {
        "run_id": run_id,
        "key": key,
        "settings": record["settings"],
        "data": {"sha256": record["data"]["sha256"]},  # a "sha256" line: the evidence's secret scans keep it
        "scores": record["scores"],
        "items": [r.to_json() for r in results],
    }
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def record_reference(path: Path, document: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, document)


def take_reference(path: Path, run_dir: Path) -> bool:
    """A P/D run's copy of the aggregated answers (``accuracy/aggregated.json``); False when there are none."""
    if not path.is_file():
        return False
    shutil.copyfile(path, run_dir / ACCURACY_DIR / AGGREGATED_FILE)
    return True


def aggregated_score(run_dir: Path, gated_filter: str) -> float:
    """The aggregated answers' score (by the task's gated filter), recomputed from their items and rounded as
    ``accuracy.json``'s scores are (so that equal answers give equal figures: 84/238 once made 0.352941 and
    0.35294117647 "differ")."""
    document = json.loads((run_dir / ACCURACY_DIR / AGGREGATED_FILE).read_text(encoding="utf-8"))
    return round(
        accuracy([ItemResult.from_json(raw) for raw in document["items"]], gated_filter), SCORE_DIGITS
    )
