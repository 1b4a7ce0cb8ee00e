"""The two etcd calls the cross-node probe needs (put, get), through etcd's v3 JSON gateway, configured from
the environment exactly as Dynamo 1.3's workers read it: ``ETCD_ENDPOINTS`` (comma-separated URLs),
``ETCD_AUTH_CA``/``ETCD_AUTH_CLIENT_CERT``/``ETCD_AUTH_CLIENT_KEY`` (the PEM text itself, TLS only with all
three) or ``ETCD_AUTH_USERNAME``/``ETCD_AUTH_PASSWORD``.

Standard library only: this runs inside engine images, which carry no etcd client. Requests never go through
a proxy (a job inherits the submit host's ``http_proxy``; etcd is a cluster address).
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class EtcdError(RuntimeError):
    """etcd could not be reached or refused a request; the message names the endpoint."""


def _b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


def _tls_context(ca: str, cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca)
    # load_cert_chain reads files only: the PEM text goes into a private file that is removed at once.
    with tempfile.TemporaryDirectory(prefix="nixl-probe-tls-") as directory:
        chain = os.path.join(directory, "client.pem")
        fd = os.open(chain, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(cert.rstrip("\n") + "\n" + key.rstrip("\n") + "\n")
        context.load_cert_chain(chain)
    return context


@dataclass
class Etcd:
    endpoints: tuple[str, ...]
    tls: ssl.SSLContext | None = None
    user: tuple[str, str] | None = None
    timeout_s: float = 5.0
    _token: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Etcd:
        env = os.environ if env is None else env
        endpoints = tuple(
            e.strip().rstrip("/") for e in env.get("ETCD_ENDPOINTS", "").split(",") if e.strip()
        )
        if not endpoints:
            raise EtcdError(
                "ETCD_ENDPOINTS is not set: the probe exchanges NIXL metadata through the run's etcd"
            )
        bad = [e for e in endpoints if not e.startswith(("http://", "https://"))]
        if bad:
            raise EtcdError(f"ETCD_ENDPOINTS: {', '.join(bad)} is not an http:// or https:// URL")
        ca, cert, key = (env.get(f"ETCD_AUTH_{n}", "") for n in ("CA", "CLIENT_CERT", "CLIENT_KEY"))
        username, password = env.get("ETCD_AUTH_USERNAME", ""), env.get("ETCD_AUTH_PASSWORD", "")
        if username:  # as Dynamo: a user name means no client certificate
            return cls(endpoints, None, (username, password))
        return cls(endpoints, _tls_context(ca, cert, key) if ca and cert and key else None)

    def _post(self, endpoint: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            endpoint + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        if self._token:
            request.add_header("Authorization", self._token)
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if self.tls is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self.tls))
        with urllib.request.build_opener(*handlers).open(request, timeout=self.timeout_s) as response:
            answer: dict[str, Any] = json.loads(response.read() or b"{}")
        return answer

    def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        errors = []
        for endpoint in self.endpoints:
            try:
                if self.user is not None and self._token is None:
                    name, password = self.user
                    self._token = str(
                        self._post(endpoint, "/v3/auth/authenticate", {"name": name, "password": password})[
                            "token"
                        ]
                    )
                return self._post(endpoint, path, body)
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:200]
                raise EtcdError(f"etcd at {endpoint} refused {path}: HTTP {exc.code} {detail}") from exc
            except (OSError, ValueError, KeyError) as exc:  # unreachable, TLS, a bad answer: try the next
                errors.append(f"{endpoint}: {exc}")
        raise EtcdError("no etcd endpoint answered: " + "; ".join(errors))

    def put(self, key: str, value: str) -> None:
        self._call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})

    def get(self, key: str) -> str | None:
        kvs = self._call("/v3/kv/range", {"key": _b64(key)}).get("kvs") or []
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None

    def wait_for(self, key: str, what: str, timeout_s: float) -> str:
        """The value of ``key`` once it exists; polled with a growing interval up to the deadline."""
        deadline, interval = time.monotonic() + timeout_s, 0.05
        while True:
            value = self.get(key)
            if value is not None:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {what} in etcd ({key}) within {timeout_s:.0f} s")
            time.sleep(min(interval, left))
            interval = min(interval * 2, 0.5)
