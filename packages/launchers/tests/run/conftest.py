"""Fixtures of the run tests. ``serve_chat``: fake OpenAI-compatible chat frontends (http.server) for the accuracy
check's tests; each test module says what its frontend answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Reply = Callable[
    [dict[str, Any]], "str | None"
]  # a request's body -> the answer's content; None: an HTTP 500


@pytest.fixture
def serve_chat() -> Iterator[Callable[[Reply], str]]:
    """``serve_chat(reply)`` starts a frontend on 127.0.0.1 and returns its URL: it answers each POST with
    ``reply(body)`` as the message's content (and 9 completion tokens), or an HTTP 500 where that is None. Every
    frontend the test started is shut down after it."""
    servers: list[ThreadingHTTPServer] = []

    def serve(reply: Reply) -> str:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                content = reply(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                if content is None:
                    self.send_response(500)
                    self.end_headers()
                    return
                data = json.dumps(
                    {"choices": [{"message": {"content": content}}], "usage": {"completion_tokens": 9}}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()
