"""Readiness through etcd: roles register under a lease, the launcher watches for them.

Inside a job, ``python -m atomdyn_launchers.readiness register …`` waits until the role's own processes
answer on their health endpoints, then writes ``<prefix>/<role>`` (host, ports, role, job id, pids) under
an etcd lease it keeps alive. On SIGTERM it revokes the lease, so the key disappears the moment the role
stops; if the job dies hard the key expires with the lease TTL. The launcher watches the prefix.

Only etcd's JSON gateway is used (plain HTTP, ``/v3/...``, keys and values base64): no client library.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import queue
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KEY_ROOT = "atomdyn/runs"
LEASE_TTL_S = 10


class ReadinessError(RuntimeError):
    """Something awaited did not happen; the message names what was awaited and what is missing."""


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def prefix_end(prefix: str) -> str:
    """The etcd range end that covers every key starting with ``prefix``."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return bytes(raw).decode()


def run_prefix(run_id: str) -> str:
    return f"{KEY_ROOT}/{run_id}/roles/"


def launcher_key(run_id: str) -> str:
    return f"{KEY_ROOT}/{run_id}/launcher"


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parsed.scheme != "http" or not parsed.hostname or parsed.path not in ("", "/"):
            raise ReadinessError(f"etcd endpoint {url!r} must look like http://HOST:PORT")
        return cls(parsed.hostname, parsed.port or 2379)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class EtcdClient:
    """The few etcd v3 calls the launchers need, through the JSON gateway."""

    def __init__(self, endpoint: str, timeout_s: float = 3.0) -> None:
        self.endpoint = Endpoint.parse(endpoint)
        self.timeout_s = timeout_s

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.endpoint.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                result = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise ReadinessError(f"etcd at {self.endpoint.url} refused {path}: HTTP {exc.code}") from exc
        except (OSError, ValueError) as exc:
            raise ReadinessError(f"etcd at {self.endpoint.url} is unreachable ({path}): {exc}") from exc
        if not isinstance(result, dict):
            raise ReadinessError(f"etcd at {self.endpoint.url} answered {path} with {result!r}")
        return result

    def version(self) -> str:
        """etcd's server version; raises ReadinessError naming the endpoint when it cannot be reached."""
        try:
            with urllib.request.urlopen(self.endpoint.url + "/version", timeout=self.timeout_s) as response:
                data = json.loads(response.read())
        except (OSError, ValueError) as exc:
            raise ReadinessError(f"etcd at {self.endpoint.url} is unreachable: {exc}") from exc
        return str(data.get("etcdserver", "unknown"))

    def grant(self, ttl_s: int) -> int:
        return int(self._post("/v3/lease/grant", {"TTL": ttl_s})["ID"])

    def keepalive(self, lease: int) -> int:
        """Refresh ``lease``; returns the remaining TTL (0 or less: the lease is gone)."""
        result = self._post("/v3/lease/keepalive", {"ID": lease}).get("result", {})
        return int(result.get("TTL", 0))

    def revoke(self, lease: int) -> None:
        self._post("/v3/lease/revoke", {"ID": lease})

    def put(self, key: str, value: str, lease: int | None = None) -> None:
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease is not None:
            body["lease"] = lease
        self._post("/v3/kv/put", body)

    def get_prefix(self, prefix: str) -> tuple[dict[str, str], int]:
        """All keys under ``prefix`` and the store revision they were read at."""
        result = self._post("/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))})
        kvs = {_unb64(kv["key"]): _unb64(kv.get("value", "")) for kv in result.get("kvs", [])}
        return kvs, int(result.get("header", {}).get("revision", 0))

    def delete_prefix(self, prefix: str) -> None:
        self._post("/v3/kv/deleterange", {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))})

    def watch(self, prefix: str, start_revision: int) -> Watch:
        """A stream of changes under ``prefix`` from ``start_revision`` on (see :class:`Watch`)."""
        return Watch(self, prefix, start_revision)


class Watch:
    """An open etcd watch: iterate for (type, key, value), type "PUT" or "DELETE"; ``close`` from any thread.

    The gateway streams one JSON object per line over a long-lived response. Reads block with no timeout;
    ``close`` shuts the socket down, which ends a blocked read at once.
    """

    def __init__(self, client: EtcdClient, prefix: str, start_revision: int) -> None:
        self._closed = threading.Event()
        ep = client.endpoint
        self._url = ep.url
        body = {
            "create_request": {
                "key": _b64(prefix),
                "range_end": _b64(prefix_end(prefix)),
                "start_revision": start_revision,
            }
        }
        self._conn = http.client.HTTPConnection(ep.host, ep.port, timeout=client.timeout_s)
        try:
            self._conn.request("POST", "/v3/watch", json.dumps(body), {"Content-Type": "application/json"})
            self._response = self._conn.getresponse()
        except OSError as exc:
            self._conn.close()
            raise ReadinessError(f"etcd at {self._url} is unreachable (watch): {exc}") from exc
        if self._response.status != 200:
            self._conn.close()
            raise ReadinessError(f"etcd at {self._url} refused the watch: HTTP {self._response.status}")
        self._sock = self._conn.sock
        if self._sock is not None:
            self._sock.settimeout(None)

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        buffer = b""
        while not self._closed.is_set():
            try:
                chunk = self._response.read1(65536)
            except Exception as exc:  # a close() from another thread surfaces as assorted errors
                if self._closed.is_set():
                    return
                raise ReadinessError(f"etcd watch on {self._url} broke: {exc}") from exc
            if not chunk:
                if self._closed.is_set():
                    return
                raise ReadinessError(f"etcd at {self._url} closed the watch stream")
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    yield from _watch_events(json.loads(line))

    def close(self) -> None:
        self._closed.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()


def _watch_events(message: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    result = message.get("result", {})
    if "error" in message:
        raise ReadinessError(f"etcd watch error: {message['error']}")
    for event in result.get("events", []):
        kv = event.get("kv", {})
        yield event.get("type", "PUT"), _unb64(kv.get("key", "")), _unb64(kv.get("value", ""))


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


# ---------------------------------------------------------------------------------------------------------
# Health endpoints


def http_json(url: str, timeout_s: float = 2.0) -> tuple[int, Any]:
    """GET ``url``; return (status, parsed JSON or None). Raises OSError when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
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


# ---------------------------------------------------------------------------------------------------------
# The in-job registration helper


def local_address_towards(endpoint: Endpoint) -> str:
    """The source address this node uses to reach ``endpoint``: the management address peers can use."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((endpoint.host, endpoint.port))
        return str(probe.getsockname()[0])


@dataclass
class _RegisterArgs:
    etcd: str
    key: str
    role: str
    job_id: str
    node: str
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    worker_health: list[str] = field(default_factory=list)
    frontend_health: list[str] = field(default_factory=list)
    timeout_s: float = 600.0
    ttl_s: int = LEASE_TTL_S
    launcher_key: str | None = None


def _pairs(values: Sequence[str], what: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        name, sep, number = value.partition("=")
        if not sep or not name or not number.isdigit():
            raise SystemExit(f"register: bad {what} {value!r}, expected NAME=NUMBER")
        out[name] = int(number)
    return out


def register_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="atomdyn_launchers.readiness register")
    parser.add_argument("--etcd", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--job-id", default=os.environ.get("SLURM_JOB_ID", ""))
    parser.add_argument("--node", default=os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    parser.add_argument("--port", action="append", default=[], help="NAME=PORT to publish")
    parser.add_argument("--pid", action="append", default=[], help="NAME=PID to publish and watch")
    parser.add_argument("--worker-health", action="append", default=[], help="URL of a worker /health")
    parser.add_argument("--frontend-health", action="append", default=[], help="URL of a frontend /health")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--ttl", type=int, default=LEASE_TTL_S)
    parser.add_argument("--launcher-key", help="stop (exit 6) when this key vanishes: the launcher is gone")
    ns = parser.parse_args(argv)
    args = _RegisterArgs(
        etcd=ns.etcd,
        key=ns.key,
        role=ns.role,
        job_id=ns.job_id,
        node=ns.node,
        ports=_pairs(ns.port, "port"),
        pids=_pairs(ns.pid, "pid"),
        worker_health=list(ns.worker_health),
        frontend_health=list(ns.frontend_health),
        timeout_s=ns.timeout,
        ttl_s=ns.ttl,
        launcher_key=ns.launcher_key,
    )
    return register(args)


def _health_missing(args: _RegisterArgs) -> str | None:
    for name, pid in args.pids.items():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise ReadinessError(f"process {name} (pid {pid}) exited before becoming healthy") from None
        except PermissionError:
            pass
    for url in args.worker_health:
        try:
            _, body = http_json(url)
        except OSError:
            return f"worker health {url} not answering"
        if not worker_ready(body):
            return f"worker health {url} not ready: {json.dumps(body)[:200]}"
    for url in args.frontend_health:
        try:
            _, body = http_json(url)
        except OSError:
            return f"frontend health {url} not answering"
        if not frontend_ready(body):
            return f"frontend health {url} not healthy"
    return None


def register(args: _RegisterArgs) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    client = EtcdClient(args.etcd)
    started = time.monotonic()
    try:
        wait_until(
            f"role {args.role}'s processes to become healthy",
            lambda: None if stop.is_set() else _health_missing(args),
            started + args.timeout_s,
        )
    except ReadinessError as exc:
        print(f"register: {exc}", file=sys.stderr, flush=True)
        return 3
    if stop.is_set():
        return 0
    host = local_address_towards(client.endpoint)
    registration = Registration(
        role=args.role,
        job_id=args.job_id,
        node=args.node,
        host=host,
        ports=args.ports,
        pids=args.pids,
        registered_at=time.time(),
    )
    lease = client.grant(args.ttl_s)
    client.put(args.key, registration.to_json(), lease)
    print(f"register: {args.key} -> {registration.to_json()} (lease {lease:x})", flush=True)
    try:
        # Refresh at a third of the TTL; Event.wait returns at once on SIGTERM.
        while not stop.wait(args.ttl_s / 3):
            if client.keepalive(lease) <= 0:
                print("register: lease lost", file=sys.stderr, flush=True)
                return 4
            if args.launcher_key and args.launcher_key not in client.get_prefix(args.launcher_key)[0]:
                # The launcher died without stopping the run (its lease expired): stop this role.
                print(
                    f"register: {args.launcher_key} vanished: the launcher is gone",
                    file=sys.stderr,
                    flush=True,
                )
                return 6
    finally:
        try:
            client.revoke(lease)
            print("register: lease revoked", flush=True)
        except ReadinessError as exc:
            print(f"register: could not revoke the lease: {exc}", file=sys.stderr, flush=True)
    return 0


# ---------------------------------------------------------------------------------------------------------
# The launcher's side: its presence, and a watch feeding a queue


class Presence:
    """The launcher's key under a lease kept alive by a thread. If the launcher dies hard, the lease expires,
    the key vanishes and each role's helper stops its job: nothing outlives the launcher by more than ~15 s."""

    def __init__(self, client: EtcdClient, key: str, ttl_s: int = LEASE_TTL_S) -> None:
        self.client = client
        self.key = key
        self.ttl_s = ttl_s
        self._stop = threading.Event()
        self._lease: int | None = None
        self._thread = threading.Thread(target=self._run, name="etcd-presence", daemon=True)

    def start(self) -> None:
        self._lease = self.client.grant(self.ttl_s)
        value = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        self.client.put(self.key, json.dumps(value), self._lease)
        self._thread.start()

    def _run(self) -> None:
        assert self._lease is not None
        while not self._stop.wait(self.ttl_s / 3):
            with contextlib.suppress(ReadinessError):  # a transient etcd error: the next refresh retries
                self.client.keepalive(self._lease)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._lease is not None:
            with contextlib.suppress(ReadinessError):
                self.client.revoke(self._lease)
            self._lease = None


@dataclass(frozen=True)
class RoleEvent:
    kind: str  # "registered" | "deregistered" | "watch-error"
    role: str
    registration: Registration | None = None
    detail: str = ""


class RoleWatcher:
    """Follows ``<prefix><role>`` keys in a background thread and posts RoleEvents to ``events``."""

    def __init__(self, client: EtcdClient, prefix: str, events: queue.Queue[RoleEvent]) -> None:
        self.client = client
        self.prefix = prefix
        self.events = events
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="etcd-watch", daemon=True)

    def start(self) -> None:
        current, revision = self.client.get_prefix(self.prefix)
        for key, value in current.items():
            self._post("PUT", key, value)
        self._watch = self.client.watch(self.prefix, revision + 1)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._watch.close()
            self._thread.join(timeout=5)

    def _post(self, kind: str, key: str, value: str) -> None:
        role = key[len(self.prefix) :]
        if kind == "PUT":
            try:
                self.events.put(RoleEvent("registered", role, Registration.from_json(value)))
            except (ValueError, KeyError) as exc:
                self.events.put(RoleEvent("watch-error", role, detail=f"bad registration {value!r}: {exc}"))
        else:
            self.events.put(RoleEvent("deregistered", role))

    def _run(self) -> None:
        try:
            for kind, key, value in self._watch:
                self._post(kind, key, value)
        except ReadinessError as exc:
            if not self._stop.is_set():
                self.events.put(RoleEvent("watch-error", "", detail=str(exc)))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "register":
        print("usage: python -m atomdyn_launchers.readiness register --etcd URL --key KEY --role ROLE …")
        return 2
    try:
        return register_main(argv[1:])
    except ReadinessError as exc:
        print(f"register: {exc}", file=sys.stderr, flush=True)
        return 5


if __name__ == "__main__":
    sys.exit(main())
