"""The accuracy task registry: its names are the recipe schema's choices, each row is complete, GSM8K's row scores
exactly as the lm-eval restatement does, and a recipe takes its task's defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.config.recipes import SCHEMA, Accuracy, parse_recipe
from atomdyn_launchers.contract import accuracy
from atomdyn_launchers.profiles import accuracy_tasks, datasets

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent.parent / "contract" / "lm_eval_gsm8k_cases.json").read_text()
)["cases"]
BASE = "schema_version: 1\nname: r\nengine: vllm-cpu\nkind: agg\nlayout: {agg: {workers: 1}}\n"


def test_the_schema_offers_the_registrys_tasks_and_nothing_else() -> None:
    task = SCHEMA["properties"]["accuracy"]["properties"]["task"]
    assert task["enum"] == list(accuracy_tasks.TASK_NAMES) == ["gsm8k", "capitals"]
    with pytest.raises(KeyError, match="unknown accuracy task 'mmlu'"):
        accuracy_tasks.get_task("mmlu")


@pytest.mark.parametrize("task", accuracy_tasks.TASKS.values(), ids=accuracy_tasks.TASK_NAMES)
def test_each_row_gates_one_of_its_filters_and_scores_an_unanswered_item_wrong(
    task: accuracy_tasks.AccuracyTask,
) -> None:
    assert task.gated_filter in task.filters and task.stop and task.scorer and task.pinned_items > 0
    unanswered = task.score(None, "x #### 1" if task.name == "gsm8k" else "Lima", 0, error="HTTP 500")
    assert not unanswered.answered and not any(unanswered.correct.values())
    assert set(unanswered.extracted) == set(task.filters)


def test_gsm8k_is_the_lm_eval_restatement_unchanged() -> None:
    row = accuracy_tasks.GSM8K
    assert (row.stop, row.filters, row.gated_filter) == (
        accuracy.STOP,
        accuracy.FILTERS,
        accuracy.GATED_FILTER,
    )
    assert (row.pinned_items, row.few_shot, row.max_tokens) == (datasets.GSM8K_ITEMS, 5, 256)
    assert row.prompt("How many?", [("One?", "1 #### 1")]) == accuracy.prompt(
        "How many?", [("One?", "1 #### 1")]
    )
    for index, case in enumerate(CASES):
        assert row.score(case["response"], case["answer"], index) == accuracy.score(
            case["response"], case["answer"], index
        )
    assert row.scorer == "contract/accuracy.py: lm-eval 0.4.9.1's gsm8k prompt, filters and exact_match"


def test_a_recipe_takes_its_tasks_defaults_and_its_tasks_item_count() -> None:
    gsm8k = parse_recipe(
        BASE + "accuracy: {task: gsm8k, items: 200, threshold: 0.8, max_pd_difference: 0.02}\n"
    )
    assert gsm8k.accuracy == Accuracy("gsm8k", 200, 0.8, 0.02, few_shot=5, max_tokens=256)
    capitals = parse_recipe(
        BASE + "accuracy: {task: capitals, items: 60, threshold: 0.2, max_pd_difference: 0}\n"
    )
    assert capitals.accuracy == Accuracy("capitals", 60, 0.2, 0.0, few_shot=0, max_tokens=16)
    assert capitals.accuracy.settings() == {"task": "capitals", "items": 60, "few_shot": 0, "max_tokens": 16}
    parse_recipe(BASE + "accuracy: {task: capitals, items: 237, threshold: 0.2, max_pd_difference: 0}\n")
    with pytest.raises(
        ValueError, match="238 items and 0 few-shot examples are more than the capitals data's 237 test items"
    ):
        parse_recipe(BASE + "accuracy: {task: capitals, items: 238, threshold: 0.2, max_pd_difference: 0}\n")
    with pytest.raises(ValueError, match="more than the capitals data's 237"):
        parse_recipe(
            BASE
            + "accuracy: {task: capitals, items: 235, few_shot: 3, threshold: 0.2, max_pd_difference: 0}\n"
        )
    # a file of your own may hold more items than the pinned data
    parse_recipe(
        BASE
        + "accuracy: {task: capitals, items: 500, threshold: 0.2, max_pd_difference: 0, data: own.jsonl}\n"
    )
    with pytest.raises(ValueError, match=r"accuracy\.task"):
        parse_recipe(BASE + "accuracy: {task: mmlu, items: 2, threshold: 0.2, max_pd_difference: 0}\n")
