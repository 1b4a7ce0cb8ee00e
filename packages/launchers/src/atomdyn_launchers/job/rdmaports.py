"""The RDMA ports of a node as sysfs shows them (``/sys/class/infiniband``): state and RoCE v2 GIDs. Read by the
node check and by the UCX check (:mod:`atomdyn_launchers.job.ucx_check`); standard library only."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

SYSFS_IB = Path("/sys/class/infiniband")


@dataclass(frozen=True)
class RdmaPort:
    device: str
    port: str
    state: str
    roce_v2: tuple[tuple[int, str, str], ...]  # (gid index, gid, netdev)


def gid_text(raw: str) -> str:
    """A GID as sysfs prints it; IPv4-mapped ones (RoCE v2 over IPv4) as the IPv4 address."""
    try:
        addr = ipaddress.IPv6Address(raw.strip())
    except ValueError:
        return raw.strip()
    return str(addr.ipv4_mapped) if addr.ipv4_mapped else str(addr)


def rdma_ports(root: Path = SYSFS_IB) -> list[RdmaPort]:
    """Every RDMA port with its state and RoCE v2 GIDs, read from sysfs (``ports/N/gid_attrs/types/I``)."""
    found: list[RdmaPort] = []
    for device in sorted(root.iterdir()) if root.is_dir() else []:
        for port in sorted((device / "ports").iterdir()) if (device / "ports").is_dir() else []:
            state = _read(port / "state")
            gids: list[tuple[int, str, str]] = []
            types = port / "gid_attrs" / "types"
            for entry in sorted(types.iterdir(), key=lambda p: int(p.name)) if types.is_dir() else []:
                if _read(entry).lower() != "roce v2":
                    continue
                gid = _read(port / "gids" / entry.name)
                if not gid or set(gid.replace(":", "")) == {"0"}:
                    continue
                netdev = _read(port / "gid_attrs" / "ndevs" / entry.name)
                gids.append((int(entry.name), gid_text(gid), netdev))
            found.append(RdmaPort(device.name, port.name, state, tuple(gids)))
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
