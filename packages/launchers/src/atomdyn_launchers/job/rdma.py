"""The RDMA devices a worker sees, read from ``ibv_devinfo -v`` as the job captured it where the worker runs
(inside its container), checked before the engine starts.

What is checked: at least one device is visible (a container without the NIC's verbs provider configuration
and library sees none); each device UCX_NET_DEVICES names exists with that port ACTIVE and a RoCE v2 GID
(or an InfiniBand link); and, where UCX's ``rc_verbs`` transport is used, each such device supports shared
receive queues: ``max_srq`` 0 (what ionic NICs report) leaves rc_verbs unable to connect, a known UCX gap;
and the GID index UCX will use (``UCX_IB_GID_INDEX``) names an IPv4 RoCE v2 GID on that port (a link-local or
RoCE v1 GID there does not route between the nodes), or with ``auto`` which indexes UCX could pick.

``python -m atomdyn_launchers.job.rdma DEVINFO --json OUT [--need-srq] [--net-devices D,...] [--gid-index N]``
writes the
parsed devices and the problems to OUT (always) and exits 1 when there is a problem. Standard library only:
it runs with the node's Python.
"""

from __future__ import annotations

import argparse
import ipaddress
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

    @property
    def ipv4_roce_v2(self) -> bool:
        """A RoCE v2 GID made from an IPv4 address (::ffff:a.b.c.d): what a routed IPv4 fabric needs."""
        try:
            mapped = ipaddress.IPv6Address(self.gid).ipv4_mapped
        except ValueError:
            return False
        return self.kind == "RoCE v2" and mapped is not None


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
    def ipv4_gid_indexes(self) -> list[int]:
        return [g.index for g in self.gids if g.ipv4_roce_v2]

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


def gid_problem(entry: str, port: RdmaPortInfo, gid_index: str) -> str | None:
    """Why UCX_IB_GID_INDEX=``gid_index`` is wrong on this port (RoCE: it must name an IPv4 RoCE v2 GID)."""
    if gid_index == "auto" or port.link_layer == "InfiniBand":
        return None
    index = int(gid_index)
    candidates = ", ".join(map(str, port.ipv4_gid_indexes)) or "none"
    gid = next((g for g in port.gids if g.index == index), None)
    if gid is None:
        return f"{entry} has no GID[{index}] (UCX_IB_GID_INDEX={index}); IPv4 RoCE v2 GIDs at: {candidates}"
    if not gid.ipv4_roce_v2:
        return (
            f"{entry} GID[{index}] is {gid.gid} ({gid.kind or 'no type'}), not an IPv4 RoCE v2 GID "
            f"(UCX_IB_GID_INDEX={index}); IPv4 RoCE v2 GIDs at: {candidates}"
        )
    return None


def check_devices(
    devices: list[RdmaDevice],
    net_devices: list[str] | None = None,
    need_srq: bool = False,
    gid_index: str = "auto",
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
        elif (why := gid_problem(entry, port, gid_index)) is not None:
            problems.append(why)
    if not net_devices:
        used = devices
        usable = [(f"{d.name}:{p.port}", p) for d in devices for p in d.ports if p.usable]
        if not usable:
            problems.append("no RDMA port is ACTIVE with a RoCE v2 GID or an InfiniBand link")
        elif all(gid_problem(entry, port, gid_index) for entry, port in usable):
            # UCX may take any of them: the index must be right on at least one (each is named).
            problems += [str(gid_problem(entry, port, gid_index)) for entry, port in usable]
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


def report(devices: list[RdmaDevice], problems: list[str], gid_index: str = "auto") -> dict[str, Any]:
    return {
        "schema": "atomdyn-rdma-check/1",
        "ok": not problems,
        "problems": problems,
        # "auto": UCX picks; each port's ipv4_gid_indexes say which it could pick on a routed IPv4 fabric.
        "gid_index": gid_index,
        "devices": [
            {
                "device": d.name,
                "max_srq": d.max_srq,
                "fw_ver": d.fields.get("fw_ver"),
                "vendor_id": d.fields.get("vendor_id"),
                "vendor_part_id": d.fields.get("vendor_part_id"),
                "ports": [
                    {**asdict(p), "active": p.active, "ipv4_gid_indexes": p.ipv4_gid_indexes} for p in d.ports
                ],
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
    parser.add_argument(
        "--gid-index", default="auto", help="UCX_IB_GID_INDEX: must be an IPv4 RoCE v2 GID (default: auto)"
    )
    args = parser.parse_args(argv)
    try:
        text = args.devinfo.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        print(f"rdma check: cannot read {args.devinfo}: {exc.strerror}", file=sys.stderr)
        return 2
    devices = parse_devinfo(text)
    wanted = [d for d in args.net_devices.split(",") if d]
    if args.gid_index != "auto" and not args.gid_index.isdigit():
        print(f"rdma check: --gid-index {args.gid_index!r} is neither a number nor auto", file=sys.stderr)
        return 2
    problems = check_devices(devices, wanted or None, need_srq=args.need_srq, gid_index=args.gid_index)
    atomic_write_json(args.json, report(devices, problems, args.gid_index))
    for device in devices:
        ports = ", ".join(f"{p.port} {p.state} {p.link_layer} ({len(p.gids)} GIDs)" for p in device.ports)
        print(f"{device.name}: max_srq {device.max_srq}; ports {ports}")
    for problem in problems:
        print(f"RDMA check: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
