"""The capitals task's rules: the prompt the small model answers, and the scorer checked against responses the
real model gave through the local cluster (capitals_cases.json, each verdict judged by hand), never invented ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.contract import accuracy_capitals as capitals

CASES_FILE: dict[str, Any] = json.loads((Path(__file__).parent / "capitals_cases.json").read_text())
CASES: list[dict[str, Any]] = CASES_FILE["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["country"] for c in CASES])
def test_the_first_line_names_the_capital_as_judged_by_hand(case: dict[str, Any]) -> None:
    extracted, correct = case[capitals.FIRST_LINE]
    assert capitals.extract(case["response"], capitals.FIRST_LINE) == extracted
    assert capitals.exact_match(extracted, case["capital"]) is correct


def test_the_cases_cover_what_the_rules_decide() -> None:
    right = [c for c in CASES if c[capitals.FIRST_LINE][1]]
    wrong = [c for c in CASES if not c[capitals.FIRST_LINE][1]]
    assert len(right) >= 10 and len(wrong) >= 10
    # accents folded: "San José" in "San José de Asunción"; an apostrophe inside the name: "Sana'a"
    assert {"Costa Rica", "Yemen"} <= {c["country"] for c in right}
    # the capital in the middle of a longer line, followed by a comma: Quito, Port Stanley, Ottawa
    assert {"Ecuador", "Falkland Islands", "Canada"} <= {c["country"] for c in right}
    # near misses are wrong: "Belgrad", "Bishkeq", "Kiev" (another spelling is not the data's capital), "Belize City"
    assert {"Serbia", "Kyrgyzstan", "Ukraine", "Belize"} <= {c["country"] for c in wrong}
    # the country named instead of its capital ("San Marino" for "City of San Marino"), and a line cut at 16 tokens
    assert {"San Marino", "Albania"} <= {c["country"] for c in wrong}


def test_fold_ignores_accents_case_and_spacing() -> None:
    assert capitals.fold("  Bogotá ") == "bogota"
    assert capitals.fold("Chișinău") == "chisinau"
    assert capitals.fold("St.\u00a0Jonathan") == "st. jonathan"  # a no-break space in a real answer (Jersey)
    assert capitals.target("Nuku'alofa") == "nuku'alofa"


def test_the_prompt_is_the_plain_question_or_question_and_answer_examples() -> None:
    assert capitals.prompt("France") == "What is the capital of France?"
    assert capitals.prompt("France", [("Peru", "Lima"), ("Chad", "N'Djamena")]) == (
        "Question: What is the capital of Peru?\nAnswer: Lima\n\n"
        "Question: What is the capital of Chad?\nAnswer: N'Djamena\n\n"
        "Question: What is the capital of France?\nAnswer:"
    )


def test_the_answer_is_one_line_and_an_empty_one_is_wrong() -> None:
    assert "\n" in capitals.STOP and "<|im_end|>" in capitals.STOP
    assert capitals.extract("  \n", capitals.FIRST_LINE) == capitals.FALLBACK
    assert capitals.exact_match(capitals.FALLBACK, "Lima") is False
    with pytest.raises(ValueError, match="unknown filter"):
        capitals.extract("Lima", "flexible-extract")
