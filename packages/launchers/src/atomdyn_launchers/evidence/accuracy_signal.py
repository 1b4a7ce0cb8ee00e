"""``accuracy/``: the run's answers per item to its accuracy task and, for P/D, the aggregated run's on the same
items (:mod:`atomdyn_launchers.contract.accuracy`). The scores are recomputed here from the items, never taken from
``accuracy.json``'s own figures; that file gives the task, the settings and the bounds, and the task's row
(:mod:`atomdyn_launchers.profiles.accuracy_tasks`) the filter that is gated.

Sets ``accuracy.recorded`` (the run asked the accuracy check: its gates are left out without it),
``accuracy.score`` (the task's gated filter over the scored items: gsm8k's flexible-extract exact match, capitals'
first-line match), ``accuracy.threshold``,
``accuracy.unanswered`` (items asked for that have no answer), and, for P/D runs, ``accuracy.pd_difference``
(|P/D - aggregated| on the same items), ``accuracy.max_pd_difference``, ``accuracy.pd_differing_items`` (items
whose extracted answers differ), ``accuracy.max_differing_items`` and ``accuracy.items_gated`` (the recipe bounds
the differing items).
"""

from __future__ import annotations

import json
from typing import Any

from atomdyn_launchers.contract.accuracy import (
    ACCURACY_DIR,
    AGGREGATED_FILE,
    ITEMS_FILE,
    SUMMARY_FILE,
    ItemResult,
    accuracy,
    parse_items,
)
from atomdyn_launchers.contract.kinds import DISAGG_KINDS
from atomdyn_launchers.evidence.jsonfile import loads, read_whole_text
from atomdyn_launchers.evidence.signals import Signals
from atomdyn_launchers.profiles.accuracy_tasks import get_task

RECORDED = "accuracy.recorded"
SCORE = "accuracy.score"
THRESHOLD = "accuracy.threshold"
UNANSWERED = "accuracy.unanswered"
PD_DIFFERENCE = "accuracy.pd_difference"
MAX_PD_DIFFERENCE = "accuracy.max_pd_difference"
DIFFERING = "accuracy.pd_differing_items"
MAX_DIFFERING = "accuracy.max_differing_items"
ITEMS_GATED = "accuracy.items_gated"
SIGNALS = frozenset({RECORDED, SCORE, THRESHOLD, UNANSWERED, PD_DIFFERENCE, MAX_PD_DIFFERENCE, DIFFERING,
                     MAX_DIFFERING, ITEMS_GATED})  # fmt: skip
_BOUND = (int, float)


def _absent_all(signals: Signals, why: str) -> None:
    for name in SIGNALS - {RECORDED, ITEMS_GATED}:
        signals.absent(name, why)


def read_accuracy(signals: Signals) -> None:
    directory = signals.run_dir / ACCURACY_DIR
    summary_path = directory / SUMMARY_FILE
    signals.set(RECORDED, summary_path.is_file())
    signals.set(ITEMS_GATED, False)
    if not summary_path.is_file():
        _absent_all(signals, f"{ACCURACY_DIR}/{SUMMARY_FILE} is absent (the recipe asks no accuracy check)")
        return
    try:
        summary: Any = loads(
            read_whole_text(summary_path, "accuracy summary"), f"{ACCURACY_DIR}/{SUMMARY_FILE}"
        )
        items = parse_items(read_whole_text(directory / ITEMS_FILE, "accuracy items"))
        settings = summary["settings"]
        asked = int(settings["items"])
        gated = get_task(str(summary["task"])).gated_filter
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _absent_all(signals, f"{ACCURACY_DIR}/ is unreadable: {exc}")
        return
    threshold, max_difference = summary.get("threshold"), summary.get("max_pd_difference")
    for name, bound in ((THRESHOLD, threshold), (MAX_PD_DIFFERENCE, max_difference)):
        if isinstance(bound, _BOUND) and not isinstance(bound, bool):
            signals.set(name, bound)
        else:
            signals.absent(name, f"{ACCURACY_DIR}/{SUMMARY_FILE} holds no {name.split('.', 1)[1]}")
    by_index = {r.index: r for r in items if 0 <= r.index < asked}
    scored = [by_index[i] for i in sorted(by_index)]
    answered = [r for r in scored if r.answered]
    signals.set(UNANSWERED, asked - len(answered))
    signals.set(SCORE, round(sum(1 for r in scored if r.correct.get(gated)) / asked, 6) if asked else 0.0)
    signals.excerpt(
        "accuracy",
        f"{ACCURACY_DIR}/{ITEMS_FILE}: {len(answered)} of {asked} {summary.get('task')} items answered, "
        f"{gated} {signals.get(SCORE)} (threshold {threshold}: {summary.get('threshold_source') or 'the recipe'}); "
        f"data sha256 {summary.get('data', {}).get('sha256')}",
    )
    for r in scored[:3]:
        signals.excerpt("accuracy", f"item {r.index}: target {r.target}, extracted {json.dumps(r.extracted)}")
    max_differing = summary.get("max_differing_items")
    if isinstance(max_differing, int) and not isinstance(max_differing, bool):
        signals.set(MAX_DIFFERING, max_differing)
        signals.set(ITEMS_GATED, True)
    else:
        signals.absent(MAX_DIFFERING, "the recipe bounds no differing items")
    _compare_aggregated(signals, summary, scored, asked, gated)


def _compare_aggregated(
    signals: Signals, summary: Any, scored: list[ItemResult], asked: int, gated: str
) -> None:
    path = signals.run_dir / ACCURACY_DIR / AGGREGATED_FILE
    if summary.get("kind") not in DISAGG_KINDS:
        for name in (PD_DIFFERENCE, DIFFERING):
            signals.absent(name, "an aggregated run is the reference itself")
        return
    try:
        document: Any = loads(
            read_whole_text(path, "aggregated answers"), f"{ACCURACY_DIR}/{AGGREGATED_FILE}"
        )
        reference = [ItemResult.from_json(raw) for raw in document["items"]]
        same = (
            document["settings"] == summary["settings"]
            and document["data"]["sha256"] == summary["data"]["sha256"]
        )
    except FileNotFoundError:
        why = (f"no {ACCURACY_DIR}/{AGGREGATED_FILE}: an aggregated run of the same recipe, engine, model and build "
               "records the answers a P/D run is compared with")  # fmt: skip
        for name in (PD_DIFFERENCE, DIFFERING):
            signals.absent(name, why)
        return
    except (OSError, ValueError, KeyError, TypeError) as exc:
        for name in (PD_DIFFERENCE, DIFFERING):
            signals.absent(name, f"{ACCURACY_DIR}/{AGGREGATED_FILE} is unreadable: {exc}")
        return
    if not same:
        for name in (PD_DIFFERENCE, DIFFERING):
            signals.absent(name, "the aggregated answers are for other settings or data")
        return
    theirs = {r.index: r for r in reference if 0 <= r.index < asked}
    if sorted(theirs) != list(range(asked)):
        for name in (PD_DIFFERENCE, DIFFERING):
            signals.absent(name, f"the aggregated answers hold {len(theirs)} of the {asked} items")
        return
    aggregated = accuracy([theirs[i] for i in range(asked)], gated)
    ours = {r.index: r for r in scored}
    differing = [
        i for i in range(asked)
        if i not in ours or ours[i].extracted.get(gated) != theirs[i].extracted.get(gated)
    ]  # fmt: skip
    signals.set(PD_DIFFERENCE, round(abs(float(signals.get(SCORE)) - aggregated), 6))
    signals.set(DIFFERING, len(differing))
    signals.excerpt(
        "accuracy",
        f"{ACCURACY_DIR}/{AGGREGATED_FILE} ({document.get('run_id')}): aggregated {gated} "
        f"{round(aggregated, 6)}; {len(differing)} item(s) answered differently"
        + (f" (first: {differing[:5]})" if differing else ""),
    )
