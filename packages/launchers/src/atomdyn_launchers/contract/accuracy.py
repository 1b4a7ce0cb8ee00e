"""The accuracy check: the files it leaves and its per-item results (every task's), and the ``gsm8k`` task's rules:
GSM8K asked through the frontend, scored as lm-eval scores it. The tasks are
:mod:`atomdyn_launchers.profiles.accuracy_tasks`'s rows; ``capitals``' rules are
:mod:`atomdyn_launchers.contract.accuracy_capitals`.

The prompt, the stop sequences and the scoring are lm-eval's ``gsm8k`` task at lm-eval 0.4.9.1
(``lm_eval/tasks/gsm8k/gsm8k.yaml`` in ``lm_eval-0.4.9.1-py3-none-any.whl``, sha256
315e5a3af7a600c8e4240e059e132376d6582538e1aa6484ccba647f6ea3fae9), restated here in the standard library:

- each item is ``doc_to_text`` ``"Question: {{question}}\\nAnswer:"``; a few-shot example is that text, the
  target delimiter ``" "`` and its ``answer``, the examples joined by the few-shot delimiter ``"\\n\\n"``;
- generation is greedy (``temperature: 0.0``) until ``"Question:"``, ``"</s>"`` or ``"<|im_end|>"``;
- two filters extract the answer: ``strict-match``, the regex ``#### (\\-?[0-9\\.\\,]+)`` (the first match's
  group), and ``flexible-extract``, the regex ``(-?[$0-9.,]{2,})|(-?[0-9]+)`` with ``group_select: -1`` (the
  last match, its first non-empty group), each stripped, ``[invalid]`` where nothing matches
  (``RegexFilter`` in ``lm_eval/filters/extraction.py``);
- ``exact_match`` removes ``regexes_to_ignore`` (``","``, ``"\\$"``, ``"(?s).*#### "``, ``"\\.$"``, in that order)
  from the extracted answer and from the item's own ``answer``, lowercases both (``ignore_case: true``) and
  compares them (``exact_match_hf_evaluate`` in ``lm_eval/api/metrics.py``).

The tests hold responses and what lm-eval's own code extracted and scored from them. What differs from lm-eval:
its few-shot examples come from GSM8K's train split, which the pinned data does not carry; here they are the
test split's last ``few_shot`` items, never among the scored ones (``split``). The prompt is sent as one user
message of a chat completion, as lm-eval's ``local-chat-completions`` model sends it with
``--apply_chat_template`` (without ``--fewshot_as_multiturn``).

A run that asks it writes ``accuracy/items.jsonl`` (one item a line: its index, the response, each filter's
answers and verdicts, or the error that left it unanswered) and ``accuracy/accuracy.json`` (the settings, the
data's provenance, the scores, the threshold). An aggregated run also records its per-item answers as the
reference under ``SHARED_DIR/references/`` (keyed like the fixed prompt's, plus the task's settings and the
data's sha256); a P/D run copies the one it finds into ``accuracy/aggregated.json``, and the evidence compares
the two on the same items.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

TASK = "gsm8k"
LM_EVAL_VERSION = "0.4.9.1"
ACCURACY_DIR = "accuracy"
ITEMS_FILE = "items.jsonl"
SUMMARY_FILE = "accuracy.json"
AGGREGATED_FILE = "aggregated.json"

STOP: tuple[str, ...] = ("Question:", "</s>", "<|im_end|>")
STRICT = "strict-match"
FLEXIBLE = "flexible-extract"
FILTERS = (STRICT, FLEXIBLE)
# The filter the threshold is judged on: the one that does not depend on the model copying "#### " from the
# examples (both are recorded).
GATED_FILTER = FLEXIBLE
FALLBACK = "[invalid]"
_STRICT_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE_RE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")


def _regex_filter(response: str, pattern: re.Pattern[str], group_select: int) -> str:
    """lm-eval's ``RegexFilter.apply`` on one response."""
    found = pattern.findall(response)
    if not found:
        return FALLBACK
    match = found[group_select]
    if isinstance(match, tuple):
        kept = [m for m in match if m]
        match = kept[0] if kept else FALLBACK
    return str(match).strip()


def extract(response: str, name: str) -> str:
    """The answer filter ``name`` (``strict-match`` or ``flexible-extract``) takes out of ``response``."""
    if name == STRICT:
        return _regex_filter(response, _STRICT_RE, 0)
    if name == FLEXIBLE:
        return _regex_filter(response, _FLEXIBLE_RE, -1)
    raise ValueError(f"unknown filter {name!r} (known: {', '.join(FILTERS)})")


def _normalised(text: str) -> str:
    for pattern in _IGNORE:
        text = re.sub(pattern, "", text)
    return text.lower()


def exact_match(extracted: str, answer: str) -> bool:
    """lm-eval's ``exact_match`` of an extracted answer against the item's own ``answer`` (its worked solution)."""
    return _normalised(extracted) == _normalised(answer)


def target(answer: str) -> str:
    """The number an item's answer ends with, as exact_match compares it."""
    return _normalised(answer)


def prompt(question: str, shots: Iterable[tuple[str, str]] = ()) -> str:
    """lm-eval's context for one item after its few-shot examples (``(question, answer)`` pairs)."""
    examples = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in shots)
    return f"{examples}Question: {question}\nAnswer:"


def split(total: int, items: int, few_shot: int) -> tuple[range, range]:
    """The scored items (the first ``items``) and the few-shot examples (the last ``few_shot``), disjoint."""
    if items < 1 or few_shot < 0:
        raise ValueError(f"items {items} and few_shot {few_shot}: at least 1 item, no negative shots")
    if items + few_shot > total:
        raise ValueError(
            f"{items} items and {few_shot} few-shot examples need {items + few_shot} of the data's {total}"
        )
    return range(items), range(total - few_shot, total)


@dataclass(frozen=True)
class ItemResult:
    index: int
    response: str | None  # None: unanswered (``error`` says why)
    extracted: dict[str, str]  # filter -> its answer
    correct: dict[str, bool]  # filter -> exact_match
    target: str
    error: str = ""
    completion_tokens: int = 0

    @property
    def answered(self) -> bool:
        return self.response is not None and not self.error

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ItemResult:
        response = raw["response"]
        extracted, correct = raw["extracted"], raw["correct"]
        if not (response is None or isinstance(response, str)):
            raise ValueError("response is not a string or null")
        if not (isinstance(extracted, dict) and all(isinstance(v, str) for v in extracted.values())):
            raise ValueError("extracted is not a mapping of strings")
        if not (isinstance(correct, dict) and all(isinstance(v, bool) for v in correct.values())):
            raise ValueError("correct is not a mapping of booleans")
        index = raw["index"]
        if not isinstance(index, int) or isinstance(index, bool):
            raise ValueError("index is not an integer")
        return cls(index, response, dict(extracted), dict(correct), str(raw["target"]), str(raw.get("error", "")),
                   int(raw.get("completion_tokens", 0)))  # fmt: skip


def score(
    response: str | None, answer: str, index: int, error: str = "", completion_tokens: int = 0
) -> ItemResult:
    """One item's response scored by both filters (an unanswered item is wrong by both)."""
    if response is None or error:
        return ItemResult(index, response, {f: FALLBACK for f in FILTERS}, {f: False for f in FILTERS},
                          target(answer), error or "no response", completion_tokens)  # fmt: skip
    extracted = {f: extract(response, f) for f in FILTERS}
    correct = {f: exact_match(extracted[f], answer) for f in FILTERS}
    return ItemResult(index, response, extracted, correct, target(answer), "", completion_tokens)


def accuracy(results: Sequence[ItemResult], name: str = GATED_FILTER) -> float:
    """The share of ``results`` correct by filter ``name`` (0.0 for none)."""
    if not results:
        return 0.0
    return sum(1 for r in results if r.correct.get(name, False)) / len(results)


def reference_key(fixed_prompt_key: str, settings: Mapping[str, Any], data_sha256: str) -> str:
    """The aggregated answers' key: what the fixed prompt's depends on, the task's settings and the data."""
    whole = json.dumps(
        {"key": fixed_prompt_key, "settings": dict(settings), "data": data_sha256}, sort_keys=True
    )
    return f"accuracy-{fixed_prompt_key}-{hashlib.sha256(whole.encode()).hexdigest()[:12]}"


def items_text(results: Iterable[ItemResult]) -> str:
    return "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in results)


def parse_items(text: str) -> list[ItemResult]:
    return [ItemResult.from_json(json.loads(line)) for line in text.splitlines() if line.strip()]
