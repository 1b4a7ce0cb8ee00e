"""The independent reference of a run's answers: what transformers' greedy decode of the same prompts gives.

The aggregated-vs-P/D check (:mod:`atomdyn_launchers.contract.answers`) catches KV moved to the wrong place, not
an engine wrong the same way in both runs. For a model the project builds with a reference (the real model,
``profiles/smollm2.py``: ``reference.json`` beside the weights, computed by transformers in float32 at build
time), every run of it, aggregated or P/D, asks the reference's fixed prompts at temperature 0 (``ignore_eos``,
as many tokens as the reference holds) and leaves two files in ``answers/``:

- ``independent-reference.json``: the reference as the build wrote it (per prompt: the prompt token ids through
  the model's chat template, the token ids, token strings, text, log probabilities and each step's margin over
  the runner-up), with the model's digest: the reference is part of the evidence;
- ``reference-prompts.json``: the run's answers to the same prompts (token strings and text).

The evidence counts the positions where the two differ, over every prompt, and requires none.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from atomdyn_launchers.contract.answers import differing_tokens

INDEPENDENT_REFERENCE_FILE = "independent-reference.json"
REFERENCE_PROMPTS_FILE = "reference-prompts.json"
REFERENCE_ANSWER_FILES = (INDEPENDENT_REFERENCE_FILE, REFERENCE_PROMPTS_FILE)  # what evidence collect keeps


@dataclass(frozen=True)
class PromptAnswer:
    name: str
    tokens: list[str]
    text: str


@dataclass(frozen=True)
class PromptAnswers:
    run_id: str
    answers: list[PromptAnswer]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PromptAnswers:
        data: Any = json.loads(text)
        return cls(str(data["run_id"]), [_prompt_answer(a) for a in data["answers"]])


def _prompt_answer(raw: Any) -> PromptAnswer:
    tokens = raw["tokens"]
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ValueError(f"answer {raw.get('name')!r}: tokens is not a list of strings")
    return PromptAnswer(str(raw["name"]), tokens, str(raw.get("text", "")))


def reference_answers(reference: Any) -> list[PromptAnswer]:
    """The answers of a reference document (``independent-reference.json``)."""
    if not isinstance(reference, dict) or not isinstance(reference.get("answers"), list):
        raise ValueError("the reference has no answers")
    return [_prompt_answer(a) for a in reference["answers"]]


def differences(answers: list[PromptAnswer], reference: list[PromptAnswer]) -> dict[str, int]:
    """Per reference prompt, the positions where the run's answer differs from the reference's (a prompt the
    run did not answer counts every reference token)."""
    by_name = {a.name: a for a in answers}
    return {
        ref.name: differing_tokens(by_name[ref.name].tokens, ref.tokens)
        if ref.name in by_name
        else len(ref.tokens)
        for ref in reference
    }
