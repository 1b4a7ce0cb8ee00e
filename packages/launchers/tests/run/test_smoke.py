"""Response checks of the smoke client, on response bodies shaped like Dynamo 1.3's (captured from a run)."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from typing import Any

import pytest

from atomdyn_launchers.run.smoke import SmokeClient, build_requests, check_response

GOOD: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {"index": 0, "message": {"content": "ogu cougu tuli", "role": "assistant"}, "finish_reason": "length"}
    ],
    "usage": {"prompt_tokens": 122, "completion_tokens": 24, "total_tokens": 146},
    "nvext": {
        "worker_id": {
            "prefill_worker_id": 7587899247928085002,
            "prefill_dp_rank": 0,
            "decode_worker_id": 7587899247928085011,
            "decode_dp_rank": 0,
        },
        "timing": {"ttft_ms": 7.4, "total_time_ms": 68.2, "kv_hit_rate": 0.5},
    },
}


def _with(path: list[str], value: object) -> dict[str, Any]:
    body = copy.deepcopy(GOOD)
    node: Any = body
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[path[-1]] = value
    return body


def test_a_disaggregated_response_yields_its_evidence() -> None:
    fields, problem = check_response(200, GOOD, require_pd=True)
    assert problem is None
    assert fields["prefill_worker_id"] == 7587899247928085002
    assert fields["decode_worker_id"] == fields["worker_id"] == 7587899247928085011
    assert fields["kv_hit_rate"] == 0.5 and fields["content_chars"] == len("ogu cougu tuli")
    assert fields["prompt_tokens"] == 122 and fields["completion_tokens"] == 24


@pytest.mark.parametrize(
    ("status", "body", "require_pd", "message"),
    [
        (
            200,
            _with(["nvext", "worker_id", "decode_worker_id"], 7587899247928085002),
            True,
            "not disaggregated",
        ),
        (
            200,
            _with(["nvext", "worker_id"], {"decode_worker_id": 5}),
            True,
            "lacks a prefill or decode worker id",
        ),
        (200, _with(["choices", "0", "message", "content"], ""), False, "empty content"),
        (200, _with(["usage"], {}), False, "usage lacks token counts"),
        (200, _with(["nvext"], {}), False, "no worker id"),
        (503, {"message": "Model is not ready to serve requests yet"}, False, "HTTP 503: Model is not ready"),
        (200, ["not", "an", "object"], False, "not a JSON object"),
    ],
)
def test_bad_responses_are_caught(status: int, body: Any, require_pd: bool, message: str) -> None:
    _, problem = check_response(status, body, require_pd)
    assert problem is not None and message in problem


def test_aggregated_response_with_one_worker_passes_without_pd() -> None:
    same = _with(["nvext", "worker_id", "decode_worker_id"], 7587899247928085002)
    assert check_response(200, same, require_pd=False)[1] is None


def test_requests_share_prefixes_within_groups() -> None:
    requests = build_requests(8, groups=3, prefix_words=50, max_tokens=16)
    assert [r.index for r in requests] == list(range(8))
    by_group: dict[int, list[str]] = {}
    for r in requests:
        by_group.setdefault(r.prompt_group, []).append(r.prompt)
    assert set(by_group) == {0, 1, 2}
    for prompts in by_group.values():
        prefixes = {p.split("\n")[0] for p in prompts}
        assert len(prefixes) == 1 and len(next(iter(prefixes)).split()) == 50
        assert len(set(prompts)) == len(prompts)  # the suffix differs
    assert len({prompts[0].split("\n")[0] for prompts in by_group.values()}) == 3
    with pytest.raises(ValueError, match="at least one request"):
        build_requests(0)
    # Small runs still repeat every prefix (fewer groups, never a group of one).
    assert [r.prompt_group for r in build_requests(4)] == [0, 1, 0, 1]
    assert [r.prompt_group for r in build_requests(1)] == [0]


def test_payload_asks_for_routing_evidence_and_ignore_eos_at_top_level() -> None:
    payload = SmokeClient("http://h:8000/", "m").payload(build_requests(1)[0])
    assert payload["nvext"] == {"extra_fields": ["worker_id", "timing"]}
    assert payload["ignore_eos"] is True and "ignore_eos" not in payload["nvext"]


def test_unreachable_frontend_is_a_failed_result_not_an_exception() -> None:
    result = SmokeClient("http://127.0.0.1:9", "m", timeout_s=2).send(build_requests(1)[0], require_pd=True)
    assert result.ok is False and result.status is None
    assert result.error is not None and result.error.startswith("request failed")


# A launcher whose run stopped while a smoke request waited for its answer: the frontend took the connection and
# never answers. The process must exit once its main thread ends, not when the request times out.
_STOPPED_WHILE_IN_FLIGHT = """
import socket, sys, threading
from atomdyn_launchers.run.smoke import SmokeClient, build_requests, run_smoke
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
server.settimeout(30)
client = SmokeClient(f"http://127.0.0.1:{server.getsockname()[1]}", "m", timeout_s=120)
stop = threading.Event()
threading.Thread(
    target=run_smoke, args=(client, build_requests(4)),
    kwargs={"concurrency": 1, "require_pd": False, "on_result": lambda r: None, "stop": stop}, daemon=True,
).start()
conn, _ = server.accept()  # the first request is in flight
stop.set()
print("main thread done", flush=True)
"""


def test_a_request_in_flight_when_the_run_stops_does_not_hold_up_the_exit() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _STOPPED_WHILE_IN_FLIGHT], stdout=subprocess.PIPE, text=True
    )
    started = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the process had not exited 30 s after its main thread ended: a smoke request held it")
    assert proc.returncode == 0 and out == "main thread done\n"
    assert time.monotonic() - started < 30
