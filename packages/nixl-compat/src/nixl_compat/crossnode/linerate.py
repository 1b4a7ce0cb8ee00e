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


def line_rate(net_devices: str, peer: str | None, sys: Path = SYS) -> dict[str, Any]:
    """The devices the transfer may take and their summed rate: UCX_NET_DEVICES when set, else the route's."""
    devices = [d for d in net_devices.split(",") if d and d != "all"]
    source = "UCX_NET_DEVICES"
    if not devices and peer:
        interface = route_interface(peer)
        devices, source = ([interface], f"the route to {peer}") if interface else ([], source)
    rates = {d: device_rate_gbit(d, sys) for d in devices}
    known = [r for r in rates.values() if r is not None]
    total = sum(known) if known and len(known) == len(rates) else None
    return {"devices": devices, "source": source, "per_device_gbit": rates, "gbit": total}
