"""The few etcd v3 calls the launchers and the in-job helpers need, through etcd's JSON gateway.

Only etcd's JSON gateway is used (HTTP or HTTPS, ``/v3/...``, keys and values base64): no client library.
Every request goes straight to its address, never through ``http_proxy`` (see :mod:`..contract.direct_http`).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

from atomdyn_launchers.contract import direct_http
from atomdyn_launchers.contract.direct_http import TLSFilesError
from atomdyn_launchers.contract.readiness import ReadinessError
from atomdyn_launchers.etcd.access import Endpoint, EtcdAccess
from atomdyn_launchers.etcd.keys import KEY_ROOT, prefix_end


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode()


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
