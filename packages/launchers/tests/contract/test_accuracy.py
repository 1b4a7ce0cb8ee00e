"""The accuracy scorer extracts and scores GSM8K answers as lm-eval 0.4.9.1's gsm8k task does: the cases file holds
responses to real test items and what lm-eval's own RegexFilter and exact_match gave for each of its two filters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.contract import accuracy

CASES: list[dict[str, Any]] = json.loads((Path(__file__).parent / "lm_eval_gsm8k_cases.json").read_text())[
    "cases"
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_extraction_and_exact_match_equal_lm_evals(case: dict[str, Any]) -> None:
    for name in accuracy.FILTERS:
        extracted, correct = case[name]
        assert accuracy.extract(case["response"], name) == extracted, name
        assert accuracy.exact_match(extracted, case["answer"]) is correct, name
    scored = accuracy.score(case["response"], case["answer"], 0)
    assert scored.correct == {name: case[name][1] for name in accuracy.FILTERS}


def test_the_cases_cover_both_filters_disagreeing() -> None:
    strict_only = [c for c in CASES if c[accuracy.STRICT][1] and not c[accuracy.FLEXIBLE][1]]
    flexible_only = [c for c in CASES if c[accuracy.FLEXIBLE][1] and not c[accuracy.STRICT][1]]
    assert flexible_only and not strict_only  # flexible-extract reads what strict-match's "#### " misses
    assert any(not c[accuracy.STRICT][1] and not c[accuracy.FLEXIBLE][1] for c in CASES)


def test_the_prompt_is_lm_evals_context_with_its_shots() -> None:
    text = accuracy.prompt("How many?", [("One?", "1 #### 1"), ("Two?", "2 #### 2")])
    assert (
        text
        == "Question: One?\nAnswer: 1 #### 1\n\nQuestion: Two?\nAnswer: 2 #### 2\n\nQuestion: How many?\nAnswer:"
    )
    assert accuracy.prompt("How many?") == "Question: How many?\nAnswer:"


def test_scored_items_and_shots_never_overlap() -> None:
    scored, shots = accuracy.split(1319, 200, 5)
    assert (scored, shots) == (range(200), range(1314, 1319))
    with pytest.raises(ValueError, match="need 1320 of the data's 1319"):
        accuracy.split(1319, 1315, 5)


def test_an_unanswered_item_is_wrong_and_round_trips() -> None:
    item = accuracy.score(None, "x #### 18", 3, error="HTTP 500")
    assert not item.answered and item.correct == {f: False for f in accuracy.FILTERS}
    assert accuracy.parse_items(accuracy.items_text([item])) == [item]
    assert accuracy.accuracy([item, accuracy.score(" #### 18", "x #### 18", 4)]) == 0.5
