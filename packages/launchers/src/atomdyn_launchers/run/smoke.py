"""Smoke traffic through the OpenAI-compatible chat completions API, every response checked.

Requests come in prompt groups that share a long prefix, so prefix caching and KV-aware routing are
exercised (``kv_hit_rate`` rises within a group). Each request asks Dynamo for its routing evidence
(``nvext.extra_fields``: worker ids and timing); in a disaggregated layout a response only counts when
its prefill and decode worker ids are present and differ.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from atomdyn_launchers.contract import direct_http
from atomdyn_launchers.run.daemon_threads import map_in_daemons

ABORTED = "run aborted"


@dataclass(frozen=True)
class SmokeRequest:
    index: int
    prompt_group: int
    prompt: str
    max_tokens: int


@dataclass
class SmokeResult:
    index: int
    prompt_group: int
    status: int | None
    ok: bool
    latency_s: float
    content_chars: int
    completion_tokens: int | None
    prompt_tokens: int | None
    prefill_worker_id: int | None
    decode_worker_id: int | None
    worker_id: int | None
    kv_hit_rate: float | None
    error: str | None

    def record(self) -> dict[str, Any]:
        return asdict(self)


def _prefix_text(group: int, words: int) -> str:
    rng = random.Random(1000 + group)
    vocab = [
        "cluster",
        "prefill",
        "decode",
        "node",
        "cache",
        "block",
        "token",
        "router",
        "worker",
        "etcd",
        "lease",
        "transfer",
        "memory",
        "network",
        "queue",
        "batch",
        "model",
        "layer",
        "tensor",
        "stream",
    ]
    return " ".join(rng.choice(vocab) for _ in range(words))


def build_requests(
    count: int, groups: int = 4, prefix_words: int = 160, max_tokens: int = 32
) -> list[SmokeRequest]:
    """``count`` requests in ``groups`` prompt groups; members of a group share a ``prefix_words`` prefix."""
    if count < 1:
        raise ValueError("the smoke test needs at least one request")
    # At least two requests per group, so every run repeats a prefix.
    groups = max(1, min(groups, count // 2))
    prefixes = [_prefix_text(g, prefix_words) for g in range(groups)]
    return [
        SmokeRequest(
            index=i,
            prompt_group=i % groups,
            prompt=f"{prefixes[i % groups]}\nQuestion {i}: summarise the text above in one sentence.",
            max_tokens=max_tokens,
        )
        for i in range(count)
    ]


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def check_response(status: int, body: Any, require_pd: bool) -> tuple[dict[str, Any], str | None]:
    """Extract the evidence fields and return (fields, problem or None)."""
    fields: dict[str, Any] = {
        "content_chars": 0,
        "completion_tokens": None,
        "prompt_tokens": None,
        "prefill_worker_id": None,
        "decode_worker_id": None,
        "worker_id": None,
        "kv_hit_rate": None,
    }
    if not isinstance(body, dict):
        return fields, f"HTTP {status}: response is not a JSON object"
    if status != 200:
        message = body.get("message") or body.get("error") or body
        return fields, f"HTTP {status}: {str(message)[:300]}"
    choices = body.get("choices") or []
    content = ""
    if choices and isinstance(choices[0], dict):
        content = str((choices[0].get("message") or {}).get("content") or "")
    fields["content_chars"] = len(content)
    usage = body.get("usage") or {}
    fields["completion_tokens"] = _int_or_none(usage.get("completion_tokens"))
    fields["prompt_tokens"] = _int_or_none(usage.get("prompt_tokens"))
    nvext = body.get("nvext") or {}
    ids = nvext.get("worker_id") or {}
    fields["prefill_worker_id"] = _int_or_none(ids.get("prefill_worker_id"))
    fields["decode_worker_id"] = _int_or_none(ids.get("decode_worker_id"))
    decode_id = fields["decode_worker_id"]
    fields["worker_id"] = decode_id if decode_id is not None else fields["prefill_worker_id"]
    rate = (nvext.get("timing") or {}).get("kv_hit_rate")
    fields["kv_hit_rate"] = float(rate) if isinstance(rate, (int, float)) else None
    if not content:
        return fields, "empty content"
    if not fields["completion_tokens"] or not fields["prompt_tokens"]:
        return fields, f"usage lacks token counts: {usage}"
    if fields["worker_id"] is None:
        return fields, "no worker id in nvext (routing evidence missing)"
    if require_pd:
        p, d = fields["prefill_worker_id"], fields["decode_worker_id"]
        if p is None or d is None:
            return fields, "disaggregated response lacks a prefill or decode worker id"
        if p == d:
            return fields, f"prefill and decode worker ids are the same ({p}): not disaggregated"
    return fields, None


def chat_request(base_url: str, body: dict[str, Any]) -> urllib.request.Request:
    """A POST of ``body`` (JSON) to the OpenAI-compatible chat completions route under ``base_url``."""
    return urllib.request.Request(
        f"{base_url.rstrip('/')}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )


class SmokeClient:
    """A minimal OpenAI-compatible chat completions client (non-streaming)."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s

    def payload(self, request: SmokeRequest) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": request.prompt}],
            "max_tokens": request.max_tokens,
            "temperature": 0.0,
            # Top level, not inside nvext: generate max_tokens so content is never empty by an early EOS.
            "ignore_eos": True,
            "nvext": {"extra_fields": ["worker_id", "timing"]},
        }

    def send(self, request: SmokeRequest, require_pd: bool) -> SmokeResult:
        http_request = chat_request(self.base_url, self.payload(request))
        started = time.monotonic()
        status: int | None = None
        body: Any = None
        error: str | None = None
        try:
            with direct_http.urlopen(http_request, timeout=self.timeout_s) as response:
                status = response.status
                raw = response.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            raw = exc.read()
        except OSError as exc:
            raw = b""
            error = f"request failed: {exc}"
        latency = time.monotonic() - started
        if error is None:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        fields, problem = check_response(status or 0, body, require_pd) if error is None else ({}, error)
        defaults = dict.fromkeys(
            (
                "completion_tokens",
                "prompt_tokens",
                "prefill_worker_id",
                "decode_worker_id",
                "worker_id",
                "kv_hit_rate",
            )
        )
        return SmokeResult(
            index=request.index,
            prompt_group=request.prompt_group,
            status=status,
            ok=problem is None,
            latency_s=round(latency, 6),
            content_chars=int(fields.get("content_chars", 0)),
            error=problem,
            **{k: fields.get(k, v) for k, v in defaults.items()},
        )


def run_smoke(
    client: SmokeClient,
    requests: Sequence[SmokeRequest],
    *,
    concurrency: int,
    require_pd: bool,
    on_result: Callable[[SmokeResult], None],
    stop: threading.Event | None = None,
) -> list[SmokeResult]:
    """Send ``requests`` with at most ``concurrency`` in flight; ``on_result`` sees each result as it lands.

    One request per prompt group is sent first; the rest follow once those have been answered.

    Setting ``stop`` makes requests not yet sent come back as failed with error "run aborted".
    """
    stop = stop or threading.Event()

    def one(request: SmokeRequest) -> SmokeResult:
        if stop.is_set():
            result = SmokeResult(
                request.index,
                request.prompt_group,
                None,
                False,
                0.0,
                0,
                None,
                None,
                None,
                None,
                None,
                None,
                ABORTED,
            )
        else:
            result = client.send(request, require_pd)
        on_result(result)
        return result

    # The first request of each group goes first, so the repeats that follow can hit the cached prefix
    # even when every request would otherwise be in flight at once.
    first_of_group: dict[int, SmokeRequest] = {}
    for request in requests:
        first_of_group.setdefault(request.prompt_group, request)
    leaders = list(first_of_group.values())
    leader_ids = {r.index for r in leaders}
    rest = [r for r in requests if r.index not in leader_ids]
    # Daemon threads (run/daemon_threads.py): a request in flight when the run stops never holds up the exit.
    results = map_in_daemons(one, leaders, concurrency, "smoke")
    return results + map_in_daemons(one, rest, concurrency, "smoke")
