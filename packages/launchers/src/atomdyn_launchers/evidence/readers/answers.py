"""``answers/``: the fixed prompt's answer at temperature 0 and, for P/D, the aggregated run's reference."""

from __future__ import annotations

import json

from atomdyn_launchers.contract.answers import (
    ANSWER_FILE,
    ANSWERS_DIR,
    REFERENCE_FILE,
    Answer,
    differing_tokens,
)
from atomdyn_launchers.evidence.jsonfile import loads, read_whole_text
from atomdyn_launchers.evidence.readers.base import Reader, Signals


def _read_answer(signals: Signals, name: str) -> Answer | None:
    path = signals.run_dir / ANSWERS_DIR / name
    try:
        text = read_whole_text(path, "answer")
        loads(text, f"{ANSWERS_DIR}/{name}")  # strict first: a duplicate key or NaN is refused, named
        return Answer.from_json(text)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        signals.problems.append(f"{ANSWERS_DIR}/{name}: unreadable: {exc}")
        return None


def read_answers(signals: Signals) -> None:
    """``answers/``: the fixed prompt's answer at temperature 0 and, for P/D, the aggregated run's reference."""
    name = "kv.answer_differing_tokens"
    answer = _read_answer(signals, ANSWER_FILE)
    if answer is None:
        signals.absent(name, f"no {ANSWERS_DIR}/{ANSWER_FILE} (the run asked no fixed prompt)")
        return
    signals.excerpt("answers", f"{ANSWERS_DIR}/{ANSWER_FILE} ({answer.run_id}): {json.dumps(answer.tokens)}")
    reference = _read_answer(signals, REFERENCE_FILE)
    if reference is None:
        signals.absent(
            name,
            f"no aggregated reference for {answer.key}: an aggregated run of the same engine, model and "
            "build records it (e.g. invoke agg.run --engine vllm-cpu), P/D runs after it compare",
        )
        return
    signals.excerpt(
        "answers", f"{ANSWERS_DIR}/{REFERENCE_FILE} ({reference.run_id}): {json.dumps(reference.tokens)}"
    )
    if reference.key != answer.key or reference.prompt != answer.prompt:
        signals.absent(name, f"the reference is for {reference.key}, the run is {answer.key}")
        return
    signals.set(name, differing_tokens(answer.tokens, reference.tokens))
    signals.answers = (answer, reference)


READER = Reader("answers/*.json", frozenset({"kv.answer_differing_tokens"}), read_answers)
