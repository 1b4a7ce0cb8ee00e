"""KV correctness as a per-run check, the files it leaves: a fixed prompt's answer at temperature 0, through P/D, against the answer
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text

FIXED_PROMPT = "Repeat after me: the decode worker reads its KV blocks from the prefill worker."
MAX_TOKENS = 24
ANSWERS_DIR = "answers"
ANSWER_FILE = "fixed-prompt.json"
REFERENCE_FILE = "reference.json"


@dataclass(frozen=True)
class Answer:
    run_id: str
    key: str  # what the answer depends on: engine, model, model digest, lock digest (reference_key)
    prompt: str
    tokens: list[str]
    text: str
    # Each token's log probability as the engine reported it (an answer recorded before they were kept has none).
    logprobs: list[float] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Answer:
        data: Any = json.loads(text)
        tokens = data["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError("tokens is not a list of strings")
        logprobs = data.get("logprobs", [])
        if not isinstance(logprobs, list) or not all(isinstance(x, (int, float)) for x in logprobs):
            raise ValueError("logprobs is not a list of numbers")
        return cls(
            str(data["run_id"]), str(data["key"]), str(data["prompt"]), tokens, str(data["text"]),
            [float(x) for x in logprobs],
        )  # fmt: skip


def reference_key(engine: str, model: str, model_digest: str, lock_digest: str) -> str:
    """Names what a temperature-0 answer depends on; readable head, digest of the whole."""
    whole = "\n".join((engine, model, model_digest, lock_digest))
    return f"{engine}-{model}-{hashlib.sha256(whole.encode()).hexdigest()[:16]}"


def reference_path(shared_dir: Path, key: str) -> Path:
    return shared_dir / "references" / f"{key}.json"


def write_answer(path: Path, answer: Answer) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, answer.to_json())


def differing_tokens(answer: list[str], reference: list[str], prefix: int | None = None) -> int:
    """Positions where the two answers differ, a missing token counting as a difference; with ``prefix``, among
    the first ``prefix`` positions only."""
    if prefix is not None:
        answer, reference = answer[:prefix], reference[:prefix]
    shared = zip(answer, reference, strict=False)  # unequal lengths: the difference is counted below
    return sum(a != b for a, b in shared) + abs(len(answer) - len(reference))


def logprob_max_delta(answer: Answer, reference: Answer, prefix: int | None = None) -> float | None:
    """The largest difference of log probability between the two answers' tokens at the positions where both
    chose the same token (within ``prefix``); None when either answer kept no log probabilities."""
    n = min(len(answer.tokens), len(reference.tokens), len(answer.logprobs), len(reference.logprobs))
    if prefix is not None:
        n = min(n, prefix)
    deltas = [
        abs(answer.logprobs[i] - reference.logprobs[i])
        for i in range(n)
        if answer.tokens[i] == reference.tokens[i]
    ]
    return max(deltas) if deltas else None
