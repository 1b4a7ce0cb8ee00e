"""What "ready" means, as the in-job helper and the launcher both read it: the registration a role publishes in
etcd once its processes are healthy, how Dynamo's ``/health`` answers are read, and the one polling loop with a
deadline (:func:`wait_until`)."""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from atomdyn_launchers.contract import direct_http


class ReadinessError(RuntimeError):
    """Something awaited did not happen; the message names what was awaited and what is missing."""


@dataclass(frozen=True)
class Registration:
    """What a role publishes once its processes are healthy."""

    role: str
    job_id: str
    node: str
    host: str
    ports: Mapping[str, int]
    pids: Mapping[str, int]
    registered_at: float

    def to_json(self) -> str:
        return json.dumps(
            {
                "role": self.role,
                "job_id": self.job_id,
                "node": self.node,
                "host": self.host,
                "ports": dict(self.ports),
                "pids": dict(self.pids),
                "registered_at": self.registered_at,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Registration:
        data = json.loads(text)
        return cls(
            role=str(data["role"]),
            job_id=str(data["job_id"]),
            node=str(data["node"]),
            host=str(data["host"]),
            ports={str(k): int(v) for k, v in data["ports"].items()},
            pids={str(k): int(v) for k, v in data["pids"].items()},
            registered_at=float(data["registered_at"]),
        )


def http_json(url: str, timeout_s: float = 2.0) -> tuple[int, Any]:
    """GET ``url``; return (status, parsed JSON or None). Raises OSError when nothing answers."""
    try:
        with direct_http.urlopen(url, timeout=timeout_s) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def worker_ready(body: Any) -> bool:
    """A Dynamo worker's system port /health: ready once its generate endpoint is (HTTP may stay 503)."""
    return (
        isinstance(body, dict)
        and isinstance(body.get("endpoints"), dict)
        and (body["endpoints"].get("generate") == "ready")
    )


def frontend_instances(body: Any) -> dict[str, int]:
    """Count the ``generate`` instances per component in the frontend's /health answer."""
    counts: dict[str, int] = {}
    if isinstance(body, dict):
        for inst in body.get("instances", []) or []:
            if isinstance(inst, dict) and inst.get("endpoint") == "generate":
                component = str(inst.get("component"))
                counts[component] = counts.get(component, 0) + 1
    return counts


def frontend_ready(body: Any) -> bool:
    return isinstance(body, dict) and body.get("status") == "healthy"


def wait_until(what: str, check: Callable[[], str | None], deadline: float, interval_s: float = 0.1) -> None:
    """Call ``check`` until it returns None (done) or the deadline passes.

    ``check`` returns a short description of what is still missing; the timeout error carries it.
    """
    missing = "not checked yet"
    while True:
        missing_now = check()
        if missing_now is None:
            return
        missing = missing_now
        if time.monotonic() >= deadline:
            raise ReadinessError(f"timed out waiting for {what}: {missing}")
        time.sleep(interval_s)  # polling interval between checks of the awaited condition
