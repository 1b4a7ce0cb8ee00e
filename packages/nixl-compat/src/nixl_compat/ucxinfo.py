"""What UCX chose: its version, its transport modules, and the protocol tables of UCX_PROTO_INFO=y."""

from __future__ import annotations

import ctypes
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_TS = re.compile(r"^\[[\d.]+\]\s+\[[^\]]*\]\s*")
_SCOPE = re.compile(r"^\|\s*(\S+)\s+(self|intra-node|inter-node)\s+cfg#\d+\s*\|$")
_TITLE = re.compile(r"^\|\s*(.+? by ucp_\w+\*.*?)\s*\|$")
_ROW = re.compile(r"^\|\s*([\d.]+(?:\.\.[\w.]+)?)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|$")
_TLDEV = re.compile(r"([a-z][a-z0-9_]*)/([A-Za-z0-9_:.\-]+)")
NETWORK_TLS = ("tcp", "rc", "rc_mlx5", "rc_verbs", "ud", "ud_mlx5", "ud_verbs", "dc", "dc_mlx5", "srd")


@dataclass(frozen=True)
class ProtoChoice:
    scope: str  # self, intra-node, inter-node
    operation: str  # e.g. "remote memory write by ucp_put* from host memory to host"
    size_range: str
    method: str
    transports: tuple[tuple[str, str], ...]  # (transport, device)

    @property
    def is_rma(self) -> bool:
        return "ucp_put" in self.operation or "ucp_get" in self.operation

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["transports"] = [f"{t}/{d}" for t, d in self.transports]
        return out


def parse_proto_info(text: str) -> list[ProtoChoice]:
    """Rows of the tables UCX prints with UCX_PROTO_INFO=y, one per (operation, size range)."""
    out: list[ProtoChoice] = []
    scope, operation = "", ""
    for raw in text.splitlines():
        line = _TS.sub("", raw).strip()
        if m := _SCOPE.match(line):
            scope, operation = m.group(2), ""
        elif m := _TITLE.match(line):
            operation = m.group(1)
        elif operation and (m := _ROW.match(line)):
            pairs = tuple(_TLDEV.findall(m.group(3)))
            if pairs:
                out.append(ProtoChoice(scope, operation, m.group(1), m.group(2), pairs))
    return list(dict.fromkeys(out))


def loaded_library(stem: str) -> Path | None:
    """Path of a shared library this process has mapped, e.g. the UCX that a NIXL plugin loaded."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if Path(path).name.startswith(stem):
            return Path(path)
    return None


def ucx_version() -> tuple[str | None, str | None]:
    """(version, library path) of the libucp loaded in this process; call after a UCX backend exists."""
    lib = loaded_library("libucp")
    if lib is None:
        return None, None
    try:
        ucp = ctypes.CDLL(str(lib))
        ucp.ucp_get_version_string.restype = ctypes.c_char_p
        raw = ucp.ucp_get_version_string()
    except (OSError, AttributeError):
        return None, str(lib)
    return (raw.decode() if raw else None), str(lib)


def transport_modules(libucp: str | None) -> list[str]:
    """UCX transport modules shipped beside that libucp (cma, cuda, ib, rocm, ...)."""
    if not libucp:
        return []
    names: set[str] = set()
    for d in (Path(libucp).parent / "ucx", Path(libucp).parent.parent / "lib" / "ucx"):
        if d.is_dir():
            for f in d.glob("libuct_*.so*"):
                names.add(f.name.split(".so")[0].removeprefix("libuct_"))
    return sorted(names)
