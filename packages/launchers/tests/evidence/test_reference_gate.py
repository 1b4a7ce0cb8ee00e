"""The independent-reference gate: a run's answers to the reference prompts against transformers' greedy decode
of them, token for token; n/a for a model without a reference, failing on any difference or a missing answer."""

from __future__ import annotations

import json
from pathlib import Path

from atomdyn_launchers.contract.answers import ANSWERS_DIR
from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.reference_answers import (
    INDEPENDENT_REFERENCE_FILE,
    REFERENCE_PROMPTS_FILE,
    PromptAnswer,
    PromptAnswers,
)
from atomdyn_launchers.evidence import gates
from atomdyn_launchers.evidence.signals import Signals

GATE = next(g for g in gates.GATES if g.id == "reference_differing_tokens")
EXPECTS = GateExpectations(aggregated_answer=True)
PARIS = ["The", " capital", " of", " France", " is", " Paris", "."]
COLOURS = ["The", " three", " primary", " colours", " are", ":"]


def _reference() -> dict[str, object]:
    return {
        "implementation": "transformers greedy decode, float32",
        "max_tokens": 7,
        "answers": [
            {"name": "capital", "messages": [{"role": "user", "content": "What is the capital of France?"}],
             "prompt_token_ids": [1, 2, 3], "token_ids": list(range(7)), "tokens": PARIS, "text": "".join(PARIS)},
            {"name": "colours", "messages": [{"role": "user", "content": "Name the three primary colours."}],
             "prompt_token_ids": [1, 4], "token_ids": list(range(6)), "tokens": COLOURS, "text": "".join(COLOURS)},
        ],
    }  # fmt: skip


def _run(tmp_path: Path, answers: list[PromptAnswer] | None, reference: bool = True) -> gates.GateResult:
    run_dir = tmp_path / "20261204T000000Z-disagg-vllm-cpu"
    (run_dir / ANSWERS_DIR).mkdir(parents=True)
    if reference:
        (run_dir / ANSWERS_DIR / INDEPENDENT_REFERENCE_FILE).write_text(json.dumps(_reference()))
    if answers is not None:
        (run_dir / ANSWERS_DIR / REFERENCE_PROMPTS_FILE).write_text(
            PromptAnswers(run_dir.name, answers).to_json()
        )
    signals = Signals(run_dir, run_dir.name)
    gates.derive(signals, EXPECTS)
    return gates._judge(GATE, signals, EXPECTS)


def test_answers_equal_to_the_reference_pass(tmp_path: Path) -> None:
    result = _run(tmp_path, [PromptAnswer("capital", PARIS, ""), PromptAnswer("colours", COLOURS, "")])
    assert (result.verdict, result.value) == ("pass", 0)
    assert GATE.kinds == ("agg-single", "agg-two", "disagg")


def test_a_forced_mismatch_fails_the_gate(tmp_path: Path) -> None:
    """The bf16 answer vLLM's AMX attention gave: its first token tipped the other way, and all that follows."""
    wrong = ["L", "'", "É", "toile", ",", " la", " Mars"]
    result = _run(tmp_path, [PromptAnswer("capital", wrong, ""), PromptAnswer("colours", COLOURS, "")])
    assert (result.verdict, result.value) == ("fail", 7)
    assert "reference.differing_tokens is 7" in result.reason


def test_a_prompt_left_unanswered_or_short_counts(tmp_path: Path) -> None:
    result = _run(tmp_path, [PromptAnswer("capital", PARIS[:5], "")])
    assert (result.verdict, result.value) == ("fail", 2 + len(COLOURS))


def test_no_answers_file_fails_with_the_reason(tmp_path: Path) -> None:
    result = _run(tmp_path, None)
    assert result.verdict == "fail"
    assert "asked no reference prompt" in result.reason


def test_a_model_without_a_reference_is_not_judged_nor_listed(tmp_path: Path) -> None:
    """n/a, and left out of the results: committed evidence of runs before the gate verifies unchanged."""
    result = _run(tmp_path, None, reference=False)
    assert result.verdict == "n/a"
    run_dir = tmp_path / "20261204T000000Z-disagg-vllm-cpu"
    signals = Signals(run_dir, run_dir.name)
    signals.set("run.kind", "disagg")
    assert GATE.id not in {r.id for r in gates.evaluate(signals, EXPECTS)}
    (run_dir / ANSWERS_DIR / INDEPENDENT_REFERENCE_FILE).write_text(json.dumps(_reference()))
    signals = Signals(run_dir, run_dir.name)
    signals.set("run.kind", "disagg")
    assert GATE.id in {r.id for r in gates.evaluate(signals, EXPECTS)}
