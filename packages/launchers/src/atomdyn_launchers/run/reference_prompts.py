"""Asking the independent reference's prompts (:mod:`atomdyn_launchers.contract.reference_answers` says what
they are and which files they leave): for a model whose directory holds the reference its build computed."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.contract import direct_http
from atomdyn_launchers.contract.reference_answers import (
    INDEPENDENT_REFERENCE_FILE,
    REFERENCE_PROMPTS_FILE,
    PromptAnswer,
    PromptAnswers,
)
from atomdyn_launchers.run.answers import AnswerError
from atomdyn_launchers.run.smoke import chat_request

# In the model's directory, written by its build (profiles/smollm2.py).
MODEL_REFERENCE_FILE = "reference.json"


def model_reference(model_dir: Path) -> dict[str, Any] | None:
    """The reference the model's build recorded, or None for a model without one."""
    path = model_dir / MODEL_REFERENCE_FILE
    if not path.is_file():
        return None
    data: Any = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("answers"), list):
        raise AnswerError(f"{path} holds no reference answers")
    return data


def ask_prompt(
    base_url: str, served_model: str, messages: list[dict[str, str]], max_tokens: int, timeout_s: float
) -> PromptAnswer:
    """One reference prompt at temperature 0, exactly ``max_tokens`` tokens (the reference's count, which ends
    before any special token; ``ignore_eos`` so that an early stop shows as a difference)."""
    body = {
        "model": served_model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "logprobs": True,
    }
    try:
        with direct_http.urlopen(chat_request(base_url, body), timeout=timeout_s) as response:
            reply = json.loads(response.read())
        choice = reply["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        tokens = [str(c["token"]) for c in content]
        text = str(choice["message"]["content"] or "")
    except (OSError, urllib.error.URLError, json.JSONDecodeError) as exc:
        raise AnswerError(f"a reference prompt got no answer from {base_url}: {exc}") from None
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise AnswerError(f"a reference prompt's answer has no {exc}") from None
    return PromptAnswer("", tokens, text)


def ask_reference_prompts(
    base_url: str, served_model: str, reference: dict[str, Any], run_id: str, timeout_s: float
) -> PromptAnswers:
    answers = []
    for item in reference["answers"]:
        max_tokens = int(item.get("max_tokens", reference["max_tokens"]))
        got = ask_prompt(base_url, served_model, list(item["messages"]), max_tokens, timeout_s)
        answers.append(PromptAnswer(str(item["name"]), got.tokens, got.text))
    return PromptAnswers(run_id, answers)


def record(answers_dir: Path, reference: dict[str, Any], model_digest: str, answers: PromptAnswers) -> None:
    """Both files into the run's ``answers/``: the reference (with the model's digest) and the run's answers."""
    answers_dir.mkdir(parents=True, exist_ok=True)
    kept = {**reference, "model_digest": model_digest}
    atomic_write_text(
        answers_dir / INDEPENDENT_REFERENCE_FILE, json.dumps(kept, indent=1, ensure_ascii=False) + "\n"
    )
    atomic_write_text(answers_dir / REFERENCE_PROMPTS_FILE, answers.to_json())
