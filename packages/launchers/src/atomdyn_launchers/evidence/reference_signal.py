"""``answers/independent-reference.json`` and ``answers/reference-prompts.json``: the run's answers to the
reference prompts against transformers' greedy decode of them (:mod:`atomdyn_launchers.contract.reference_answers`).

Sets ``reference.recorded`` (whether the run's model has an independent reference: the gate is n/a without one)
and ``reference.differing_tokens`` (positions that differ, over every prompt).
"""

from __future__ import annotations

import json

from atomdyn_launchers.contract.answers import ANSWERS_DIR
from atomdyn_launchers.contract.reference_answers import (
    INDEPENDENT_REFERENCE_FILE,
    REFERENCE_PROMPTS_FILE,
    PromptAnswers,
    differences,
    reference_answers,
)
from atomdyn_launchers.evidence.signals import Signals

RECORDED = "reference.recorded"
DIFFERING = "reference.differing_tokens"


def read_reference_answers(signals: Signals) -> None:
    directory = signals.run_dir / ANSWERS_DIR
    reference_path = directory / INDEPENDENT_REFERENCE_FILE
    signals.set(RECORDED, reference_path.is_file())
    if not reference_path.is_file():
        signals.absent(DIFFERING, f"{ANSWERS_DIR}/{INDEPENDENT_REFERENCE_FILE} is absent (no reference)")
        return
    try:
        reference = reference_answers(json.loads(reference_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        signals.absent(DIFFERING, f"{ANSWERS_DIR}/{INDEPENDENT_REFERENCE_FILE} is unreadable: {exc}")
        return
    answers_path = directory / REFERENCE_PROMPTS_FILE
    try:
        answers = PromptAnswers.from_json(answers_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        signals.absent(
            DIFFERING, f"{ANSWERS_DIR}/{REFERENCE_PROMPTS_FILE} is absent: the run asked no reference prompt"
        )
        return
    except (OSError, ValueError, KeyError, TypeError) as exc:
        signals.absent(DIFFERING, f"{ANSWERS_DIR}/{REFERENCE_PROMPTS_FILE} is unreadable: {exc}")
        return
    per_prompt = differences(answers.answers, reference)
    by_name = {a.name: a for a in answers.answers}
    for ref in reference:
        got = by_name.get(ref.name)
        signals.excerpt(
            "answers",
            f"reference {ref.name}: {per_prompt[ref.name]} differing; transformers {json.dumps(ref.text)}, "
            f"run {json.dumps(got.text) if got else 'none'}",
        )
    signals.set(DIFFERING, sum(per_prompt.values()))
