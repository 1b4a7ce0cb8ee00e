"""The shim's log lines, parsed. The format is stable (README.md, "Log lines"); this is its reference reader."""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "dmabuf-shim: "
_REG = re.compile(r"^dmabuf-shim: reg (?P<result>ok|fail)(?P<fields>(?: [a-z_]+=\S+)+)\s*$")


@dataclass(frozen=True)
class Registration:
    ok: bool
    backend: str  # hsa, cuda or none (host memory, logged with DMABUF_SHIM_LOG=all)
    path: str  # dmabuf, or plain (passthrough or fallback)
    size: int
    offset: int  # offset inside the dma-buf; -1 when none was used
    fd_closed: bool
    addr: int
    iova: int
    access: int
    errno: int | None
    detail: str | None


def parse_registration(line: str) -> Registration | None:
    """The registration a `dmabuf-shim: reg ...` line describes; None for any other line.

    Raises ValueError when a line has the registration prefix but not the documented fields.
    """
    if not line.startswith(PREFIX + "reg "):
        return None
    match = _REG.match(line.rstrip("\n"))
    if match is None:
        raise ValueError(f"malformed dmabuf-shim registration line: {line!r}")
    fields = dict(item.split("=", 1) for item in match.group("fields").split())
    try:
        return Registration(
            ok=match.group("result") == "ok",
            backend=fields["backend"],
            path=fields["path"],
            size=int(fields["size"]),
            offset=int(fields["offset"]),
            fd_closed=fields["fd_closed"] == "1",
            addr=int(fields["addr"], 16) if fields["addr"] != "(nil)" else 0,
            iova=int(fields["iova"], 16),
            access=int(fields["access"], 16),
            errno=int(fields["errno"]) if "errno" in fields else None,
            detail=fields.get("detail"),
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(f"dmabuf-shim registration line lacks or garbles {exc}: {line!r}") from exc
