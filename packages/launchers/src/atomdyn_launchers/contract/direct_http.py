"""The one way cluster traffic is sent over HTTP(S): etcd, health endpoints, smoke requests and metrics.

``http_proxy``/``https_proxy`` are set on many clusters for downloads; urllib's default opener would send
etcd, health and smoke traffic to that proxy too, which cannot reach the nodes. Every request here goes
straight to its address. HTTPS uses a context built from a CA file and an optional client certificate.

Standard library only: the in-job registration helper imports this without the project's venv.
"""

from __future__ import annotations

import http.client
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import cast


class TLSFilesError(ValueError):
    """A CA, certificate or key file cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class TLSFiles:
    """What an HTTPS client presents and trusts: a CA bundle (None: the system's) and a client certificate."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    def context(self) -> ssl.SSLContext:
        """A verifying client context; raises TLSFilesError naming a file that is missing or unusable."""
        if (self.cert is None) != (self.key is None):
            raise TLSFilesError("a client certificate needs both its certificate and its key file")
        for what, path in (("CA", self.ca), ("client certificate", self.cert), ("client key", self.key)):
            if path is not None and not path.is_file():
                raise TLSFilesError(f"the {what} file {path} does not exist")
        try:
            context = ssl.create_default_context(cafile=str(self.ca) if self.ca else None)
            if self.cert is not None and self.key is not None:
                context.load_cert_chain(str(self.cert), str(self.key))
        except (ssl.SSLError, OSError) as exc:
            files = ", ".join(str(p) for p in (self.ca, self.cert, self.key) if p is not None)
            raise TLSFilesError(f"cannot load the TLS files ({files}): {exc}") from exc
        return context


def opener(context: ssl.SSLContext | None = None) -> urllib.request.OpenerDirector:
    """An opener that never uses a proxy; HTTPS verified with ``context`` (default: the system's CAs)."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


DIRECT = opener()


def urlopen(
    request: str | urllib.request.Request, timeout: float, data: bytes | None = None
) -> http.client.HTTPResponse:
    """``urllib.request.urlopen`` without proxies (raises the same errors: HTTPError, URLError, OSError)."""
    return cast("http.client.HTTPResponse", DIRECT.open(request, data, timeout=timeout))
