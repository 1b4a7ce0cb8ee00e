"""Readiness through etcd: roles register under a lease, the launcher watches for them.

Inside a job, ``python -m atomdyn_launchers.readiness register …`` waits until the role's own processes
answer on their health endpoints, then writes ``<prefix>/<role>`` (host, ports, role, job id, pids) under
an etcd lease it keeps alive. On SIGTERM it revokes the lease, so the key disappears the moment the role
stops; if the job dies hard the key expires with the lease TTL. The launcher watches the prefix.

Only etcd's JSON gateway is used (HTTP or HTTPS, ``/v3/...``, keys and values base64): no client library.
Every request goes straight to its address, never through ``http_proxy`` (see :mod:`direct_http`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import http.client
import json
import os
import queue
import shlex
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atomdyn_launchers import direct_http
from atomdyn_launchers.direct_http import TLSFiles, TLSFilesError

if TYPE_CHECKING:  # the in-job helper runs without the project's dependencies: no import at run time
    from atomdyn_launchers.config import ClusterConfig

KEY_ROOT = "atomdyn/runs"
LEASE_TTL_S = 10
# Leases are refreshed every REFRESH_S; etcd counts as lost once no refresh succeeded for ETCD_LOST_S (well
# inside the TTL, so it is noticed before the keys expire). With the client's 3 s call timeout a helper or
# launcher notices a stopped or hung etcd within ETCD_LOST_S + REFRESH_S + 3 s = 9 s.
REFRESH_S = 1.0
ETCD_LOST_S = 5.0


def call_timeout_for(etcd_lost_s: float, default_s: float) -> float:
    """An etcd call's timeout under ``etcd_lost_s`` of grace: the default, or longer for a longer grace (on a
    starved 2-core node etcd answered in 4-5 s for a while: calls that gave up at 2 s made it look lost)."""
    return default_s if etcd_lost_s <= ETCD_LOST_S else max(default_s, min(8.0, etcd_lost_s / 4))


def lease_ttl_for(etcd_lost_s: float) -> int:
    """A lease TTL that outlives ``etcd_lost_s`` of etcd silence: keys must not expire before the loss is named."""
    return LEASE_TTL_S if etcd_lost_s <= ETCD_LOST_S else int(etcd_lost_s) + LEASE_TTL_S


class EtcdSilence:
    """The one rule for "etcd is lost", kept by the role helpers and the launcher alike: no call succeeded for
    ``lost_after_s`` and the latest one failed (timed out, refused, or found the lease gone). A call that merely
    had no turn yet (a starved machine) is no loss."""

    def __init__(self, lost_after_s: float = ETCD_LOST_S) -> None:
        self.lost_after_s = lost_after_s
        self._last_ok = time.monotonic()
        self._last_error = ""  # the latest failure since the last success; "" when none failed

    def answered(self) -> None:
        self._last_ok = time.monotonic()
        self._last_error = ""

    def failed(self, why: str) -> None:
        self._last_error = why

    @property
    def silent_s(self) -> float:
        """Seconds since the last successful call."""
        return time.monotonic() - self._last_ok

    def lost(self, url: str) -> str | None:
        """Why etcd counts as lost, naming ``url``, the silence and the last failure; None while it does not."""
        silent = self.silent_s
        if silent < self.lost_after_s or not self._last_error:
            return None
        return f"etcd at {url} has not answered for {silent:.0f} s ({self._last_error})"


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
    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parsed = urllib.parse.urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
        try:
            port = parsed.port
        except ValueError:
            port = None
            parsed = parsed._replace(netloc="")
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.path not in ("", "/"):
            raise ReadinessError(f"etcd endpoint {url!r} must look like http(s)://HOST:PORT")
        return cls(parsed.scheme, parsed.hostname, port or 2379)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


@dataclass(frozen=True)
class EtcdAccess:
    """How to reach etcd: endpoints (tried in order), TLS files, and a user of etcd's authentication.

    Calls go through etcd's JSON gateway. With a user, a token from ``/v3/auth/authenticate`` rides on
    every call. etcd ignores a client certificate's CN on the gateway (it refuses the request while
    authentication is on), so the certificate used here is the one without a CN, and the user names who we are.
    """

    endpoints: tuple[Endpoint, ...]
    tls: TLSFiles = field(default_factory=TLSFiles)
    user: str | None = None
    password_file: Path | None = None

    @classmethod
    def parse(
        cls,
        endpoints: str | Sequence[str],
        *,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        user: str | None = None,
        password_file: str | Path | None = None,
    ) -> EtcdAccess:
        """``endpoints``: one URL, a comma-separated list (as ETCD_ENDPOINTS), or a sequence of URLs."""
        items = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
        parsed = tuple(Endpoint.parse(item) for item in items if item.strip())
        if not parsed:
            raise ReadinessError("no etcd endpoint given")
        if user and not password_file:
            raise ReadinessError(f"etcd user {user!r} needs a password file")

        def path(value: str | Path | None) -> Path | None:
            return Path(value) if value else None

        return cls(parsed, TLSFiles(path(ca), path(cert), path(key)), user or None, path(password_file))

    @property
    def urls(self) -> str:
        """The endpoints as ETCD_ENDPOINTS writes them."""
        return ",".join(ep.url for ep in self.endpoints)

    def cli_args(self) -> list[str]:
        """The ``register`` helper's options that reproduce this access."""
        args = ["--etcd", self.urls]
        for option, value in (
            ("--etcd-ca", self.tls.ca),
            ("--etcd-cert", self.tls.cert),
            ("--etcd-key", self.tls.key),
            ("--etcd-user", self.user),
            ("--etcd-password-file", self.password_file),
        ):
            if value is not None:
                args += [option, str(value)]
        return args

    def password(self) -> str:
        assert self.password_file is not None
        try:
            return self.password_file.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ReadinessError(f"cannot read the etcd password file {self.password_file}: {exc}") from exc


def etcd_access(config: ClusterConfig, endpoints: str | None = None) -> EtcdAccess:
    """The launchers' access to the configured etcd (or to ``endpoints``, a run-owned etcd: plain http)."""
    if endpoints is not None:
        return EtcdAccess.parse(endpoints)
    return EtcdAccess.parse(
        config.require_etcd(),
        ca=config.etcd_auth_ca,
        cert=config.etcd_gateway_client_cert or config.etcd_auth_client_cert,
        key=config.etcd_gateway_client_key or config.etcd_auth_client_key,
        user=config.etcd_auth_username,
        password_file=config.etcd_auth_password_file,
    )


def worker_etcd_env(config: ClusterConfig) -> dict[str, str]:
    """The configured etcd's TLS and user as Dynamo 1.3 reads them, for a job script's exports.

    Dynamo takes the PEM text itself in ETCD_AUTH_CA/CLIENT_CERT/CLIENT_KEY, so each value is a shell
    expansion that reads the file on the node (the script never holds a key). It uses TLS only with all
    three, and skips TLS whenever a user name is set: over https it authenticates with the certificate's
    CN and gets no user; over http it gets the user and the password.
    Values are shell text, already quoted (``"$(cat FILE)"``).
    """

    def contents(path: Path) -> str:
        return '"$(cat ' + shlex.quote(str(path)) + ')"'

    env: dict[str, str] = {}
    if config.etcd_auth_ca and config.etcd_auth_client_cert and config.etcd_auth_client_key:
        env["ETCD_AUTH_CA"] = contents(config.etcd_auth_ca)
        env["ETCD_AUTH_CLIENT_CERT"] = contents(config.etcd_auth_client_cert)
        env["ETCD_AUTH_CLIENT_KEY"] = contents(config.etcd_auth_client_key)
    elif config.etcd_auth_username and config.etcd_auth_password_file:
        env["ETCD_AUTH_USERNAME"] = shlex.quote(config.etcd_auth_username)
        env["ETCD_AUTH_PASSWORD"] = contents(config.etcd_auth_password_file)
    return env


class _Unreachable(Exception):
    """Nothing usable answered at one endpoint (connection, TLS handshake, timeout): try the next."""


class _Refused(Exception):
    """The endpoint answered with an error; ``auth_expired`` when a fresh token may fix it."""

    def __init__(self, message: str, auth_expired: bool) -> None:
        super().__init__(message)
        self.auth_expired = auth_expired


def _error_text(status: int, body: bytes) -> tuple[str, bool]:
    """The gateway's error message and whether it says the auth token is no longer valid."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        message = str(data.get("error") or data.get("message") or body[:200].decode("utf-8", "replace"))
        expired = data.get("code") == 16 or "invalid auth token" in message
        return f"HTTP {status}: {message}", expired
    return f"HTTP {status}: {body[:200].decode('utf-8', 'replace').strip()}", False


class EtcdClient:
    """The few etcd v3 calls the launchers need, through the JSON gateway, failing over across endpoints."""

    def __init__(self, access: EtcdAccess | str, timeout_s: float = 3.0) -> None:
        self.access = access if isinstance(access, EtcdAccess) else EtcdAccess.parse(access)
        self.timeout_s = timeout_s
        https = any(ep.scheme == "https" for ep in self.access.endpoints)
        try:
            self.ssl_context = self.access.tls.context() if https else None
        except TLSFilesError as exc:
            raise ReadinessError(f"etcd TLS: {exc}") from exc
        self._opener = direct_http.opener(self.ssl_context)
        self._current = self.access.endpoints[0]
        self._tokens: dict[
            Endpoint, str
        ] = {}  # etcd's simple tokens are valid only on the member that issued them
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> Endpoint:
        """The endpoint that answered last (the first one before any call)."""
        return self._current

    def _order(self) -> list[Endpoint]:
        current = self._current
        return [current, *(ep for ep in self.access.endpoints if ep != current)]

    def _request(self, ep: Endpoint, path: str, body: Mapping[str, Any] | None, token: str | None) -> Any:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = token
        request = urllib.request.Request(
            ep.url + path,
            data=None if body is None else json.dumps(body).encode(),
            headers=headers,
            method="GET" if body is None else "POST",
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            message, expired = _error_text(exc.code, exc.read())
            raise _Refused(message, expired) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise _Unreachable(str(getattr(exc, "reason", exc))) from exc
        try:
            return json.loads(raw or b"{}")
        except ValueError as exc:
            raise _Refused(f"not JSON: {raw[:200]!r}", False) from exc

    def token(self, ep: Endpoint) -> str | None:
        """The auth token for ``ep`` (authenticating first), or None without a user."""
        if self.access.user is None:
            return None
        with self._lock:
            cached = self._tokens.get(ep)
        if cached is not None:
            return cached
        credentials = {"name": self.access.user, "password": self.access.password()}
        try:
            result = self._request(ep, "/v3/auth/authenticate", credentials, None)
        except _Refused as exc:
            raise ReadinessError(
                f"etcd at {ep.url} refused user {self.access.user!r} (/v3/auth/authenticate): {exc}"
            ) from None
        if not isinstance(result, dict) or not result.get("token"):
            raise ReadinessError(f"etcd at {ep.url} answered /v3/auth/authenticate with {result!r}")
        with self._lock:
            self._tokens[ep] = str(result["token"])
        return str(result["token"])

    def _call(self, path: str, body: Mapping[str, Any] | None) -> Any:
        """One call at the first endpoint that answers; a refused token is renewed once."""
        unreachable: list[str] = []
        for ep in self._order():
            try:
                try:
                    result = self._request(ep, path, body, self.token(ep))
                except _Refused as exc:
                    if not (exc.auth_expired and self.access.user):
                        raise
                    with self._lock:
                        self._tokens.pop(ep, None)
                    result = self._request(ep, path, body, self.token(ep))
            except _Unreachable as exc:
                unreachable.append(f"{ep.url}: {exc}")
                continue
            except _Refused as exc:
                raise ReadinessError(f"etcd at {ep.url} refused {path}: {exc}") from None
            self._current = ep
            return result
        raise ReadinessError(f"etcd is unreachable ({path}) at every endpoint: {'; '.join(unreachable)}")

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        result = self._call(path, body)
        if not isinstance(result, dict):
            raise ReadinessError(f"etcd at {self._current.url} answered {path} with {result!r}")
        return result

    def version(self) -> str:
        """etcd's server version; raises ReadinessError naming the endpoints when none can be reached."""
        result = self._call("/version", None)
        return str(result.get("etcdserver", "unknown")) if isinstance(result, dict) else "unknown"

    def health(self) -> dict[str, Any]:
        """The first answering endpoint's ``/health`` (``{"health": "true"}`` when healthy)."""
        result = self._call("/health", None)
        return result if isinstance(result, dict) else {"answer": result}

    def healthy(self) -> bool:
        try:
            return self.health().get("health") == "true"
        except ReadinessError:
            return False

    def unreachable_endpoints(self) -> list[str]:
        """Each endpoint that does not answer ``/health`` by itself, as "URL: reason"."""
        down: list[str] = []
        for ep in self.access.endpoints:
            try:
                self._request(ep, "/health", None, None)
            except (_Unreachable, _Refused) as exc:
                down.append(f"{ep.url}: {exc}")
        return down

    def check_access(self) -> None:
        """Read (count only) the launchers' keys: proves the TLS files, the user and its permission."""
        self._post(
            "/v3/kv/range",
            {"key": _b64(KEY_ROOT + "/"), "range_end": _b64(prefix_end(KEY_ROOT + "/")), "count_only": True},
        )

    def grant(self, ttl_s: int) -> int:
        return int(self._post("/v3/lease/grant", {"TTL": ttl_s})["ID"])

    def keepalive(self, lease: int) -> int:
        """Refresh ``lease``; returns the remaining TTL (0 or less: the lease is gone)."""
        result = self._post("/v3/lease/keepalive", {"ID": lease}).get("result", {})
        return int(result.get("TTL", 0))

    def time_to_live(self, lease: int) -> int:
        """Seconds left on ``lease`` (-1: it no longer exists)."""
        return int(self._post("/v3/lease/timetolive", {"ID": lease}).get("TTL", -1))

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

    def get_lease(self, key: str) -> int:
        """The lease ``key`` is attached to (0: none); raises ReadinessError when the key does not exist."""
        kvs = self._post("/v3/kv/range", {"key": _b64(key)}).get("kvs", [])
        if not kvs:
            raise ReadinessError(f"etcd has no key {key!r}")
        return int(kvs[0].get("lease", 0))

    def delete_prefix(self, prefix: str) -> None:
        self._post("/v3/kv/deleterange", {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))})

    def watch(self, prefix: str, start_revision: int) -> Watch:
        """A stream of changes under ``prefix`` from ``start_revision`` on (see :class:`Watch`)."""
        failures: list[str] = []
        for ep in self._order():
            try:
                watch = Watch(self, ep, prefix, start_revision)
            except _Unreachable as exc:
                failures.append(f"{ep.url}: {exc}")
                continue
            self._current = ep
            return watch
        raise ReadinessError(f"etcd is unreachable (watch) at every endpoint: {'; '.join(failures)}")


class Watch:
    """An open etcd watch: iterate for (type, key, value), type "PUT" or "DELETE"; ``close`` from any thread.

    The gateway streams one JSON object per line over a long-lived response. Reads block with no timeout;
    ``close`` shuts the socket down, which ends a blocked read at once.
    """

    def __init__(self, client: EtcdClient, ep: Endpoint, prefix: str, start_revision: int) -> None:
        self._closed = threading.Event()
        self._url = ep.url
        body = {
            "create_request": {
                "key": _b64(prefix),
                "range_end": _b64(prefix_end(prefix)),
                "start_revision": start_revision,
            }
        }
        headers = {"Content-Type": "application/json"}
        token = client.token(ep)
        if token is not None:
            headers["Authorization"] = token
        self._conn: http.client.HTTPConnection
        if ep.scheme == "https":
            self._conn = http.client.HTTPSConnection(
                ep.host, ep.port, timeout=client.timeout_s, context=client.ssl_context
            )
        else:
            self._conn = http.client.HTTPConnection(ep.host, ep.port, timeout=client.timeout_s)
        try:
            self._conn.request("POST", "/v3/watch", json.dumps(body), headers)
            self._response = self._conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            self._conn.close()
            raise _Unreachable(str(exc)) from exc
        if self._response.status != 200:
            message, _ = _error_text(self._response.status, self._response.read())
            self._conn.close()
            raise ReadinessError(f"etcd at {self._url} refused the watch: {message}")
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


# ---------------------------------------------------------------------------------------------------------
# The in-job registration helper


def local_address_towards(endpoint: Endpoint) -> str:
    """The source address this node uses to reach ``endpoint``: the management address peers can use."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((endpoint.host, endpoint.port))
        return str(probe.getsockname()[0])


@dataclass
class _RegisterArgs:
    etcd: EtcdAccess
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
    etcd_lost_s: float = ETCD_LOST_S
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
    parser.add_argument("--etcd", required=True, help="etcd endpoint(s), comma-separated")
    parser.add_argument("--etcd-ca", help="CA file for https endpoints")
    parser.add_argument("--etcd-cert", help="client certificate file (its CN empty: see EtcdAccess)")
    parser.add_argument("--etcd-key", help="client key file")
    parser.add_argument("--etcd-user", help="etcd user (authentication on)")
    parser.add_argument("--etcd-password-file", help="file holding the etcd user's password")
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
    parser.add_argument(
        "--etcd-lost-s", type=float, default=ETCD_LOST_S, help="etcd silence that fails the role (< --ttl)"
    )
    parser.add_argument("--launcher-key", help="stop (exit 6) when this key vanishes: the launcher is gone")
    ns = parser.parse_args(argv)
    access = EtcdAccess.parse(
        ns.etcd,
        ca=ns.etcd_ca,
        cert=ns.etcd_cert,
        key=ns.etcd_key,
        user=ns.etcd_user,
        password_file=ns.etcd_password_file,
    )
    args = _RegisterArgs(
        etcd=access,
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
        etcd_lost_s=ns.etcd_lost_s,
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
    # 2 s per call: on SIGTERM a call in flight and the revoke fit the job script's 5 s stop grace, so the key
    # goes at once instead of living out its TTL after a SIGKILL. A longer grace (a starved rehearsal node) takes
    # longer calls; a key left by a SIGKILL then goes with its lease or with the launcher's cleanup.
    client = EtcdClient(args.etcd, timeout_s=call_timeout_for(args.etcd_lost_s, 2.0))
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
    lease = client.grant(args.ttl_s)
    host = local_address_towards(client.endpoint)  # the endpoint that answered
    registration = Registration(
        role=args.role,
        job_id=args.job_id,
        node=args.node,
        host=host,
        ports=args.ports,
        pids=args.pids,
        registered_at=time.time(),
    )
    client.put(args.key, registration.to_json(), lease)
    print(f"register: {args.key} -> {registration.to_json()} (lease {lease:x})", flush=True)
    silence = EtcdSilence(args.etcd_lost_s)
    try:
        # Event.wait returns at once on SIGTERM.
        while not stop.wait(min(REFRESH_S, args.ttl_s / 3)):
            try:
                remaining = client.keepalive(lease)
                present = (
                    not args.launcher_key or args.launcher_key in client.get_prefix(args.launcher_key)[0]
                )
            except ReadinessError as exc:
                silence.failed(str(exc))
                if (why := silence.lost(client.endpoint.url)) is None:
                    continue  # a slow answer: the lease has time left, retry
                print(f"register: etcd lost: {why}", file=sys.stderr, flush=True)
                return 5
            silence.answered()
            if remaining <= 0:
                print("register: etcd lease lost (expired on the server)", file=sys.stderr, flush=True)
                return 4
            if not present:
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
    the key vanishes and each role's helper stops its job: nothing outlives the launcher by more than its TTL
    plus a few seconds (~15 s at the default). ``lost_after_s`` is the engine's etcd grace, as its helpers'."""

    def __init__(
        self, client: EtcdClient, key: str, ttl_s: int = LEASE_TTL_S, lost_after_s: float = ETCD_LOST_S
    ) -> None:
        if lost_after_s >= ttl_s:
            raise ValueError(f"the lease TTL ({ttl_s} s) must outlive the etcd grace ({lost_after_s:g} s)")
        self.client = client
        self.key = key
        self.ttl_s = ttl_s
        self._stop = threading.Event()
        self._lease: int | None = None
        self._thread = threading.Thread(target=self._run, name="etcd-presence", daemon=True)
        self._silence = EtcdSilence(lost_after_s)

    def start(self) -> None:
        self._lease = self.client.grant(self.ttl_s)
        value = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        self.client.put(self.key, json.dumps(value), self._lease)
        self._silence.answered()
        self._thread.start()

    def _run(self) -> None:
        assert self._lease is not None
        while not self._stop.wait(min(REFRESH_S, self.ttl_s / 3)):
            try:
                remaining = self.client.keepalive(self._lease)
            except ReadinessError as exc:  # a slow or failed answer: the next refresh retries; lost() judges
                self._silence.failed(str(exc))
                continue
            if remaining <= 0:
                self._silence.failed("the launcher's lease expired on the server")
                continue
            self._silence.answered()

    @property
    def silent_s(self) -> float:
        """Seconds since the lease was last refreshed."""
        return self._silence.silent_s

    def lost(self) -> str | None:
        """Why etcd counts as lost (see :class:`EtcdSilence`), or None."""
        if self._lease is None or self._stop.is_set():
            return None
        why = self._silence.lost(self.client.endpoint.url)
        return None if why is None else f"{why}: the run's registrations cannot be kept"

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
        self._watch: Watch | None = None

    def start(self) -> None:
        current, revision = self.client.get_prefix(self.prefix)
        for key, value in current.items():
            self._post("PUT", key, value)
        self._watch = self.client.watch(self.prefix, revision + 1)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # Closed also when the watch broke and its thread ended: its socket is still open then.
        if self._watch is not None:
            self._watch.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _post(self, kind: str, key: str, value: str) -> None:
        role = key[len(self.prefix) :]
        if kind == "PUT":
            try:
                self.events.put(RoleEvent("registered", role, Registration.from_json(value)))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                self.events.put(RoleEvent("watch-error", role, detail=f"bad registration {value!r}: {exc}"))
        else:
            self.events.put(RoleEvent("deregistered", role))

    def _run(self) -> None:
        try:
            assert self._watch is not None  # set by start() before the thread runs
            for kind, key, value in self._watch:
                self._post(kind, key, value)
        except ReadinessError as exc:
            if not self._stop.is_set():
                self.events.put(RoleEvent("watch-error", "", detail=str(exc)))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "register":
        print(
            "usage: python -m atomdyn_launchers.readiness register --etcd URL[,URL…] --key KEY --role ROLE …"
        )
        return 2
    try:
        return register_main(argv[1:])
    except ReadinessError as exc:
        print(f"register: {exc}", file=sys.stderr, flush=True)
        return 5


if __name__ == "__main__":
    sys.exit(main())
