"""``requests.jsonl``: the smoke requests, one a line (answers, tokens, the workers that served them, the
router's KV hit rate of repeated prompts)."""

from __future__ import annotations

from collections import deque
from typing import Any

from atomdyn_launchers.evidence.readers.base import EXCERPT_HEAD, Reader, Signals, as_number, jsonl

_MAX_LATENCIES = 100_000
_MAX_INDEXES = 1_000_000
# What a request row may say and make sense (issue 36, item 5): a latency is seconds, non-negative and below a
# week; a token count is a non-negative integer below 2**24 (16 M: above any model's context).
MAX_LATENCY_S = 7 * 24 * 3600.0
MAX_TOKENS = 1 << 24
SENSE = (
    "requests.bad_indexes",
    "requests.bad_latencies",
    "requests.implausible_tokens",
    "requests.corrupt_lines",
)
_NAMES = (
    "requests.total",
    "requests.ok",
    "requests.failed",
    "requests.empty",
    "requests.completion_tokens",
    "requests.pd_split",
    "requests.pd_not_split",
    "requests.repeat_hit_max",
    "requests.latency_p50_s",
)


def read_requests(signals: Signals) -> None:
    path = signals.run_dir / "requests.jsonl"
    if not path.exists():
        for name in _NAMES:
            signals.absent(name, "requests.jsonl is missing")
        for name in SENSE:
            signals.set(name, 0)  # nothing recorded, nothing senseless: the request gates fail it
        return
    total = ok = failed = empty = tokens = split = not_split = repeats = 0
    tokens_seen = False
    hit_max: float | None = None
    groups: set[Any] = set()
    latencies: list[float] = []
    tail: deque[str] = deque(maxlen=2)
    indexes: set[int] = set()
    nonsense = dict.fromkeys(SENSE, 0)

    def senseless(name: str, line: str, why: str) -> None:
        nonsense[name] += 1
        if nonsense[name] <= EXCERPT_HEAD:
            signals.excerpt("requests.nonsense", f"{line} <- {why}")

    for number, text, record in jsonl(path, signals):
        total += 1
        line = f"requests.jsonl:{number}: {text}"
        index: Any = record.get("index")
        if not _count(index, _MAX_INDEXES):
            senseless("requests.bad_indexes", line, "index is not a request number")
        elif index in indexes:
            senseless("requests.bad_indexes", line, f"index {index} was recorded before")
        elif len(indexes) < _MAX_INDEXES:
            indexes.add(index)
        latency = record.get("latency_s")
        if latency is not None and not (as_number(latency) is not None and 0 <= latency <= MAX_LATENCY_S):
            senseless("requests.bad_latencies", line, "latency_s is not seconds between 0 and a week")
        for key in ("completion_tokens", "prompt_tokens"):
            if record.get(key) is not None and not _count(record[key], MAX_TOKENS):
                senseless(
                    "requests.implausible_tokens", line, f"{key} is not a count of tokens below {MAX_TOKENS}"
                )
        good = record.get("ok") is True and record.get("status") == 200
        if total <= EXCERPT_HEAD:
            signals.excerpt("requests", line)
        else:
            tail.append(line)
        if not good:
            failed += 1
            if failed <= EXCERPT_HEAD:
                signals.excerpt("requests.failed", line)
        else:
            ok += 1
            produced = as_number(record.get("completion_tokens"))
            if produced is not None:
                tokens_seen = True
                tokens += int(produced)
            if (as_number(record.get("content_chars")) or 0) <= 0 or produced == 0:
                empty += 1
                signals.excerpt("requests.empty", line)
            latency = as_number(record.get("latency_s"))
            if latency is not None and len(latencies) < _MAX_LATENCIES:
                latencies.append(latency)
            p, d = record.get("prefill_worker_id"), record.get("decode_worker_id")
            if p is not None and d is not None and p != d:
                split += 1
                if split <= 2:
                    signals.excerpt("requests.split", line)
            else:
                not_split += 1
                if not_split <= EXCERPT_HEAD:
                    signals.excerpt("requests.pd", line)
        group = record.get("prompt_group")
        if group is not None:
            if group in groups:
                repeats += 1
                rate = as_number(record.get("kv_hit_rate"))
                if rate is not None:
                    hit_max = rate if hit_max is None else max(hit_max, rate)
                if repeats <= EXCERPT_HEAD:
                    signals.excerpt("requests.repeats", line)
            elif len(groups) < 10_000:
                groups.add(group)
    if tail:
        signals.excerpts.setdefault("requests", []).extend(tail)
    nonsense["requests.corrupt_lines"] = signals.corrupt_count.get(path.name, 0)
    for shown in signals.corrupt.get(path.name, []):
        signals.excerpt("requests.nonsense", shown)
    for name, count in nonsense.items():
        signals.set(name, count)
    for name, value in (
        ("requests.total", total),
        ("requests.ok", ok),
        ("requests.failed", failed),
        ("requests.empty", empty),
        ("requests.pd_split", split),
        ("requests.pd_not_split", not_split),
    ):
        signals.set(name, value)
    if tokens_seen:
        signals.set("requests.completion_tokens", tokens)
    else:
        signals.absent("requests.completion_tokens", "no successful request reported completion_tokens")
    if hit_max is not None:
        signals.set("requests.repeat_hit_max", hit_max)
    else:
        why = "no prompt group was repeated" if not repeats else "repeated prompts carry no kv_hit_rate"
        signals.absent("requests.repeat_hit_max", why)
    if latencies:
        latencies.sort()
        signals.set("requests.latency_p50_s", round(latencies[len(latencies) // 2], 4))
    else:
        signals.absent("requests.latency_p50_s", "no successful request with a latency")


def _count(value: Any, below: int) -> bool:
    """A non-negative integer below ``below`` (a bool is no count)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < below


READER = Reader("requests.jsonl", frozenset(_NAMES) | frozenset(SENSE), read_requests)
