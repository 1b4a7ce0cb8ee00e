"""How to reach etcd: endpoints (tried in order), TLS files and a user of etcd's authentication."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_launchers.contract.direct_http import TLSFiles
from atomdyn_launchers.contract.readiness import ReadinessError


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
