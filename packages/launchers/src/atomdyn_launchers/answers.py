"""KV correctness as a per-run check: a fixed prompt's answer at temperature 0, through P/D, against the answer
an aggregated run of the same engine, model and build gave.

A P/D decode worker continues from KV blocks it read over NIXL; an aggregated worker computes them itself. At
temperature 0 both must produce the same tokens. Every run of an engine that expects it asks the fixed prompt
once, after its first verified response, and keeps the answer in ``answers/fixed-prompt.json``. An aggregated
run also records it as the reference under ``SHARED_DIR/references/`` (keyed by engine, model, the model's
digest and the lock digest); a P/D run copies the reference it finds into ``answers/reference.json``, and the
evidence compares the two token for token.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.contract import direct_http
from atomdyn_launchers.smoke import chat_request

FIXED_PROMPT = "Repeat after me: the decode worker reads its KV blocks from the prefill worker."
MAX_TOKENS = 24
ANSWERS_DIR = "answers"
ANSWER_FILE = "fixed-prompt.json"
REFERENCE_FILE = "reference.json"


class AnswerError(RuntimeError):
    """The fixed prompt got no usable answer; the message says what came back."""


@dataclass(frozen=True)
class Answer:
    run_id: str
    key: str  # what the answer depends on: engine, model, model digest, lock digest (reference_key)
    prompt: str
    tokens: list[str]
    text: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Answer:
        data: Any = json.loads(text)
        tokens = data["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError("tokens is not a list of strings")
        return cls(str(data["run_id"]), str(data["key"]), str(data["prompt"]), tokens, str(data["text"]))


def reference_key(engine: str, model: str, model_digest: str, lock_digest: str) -> str:
    """Names what a temperature-0 answer depends on; readable head, digest of the whole."""
    whole = "\n".join((engine, model, model_digest, lock_digest))
    return f"{engine}-{model}-{hashlib.sha256(whole.encode()).hexdigest()[:16]}"


def reference_path(shared_dir: Path, key: str) -> Path:
    return shared_dir / "references" / f"{key}.json"


def ask(base_url: str, served_model: str, timeout_s: float) -> tuple[list[str], str]:
    """The fixed prompt's answer at temperature 0: its tokens (from the logprobs) and its text."""
    body = {
        "model": served_model,
        "messages": [{"role": "user", "content": FIXED_PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "ignore_eos": True,  # always MAX_TOKENS tokens: an early stop would shorten what is compared
        "logprobs": True,
    }
    try:
        with direct_http.urlopen(chat_request(base_url, body), timeout=timeout_s) as response:
            reply = json.loads(response.read())
    except (OSError, urllib.error.URLError, json.JSONDecodeError) as exc:
        raise AnswerError(f"the fixed prompt got no answer from {base_url}: {exc}") from None
    try:
        choice = reply["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        tokens = [str(c["token"]) for c in content]
        text = str(choice["message"]["content"] or "")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise AnswerError(f"the fixed prompt's answer has no {exc}: {json.dumps(reply)[:300]}") from None
    if len(tokens) != MAX_TOKENS:
        raise AnswerError(
            f"the fixed prompt's answer has {len(tokens)} tokens with logprobs, expected {MAX_TOKENS}"
        )
    return tokens, text


def write(path: Path, answer: Answer) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, answer.to_json())


def differing_tokens(answer: list[str], reference: list[str]) -> int:
    """Positions where the two answers differ, a missing token counting as a difference."""
    shared = zip(answer, reference, strict=False)  # unequal lengths: the difference is counted below
    return sum(a != b for a, b in shared) + abs(len(answer) - len(reference))
