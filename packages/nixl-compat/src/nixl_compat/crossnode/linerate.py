"""The line rate of the link a transfer takes, as the device reports it (sysfs), for the bandwidth figure.

RDMA devices (``UCX_NET_DEVICES=ionic_0:1``): ``/sys/class/infiniband/<dev>/ports/<port>/rate``
("400 Gb/sec (4X NDR)"). Network interfaces (``eth0``, or the interface of the route to the peer when
``UCX_NET_DEVICES`` is unset): ``/sys/class/net/<if>/speed`` in Mb/s (-1 or unreadable: unknown).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

SYS = Path("/sys/class")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def device_rate_gbit(device: str, sys: Path = SYS) -> float | None:
    """Gbit/s of ``dev:port`` (an RDMA port) or of a network interface; None when the device says nothing."""
    name, _, port = device.partition(":")
    if port:
        try:
            match = _RATE.match((sys / "infiniband" / name / "ports" / port / "rate").read_text())
        except OSError:
            match = None
        if match:
            return float(match.group(1))
    try:
        speed = int((sys / "net" / name / "speed").read_text().strip())
    except (OSError, ValueError):
        return None
    return speed / 1000 if speed > 0 else None


def route_interface(address: str) -> str | None:
    """The interface of this node's route to ``address`` (``ip -o route get``), None when there is none."""
    try:
        out = subprocess.run(
            ["ip", "-o", "route", "get", address], capture_output=True, text=True, timeout=5, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"\bdev (\S+)", out)
    return match.group(1) if match else None


def _tcp_carries_data(tls: str) -> bool:
    """Whether ``UCX_TLS`` lets tcp carry data: unset, a deny list, or ``tcp`` itself listed (``tcp:aux`` is
    UCX's wireup auxiliary only, never a data lane)."""
    names = [t.strip() for t in tls.split(",") if t.strip()]
    return not names or names[0].startswith("^") or "tcp" in names or "all" in names


def line_rate(net_devices: str, peer: str | None, sys: Path = SYS, tls: str = "") -> dict[str, Any]:
    """The devices the transfer may take and their summed rate: UCX_NET_DEVICES when set, else the route's.
    A network interface listed beside RDMA devices only for tcp:aux (``tls``, the worker's UCX_TLS, gives tcp
    no data lane; the atom jobs add the netdev under the RoCE port so that the wireup has a device) carries no
    KV: it is kept apart (``aux_devices``), not added to the rate (it is often the same NIC's own netdev)."""
    listed = [d for d in net_devices.split(",") if d and d != "all"]
    aux = [] if _tcp_carries_data(tls) else [d for d in listed if ":" not in d]
    if len(aux) == len(listed):  # netdevs alone: they are what the transfer takes
        aux = []
    devices = [d for d in listed if d not in aux]
    source = "UCX_NET_DEVICES"
    if not devices and peer:
        interface = route_interface(peer)
        devices, source = ([interface], f"the route to {peer}") if interface else ([], source)
    rates = {d: device_rate_gbit(d, sys) for d in devices}
    known = [r for r in rates.values() if r is not None]
    total = sum(known) if known and len(known) == len(rates) else None
    found: dict[str, Any] = {"devices": devices, "source": source, "per_device_gbit": rates, "gbit": total}
    if aux:
        found["aux_devices"] = aux
    return found
