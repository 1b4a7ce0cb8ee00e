"""The RDMA devices a worker sees, read from ``ibv_devinfo -v`` as the job captured it where the worker runs
(inside its container), checked before the engine starts.

What is checked: at least one device is visible (a container without the NIC's verbs provider configuration
and library sees none); each device UCX_NET_DEVICES names exists with that port ACTIVE and a RoCE v2 GID
(or an InfiniBand link); and, where UCX's ``rc_verbs`` transport is used, each such device supports shared
receive queues: ``max_srq`` 0 (what ionic NICs report) leaves rc_verbs unable to connect, a known UCX gap;
and the GID index UCX will use (``UCX_IB_GID_INDEX``) names an IPv4 RoCE v2 GID on that port (a link-local or
RoCE v1 GID there does not route between the nodes), or with ``auto`` which indexes UCX could pick.

Which verbs provider library libibverbs loaded, read from the dynamic loader's trace of ``ibv_devinfo -l`` run
with ``LD_DEBUG=libs`` in the same container (glibc prints ``calling init: PATH`` for each object it
initialises; a provider's constructor registers it with libibverbs then, so that order is libibverbs' order):
the ``lib<name>-rdmav<ABI>.so`` paths are recorded as ``provider_libraries``. A library the config names
(``RDMA_PROVIDER_LIBS``, passed as ``--expect-provider``) must be the first of its name loaded: libibverbs
gives a device to the first registered provider that takes it (rdma-core ``libibverbs/init.c``,
``try_drivers``), so another copy loaded before it (the image's own) is the one used; the check then fails the
role naming both.

``python -m atomdyn_launchers.job.rdma DEVINFO --json OUT [--need-srq] [--net-devices D,...] [--gid-index N]
[--providers LD_DEBUG_TEXT] [--expect-provider LIB ...]`` writes the parsed devices, the loaded providers and
the problems to OUT (always) and exits 1 when there is a problem. Standard library only: it runs with the
node's Python.
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
# glibc's LD_DEBUG=libs line for an object whose initialisers run ("  1234:\tcalling init: /path/lib.so").
_CALLING_INIT = re.compile(r"^\s*(?:\d+:\s*)?calling init: (\S+)\s*$")
# A verbs provider as libibverbs names it: lib<name> and the provider suffix -rdmav<ABI>.so (rdma-core
# CMakeLists.txt IBVERBS_PROVIDER_SUFFIX; the ABI is that libibverbs release's IBVERBS_PABI_VERSION).
_PROVIDER = re.compile(r"(?:^|/)lib(?P<name>[^/]+)-rdmav(?P<abi>\d+)\.so$")
# libibverbs' message for a provider it cannot dlopen (rdma-core libibverbs/dynamic_driver.c, load_driver).
_LOAD_WARNING = re.compile(r"^libibverbs: Warning: couldn't load driver '([^']+)'")


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
            "no RDMA device is visible where the worker runs: is /dev/infiniband passed, and does the image "
            "have the NIC's verbs provider (an /etc/libibverbs.d entry and its library) or RDMA_PROVIDER_LIBS "
            "name one?"
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


def provider_name(path: str) -> str | None:
    """``ionic`` for ``.../libionic-rdmav34.so``; None for a library that is not a verbs provider."""
    match = _PROVIDER.search(path)
    return match.group("name") if match else None


def provider_abi(path: str) -> str | None:
    """``34`` for ``.../libionic-rdmav34.so``: the libibverbs provider ABI the library was built for."""
    match = _PROVIDER.search(path)
    return match.group("abi") if match else None


def loaded_objects(text: str) -> list[str]:
    """Every object the loader initialised, in its order, from ``LD_DEBUG=libs`` output; each once."""
    loaded: list[str] = []
    for line in text.splitlines():
        match = _CALLING_INIT.match(line)
        if match and match.group(1) not in loaded:
            loaded.append(match.group(1))
    return loaded


def parse_loaded_providers(text: str) -> list[str]:
    """The verbs provider libraries in the order the loader initialised them (the order libibverbs registered
    them: each registers from its constructor), from ``LD_DEBUG=libs`` output; each once."""
    return [path for path in loaded_objects(text) if provider_name(path)]


def load_warnings(text: str) -> list[str]:
    """libibverbs' warnings for providers it could not load: the path it tried, with the loader's reason."""
    return [line.strip() for line in text.splitlines() if _LOAD_WARNING.match(line.strip())]


def check_providers(loaded: list[str], expected: list[str], warnings: list[str] | None = None) -> list[str]:
    """Problems: each configured library that is not the first loaded provider of its name (the one that
    libibverbs gives that provider's devices to), naming the one that is."""
    problems: list[str] = []
    for want in expected:
        name = provider_name(want)
        if name is None:
            first = want if want in loaded else None
        else:
            first = next((p for p in loaded if provider_name(p) == name), None)
        if first == want:
            continue
        if first is None:
            problem = (
                f"RDMA_PROVIDER_LIBS names {want}, but no {name or want} provider was loaded "
                f"(loaded: {', '.join(loaded) or 'none'})"
            )
        else:
            problem = (
                f"RDMA_PROVIDER_LIBS names {want}, but {first} was loaded first: libibverbs gives the "
                f"{name} devices to it, not to the configured library"
            )
        abi = provider_abi(want)
        others = sorted({a for p in loaded if (a := provider_abi(p)) is not None and a != abi})
        if name is not None and others:
            problem += (
                f"; the image's libibverbs loads providers built for rdmav{'/'.join(others)}, "
                f"the configured one is rdmav{abi}"
            )
        stem = want.removesuffix(f"-rdmav{abi}.so") if name is not None else want
        problem += "".join(f"; {w}" for w in warnings or [] if f"'{stem}-rdmav" in w)
        problems.append(problem)
    return problems


def report(
    devices: list[RdmaDevice],
    problems: list[str],
    gid_index: str = "auto",
    providers: list[str] | None = None,
    expected_providers: list[str] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "schema": "atomdyn-rdma-check/1",
        "ok": not problems,
        "problems": problems,
        # "auto": UCX picks; each port's ipv4_gid_indexes say which it could pick on a routed IPv4 fabric.
        "gid_index": gid_index,
        # The verbs provider libraries loaded where the worker runs, in libibverbs' order (None: not recorded);
        # the first of each name serves that provider's devices.
        "provider_libraries": providers,
        "expected_provider_libraries": expected_providers or [],
        "provider_load_warnings": warnings or [],
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
    parser.add_argument(
        "--providers",
        type=Path,
        help="the captured output of `LD_DEBUG=libs ibv_devinfo -l` (stdout and stderr)",
    )
    parser.add_argument(
        "--expect-provider",
        action="append",
        default=[],
        help="a provider library the config names: it must be the first of its name loaded (repeatable)",
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
    providers: list[str] | None = None
    warnings: list[str] = []
    if args.providers is not None:
        try:
            trace = args.providers.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            if args.expect_provider:
                problems.append(f"cannot read the provider record {args.providers}: {exc.strerror}")
        else:
            providers, warnings = parse_loaded_providers(trace), load_warnings(trace)
    # libibverbs loads providers only once it finds a device (init.c): with none, the device problem says it.
    if args.expect_provider and devices and providers is not None:
        problems += check_providers(providers, args.expect_provider, warnings)
    elif args.expect_provider and devices and args.providers is None:
        problems.append("the configured provider libraries cannot be checked: no --providers record")
    atomic_write_json(
        args.json, report(devices, problems, args.gid_index, providers, args.expect_provider, warnings)
    )
    for device in devices:
        ports = ", ".join(f"{p.port} {p.state} {p.link_layer} ({len(p.gids)} GIDs)" for p in device.ports)
        print(f"{device.name}: max_srq {device.max_srq}; ports {ports}")
    if providers is not None:
        print(f"verbs provider libraries loaded: {', '.join(providers) or 'none'}")
    for problem in problems:
        print(f"RDMA check: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
