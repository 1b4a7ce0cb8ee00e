"""The RDMA devices a worker sees, read from ``ibv_devinfo -v`` as the job captured it where the worker runs
(inside its container), checked before the engine starts.

What is checked: at least one device is visible (a container without the NIC's verbs provider configuration
and library sees none); each device UCX_NET_DEVICES names exists with that port ACTIVE and a RoCE v2 GID
(or an InfiniBand link); and, where UCX's ``rc_verbs`` transport is used, each such device supports shared
receive queues: ``max_srq`` 0 (what ionic NICs report) leaves rc_verbs unable to connect, a known UCX gap.

``python -m atomdyn_launchers.job.rdma DEVINFO --json OUT [--need-srq] [--net-devices D,...]`` writes the
parsed devices and the problems to OUT (always) and exits 1 when there is a problem. Standard library only:
it runs with the node's Python.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json

_GID = re.compile(r"^GID\[\s*(\d+)\]:\s*(\S+?)(?:,\s*(.+))?$")


@dataclass
class RdmaGid:
    index: int
    gid: str
    kind: str  # "RoCE v2", "RoCE v1", "" (InfiniBand)


@dataclass
class RdmaPortInfo:
    port: int
    state: str = ""
    link_layer: str = ""
    gids: list[RdmaGid] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.state.startswith("PORT_ACTIVE")

    @property
    def usable(self) -> bool:
        """ACTIVE and addressable: an InfiniBand link, or a RoCE v2 GID on Ethernet."""
        if not self.active:
            return False
        return self.link_layer == "InfiniBand" or any(g.kind == "RoCE v2" for g in self.gids)


@dataclass
class RdmaDevice:
    name: str
    fields: dict[str, str] = field(default_factory=dict)
    ports: list[RdmaPortInfo] = field(default_factory=list)

    @property
    def max_srq(self) -> int | None:
        raw = self.fields.get("max_srq")
        try:
            return int(raw, 0) if raw is not None else None
        except ValueError:
            return None


def parse_devinfo(text: str) -> list[RdmaDevice]:
    """Devices, their attributes and ports from ``ibv_devinfo -v`` output (rdma-core's format: ``hca_id:``
    starts a device, ``port:`` a port; ``key: value`` lines; ``GID[ i]: gid, RoCE v2`` lines per port)."""
    devices: list[RdmaDevice] = []
    port: RdmaPortInfo | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        gid = _GID.match(line)
        if gid and port is not None:
            port.gids.append(RdmaGid(int(gid.group(1)), gid.group(2), (gid.group(3) or "").strip()))
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            devices.append(RdmaDevice(value))
            port = None
        elif not devices:
            continue
        elif key == "port":
            port = RdmaPortInfo(int(value.split()[0]))
            devices[-1].ports.append(port)
        elif port is not None and key in ("state", "link_layer"):
            setattr(port, key, value)
        elif port is None:
            devices[-1].fields[key] = value
    return devices


def check_devices(
    devices: list[RdmaDevice], net_devices: list[str] | None = None, need_srq: bool = False
) -> list[str]:
    """Problems, each naming the device and what is wrong; empty when the KV path can use the devices."""
    if not devices:
        return [
            "no RDMA device is visible where the worker runs: is /dev/infiniband passed and the NIC's verbs "
            "provider (its /etc/libibverbs.d entry and provider library) mounted?"
        ]
    by_name = {d.name: d for d in devices}
    used: list[RdmaDevice] = []
    problems: list[str] = []
    for entry in net_devices or []:
        name, sep, port_text = entry.partition(":")
        if not sep:
            continue  # a network interface (a TCP transport), not an RDMA device
        device = by_name.get(name)
        if device is None:
            problems.append(f"UCX_NET_DEVICES names {entry}, but no RDMA device {name} is visible here")
            continue
        used.append(device)
        port = next((p for p in device.ports if str(p.port) == port_text), None)
        if port is None:
            problems.append(f"{name} has no port {port_text}")
        elif not port.usable:
            problems.append(
                f"{entry} is not usable: state {port.state or '?'}, link {port.link_layer or '?'}, "
                f"{sum(g.kind == 'RoCE v2' for g in port.gids)} RoCE v2 GID(s)"
            )
    if not net_devices:
        used = devices
        if not any(p.usable for d in devices for p in d.ports):
            problems.append("no RDMA port is ACTIVE with a RoCE v2 GID or an InfiniBand link")
    if need_srq:
        for device in used:
            if device.max_srq == 0:
                problems.append(
                    f"{device.name} reports max_srq 0: UCX's rc_verbs transport needs shared receive queues "
                    "(SRQ), so KV cannot move over this NIC with it (known UCX gap for NICs without SRQ, "
                    "e.g. ionic)"
                )
            elif device.max_srq is None:
                problems.append(f"{device.name}: ibv_devinfo -v shows no max_srq (run with -v)")
    return problems


def report(devices: list[RdmaDevice], problems: list[str]) -> dict[str, Any]:
    return {
        "schema": "atomdyn-rdma-check/1",
        "ok": not problems,
        "problems": problems,
        "devices": [
            {
                "device": d.name,
                "max_srq": d.max_srq,
                "fw_ver": d.fields.get("fw_ver"),
                "vendor_id": d.fields.get("vendor_id"),
                "vendor_part_id": d.fields.get("vendor_part_id"),
                "ports": [{**asdict(p), "active": p.active} for p in d.ports],
            }
            for d in devices
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atomdyn_launchers.job.rdma", description=__doc__)
    parser.add_argument("devinfo", type=Path, help="the captured output of `ibv_devinfo -v`")
    parser.add_argument("--json", type=Path, required=True, help="where to write the parsed devices")
    parser.add_argument("--need-srq", action="store_true", help="fail a device that reports max_srq 0")
    parser.add_argument("--net-devices", default="", help="UCX_NET_DEVICES (comma-separated)")
    args = parser.parse_args(argv)
    try:
        text = args.devinfo.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"rdma check: cannot read {args.devinfo}: {exc.strerror}", file=sys.stderr)
        return 2
    devices = parse_devinfo(text)
    wanted = [d for d in args.net_devices.split(",") if d]
    problems = check_devices(devices, wanted or None, need_srq=args.need_srq)
    atomic_write_json(args.json, report(devices, problems))
    for device in devices:
        ports = ", ".join(f"{p.port} {p.state} {p.link_layer} ({len(p.gids)} GIDs)" for p in device.ports)
        print(f"{device.name}: max_srq {device.max_srq}; ports {ports}")
    for problem in problems:
        print(f"RDMA check: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
