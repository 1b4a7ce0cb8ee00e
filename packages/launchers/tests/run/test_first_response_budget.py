"""The first-response budget: once the frontend lists every worker, a pair that answers every probe with an
error fails within the budget (named with its flag), not at the end of the readiness budget."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest

from atomdyn_launchers.run.context import LaunchFailure
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.stages.smoke import first_good


class _Broken(BaseHTTPRequestHandler):
    """Dynamo's frontend when the prefill cannot be reached: every completion is an HTTP 500."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        body = b'{"error": "Failed to generate completions"}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def frontend() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Monitor:
    """What first_good asks of the run's Monitor; wait_until is the Monitor's own."""

    wait_until = Monitor.wait_until

    def __init__(self, ctx: Any, url: str, deadline_s: float) -> None:
        self.ctx = ctx
        self.url = url
        self.deadline = time.monotonic() + deadline_s
        self.deadline_budget: str | None = None
        self.polls = 0

    def poll(self) -> None:  # the real one waits on etcd for up to a second
        self.polls += 1
        time.sleep(0.05)

    def frontend_url(self) -> str:
        return self.url

    def served_model_name(self) -> str:
        return "model"

    def event(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no response may be verified")


def _ctx(budget_s: float | None) -> Any:
    options = SimpleNamespace(kind="disagg", request_timeout_s=5.0)
    return SimpleNamespace(options=options, first_response_timeout_s=budget_s, ready_timeout_s=3600.0)


def test_a_healthy_pair_that_cannot_serve_fails_within_the_first_response_budget(frontend: str) -> None:
    # Without the budget this waits out the 20 s left of the readiness budget and says so.
    monitor = _Monitor(_ctx(budget_s=1.0), frontend, deadline_s=20.0)
    with pytest.raises(LaunchFailure) as failure:
        first_good(monitor.ctx, monitor)  # type: ignore[arg-type]
    message = str(failure.value)
    assert message.startswith("timed out 1 s after the frontend listed every worker"), message
    assert "--first-response-timeout" in message and "waiting for a verified response" in message, message
    assert "500" in message, message  # what the last probe got


def test_without_a_budget_the_readiness_deadline_stands(frontend: str) -> None:
    monitor = _Monitor(_ctx(budget_s=None), frontend, deadline_s=0.5)
    with pytest.raises(LaunchFailure) as failure:
        first_good(monitor.ctx, monitor)  # type: ignore[arg-type]
    assert str(failure.value).startswith("timed out after 3600 s waiting for a verified response"), (
        failure.value
    )


def test_a_budget_longer_than_what_is_left_of_the_readiness_budget_changes_nothing(frontend: str) -> None:
    monitor = _Monitor(_ctx(budget_s=600.0), frontend, deadline_s=0.5)
    with pytest.raises(LaunchFailure) as failure:
        first_good(monitor.ctx, monitor)  # type: ignore[arg-type]
    assert "--first-response-timeout" not in str(failure.value)
