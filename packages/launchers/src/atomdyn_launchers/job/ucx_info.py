"""What ``ucx_info -v -c -p -e -u t -P inter`` says, read in UCX's own format, and judged against what the worker
asked UCX for. Standard library only: it runs with the node's Python.

The command makes a UCP context with the worker's UCX variables (as ``ucx_info -d`` alone does not: that lists
UCT resources and applies no ``UCX_NET_DEVICES``), prints UCX's configuration as it read it (``-c``), the
context's resources after the ``UCX_TLS`` and ``UCX_*_DEVICES`` filters (``-p``), and an endpoint to a peer on
another node (``-e -P inter``). The formats, at the pinned UCX (b56982d8):

- ``-c``: ``NAME=VALUE`` (``src/ucs/config/parser.c``, ``fprintf(stream, "%s%s%s\\n", ...)``);
- ``-p``: ``#      resource %-2d :  md %-2d dev %-2d flags %c- %s/%s`` where the flag is ``a`` for a transport
  enabled as auxiliary only (``src/ucp/core/ucp_context.c``, ``ucp_context_print_info``; UCX 1.13 prints
  ``--``), ``#            md %-2d :  component %-2d %s``;
- ``-e``: ``#                 lane[N]:  R:tl/dev.P md[M] ...`` (``src/ucp/core/ucp_ep.c``), or
  ``<Failed to create UCP context>``/``worker``/``endpoint`` (``src/tools/info/proto_info.c``);
- UCX's log lines: ``[sec.usec] [host:pid:thread] file.c:line UCX LEVEL message``
  (``src/ucs/debug/log.c``, ``UCS_LOG_FMT``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# ucp_tl_aliases at the pinned UCX (src/ucp/core/ucp_context.c): an alias in UCX_TLS stands for these transports;
# a name ending in ":aux" is enabled for wireup only.
ALIASES: Mapping[str, tuple[str, ...]] = {
    "mm": ("posix", "sysv", "xpmem"),
    "sm": ("posix", "sysv", "xpmem", "knem", "cma"),
    "shm": ("posix", "sysv", "xpmem", "knem", "cma"),
    "ib": (
        "rc_verbs",
        "ud_verbs",
        "rc_mlx5",
        "ud_mlx5",
        "dc_mlx5",
        "gga_mlx5",
        "ud_mlx5:aux",
        "ud_verbs:aux",
        "srd",
        "rc_gda",
    ),
    "ud_v": ("ud_verbs",),
    "ud_x": ("ud_mlx5",),
    "ud": ("ud_mlx5", "ud_verbs"),
    "rc_v": ("rc_verbs", "ud_verbs:aux"),
    "rc_x": ("rc_mlx5", "ud_mlx5:aux"),
    "rc": ("rc_mlx5", "ud_mlx5:aux", "rc_verbs", "ud_verbs:aux"),
    "dc": ("dc_mlx5", "ud_mlx5:aux"),
    "dc_x": ("dc_mlx5", "ud_mlx5:aux"),
    "cuda": ("cuda_copy", "cuda_ipc", "gdr_copy"),
    "rocm": ("rocm_copy", "rocm_ipc", "rocm_gdr"),
    "ze": ("ze_copy", "ze_ipc", "ze_gdr"),
    "gga": ("gga_mlx5",),
}
# Transports whose devices are network devices (UCT_DEVICE_TYPE_NET), the ones UCX_NET_DEVICES filters: tcp's
# devices are netdevs (src/uct/tcp/tcp_iface.c), the verbs transports' are <RDMA device>:<port>.
NET_TRANSPORTS = frozenset(
    {"tcp", "rc_verbs", "ud_verbs", "rc_mlx5", "ud_mlx5", "dc_mlx5", "gga_mlx5", "srd", "rc_gda"}
)
# The device list variable of each device type name UCX's warning names (uct_device_type_names,
# src/uct/base/uct_md.c at the pin).
DEVICE_LISTS: Mapping[str, str] = {
    "network": "UCX_NET_DEVICES",
    "intra-node": "UCX_SHM_DEVICES",
    "accelerator": "UCX_ACC_DEVICES",
    "loopback": "UCX_SELF_DEVICES",
}
# The transports UCX_IB_GID_INDEX applies to (RoCE ports of the verbs transports).
IB_TRANSPORTS = NET_TRANSPORTS - {"tcp"}

_CONFIG = re.compile(r"^(UCX_[A-Z0-9_]+)=(.*)$")
_RESOURCE = re.compile(
    r"^#\s+resource\s+(\d+)\s+:\s+md\s+(\d+)\s+dev\s+(\d+)\s+flags\s+(\S)(\S)\s+([^/\s]+)/(\S+)\s*$"
)
_MD = re.compile(r"^#\s+md\s+(\d+)\s+:\s+component\s+(\d+)\s+(\S+)")
_LANE = re.compile(r"^#\s+lane\[(\d+)\]:\s+\d+:([^/\s]+)/(\S+?)(?:\.\d+)?\s")
_LOG = re.compile(
    r"^\[\d+\.\d+\]\s+\[[^\]]*\]\s+(\S+?):(\d+)\s+(\S+)\s+(FATAL|ERROR|WARN|DIAG|INFO|DEBUG|TRACE\w*)\s+(.*)$"
)
_VERSION = re.compile(r"^# (?:Library version|Version):?\s+(\S+)")
_FAILED = re.compile(r"^<Failed to create UCP (\w+)>")
_UNAVAILABLE = re.compile(
    r"([\w-]+) devices? (.+?) (?:is|are) not available, please use one or more of: (.*)$"
)
_UNAVAILABLE_TL = re.compile(r"^transports? (.+?) (?:is|are) not available, please use one or more of: (.*)$")
_BAD_GID = re.compile(r"invalid gid\[(\d+)\] on (\S+):(\d+)")


@dataclass(frozen=True)
class Resource:
    index: int
    md: int
    tl: str
    device: str
    aux: bool


@dataclass(frozen=True)
class LogLine:
    source: str  # file:line
    level: str
    message: str


@dataclass(frozen=True)
class UcxInfo:
    """One ``ucx_info`` output, parsed."""

    version: str | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    mds: tuple[str, ...] = ()
    resources: tuple[Resource, ...] = ()
    lanes: tuple[tuple[str, str], ...] = ()  # (transport, device) of each endpoint lane
    logs: tuple[LogLine, ...] = ()
    failed: str | None = None  # "context" | "worker" | "endpoint": what ucx_info could not create

    def devices_of(self, tl: str) -> list[str]:
        return [r.device for r in self.resources if r.tl == tl]


def parse(text: str) -> UcxInfo:
    version: str | None = None
    config: dict[str, str] = {}
    mds: list[str] = []
    resources: list[Resource] = []
    lanes: list[tuple[str, str]] = []
    logs: list[LogLine] = []
    failed: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if m := _CONFIG.match(line):
            config[m.group(1)] = m.group(2)
        elif m := _RESOURCE.match(line):
            aux = m.group(4) == "a"
            resources.append(Resource(int(m.group(1)), int(m.group(2)), m.group(6), m.group(7), aux))
        elif m := _MD.match(line):
            mds.append(m.group(3))
        elif m := _LANE.match(line):
            lanes.append((m.group(2), m.group(3)))
        elif m := _LOG.match(line.strip()):
            logs.append(LogLine(f"{m.group(1)}:{m.group(2)}", m.group(4), m.group(5).strip()))
        elif m := _FAILED.match(line):
            failed = failed or m.group(1)
        elif (m := _VERSION.match(line)) and version is None:
            version = m.group(1)
    return UcxInfo(version, config, tuple(mds), tuple(resources), tuple(lanes), tuple(logs), failed)


@dataclass(frozen=True)
class Wanted:
    """One transport UCX_TLS asks for: ``alias`` when it came from one, ``aux`` when for wireup only."""

    tl: str
    aux: bool
    alias: str | None = None


def wanted_transports(ucx_tls: str) -> list[Wanted]:
    """The transports of an allow-list UCX_TLS, aliases expanded; none for ``all`` or a deny list (``^...``)."""
    value = ucx_tls.strip()
    if not value or value.startswith("^"):
        return []
    out: list[Wanted] = []
    for name in (n.strip() for n in value.split(",")):
        if not name or name == "all":
            continue
        base, _, suffix = name.partition(":")
        if base in ALIASES:
            for member in ALIASES[base]:
                tl, _, aux = member.partition(":")
                out.append(Wanted(tl, bool(aux) or suffix == "aux", base))
        else:
            out.append(Wanted(base, suffix == "aux"))
    return out


@dataclass(frozen=True)
class Problem:
    variable: str  # the variable to change
    message: str

    def text(self) -> str:
        return f"{self.variable}: {self.message}"


def _listed(value: str) -> list[str]:
    return [] if value.strip() in ("", "all") else [v.strip() for v in value.split(",") if v.strip()]


def _missing_transports(info: UcxInfo, tls: str, net_devices: str) -> list[Problem]:
    wanted = wanted_transports(tls)
    have = {r.tl for r in info.resources}
    problems: list[Problem] = []
    direct = [w for w in wanted if w.alias is None and w.tl not in have]
    for w in direct:
        problems.append(_no_device(w.tl, w.aux, tls, net_devices, info))
    for alias in dict.fromkeys(w.alias for w in wanted if w.alias is not None):
        members = [w for w in wanted if w.alias == alias]
        data = [w for w in members if not w.aux]
        aux = [w for w in members if w.aux]
        if data and not any(w.tl in have for w in data):
            problems.append(_no_device(alias, False, tls, net_devices, info))
        elif (
            aux
            and any(w.tl in have for w in data if w.tl in IB_TRANSPORTS)
            and not any(w.tl in have for w in aux)
        ):
            names = "/".join(w.tl for w in aux)
            problems.append(_no_device(f"{alias}'s auxiliary {names}", True, tls, net_devices, info))
    return problems


def _no_device(name: str, aux: bool, tls: str, net_devices: str, info: UcxInfo) -> Problem:
    role = " (auxiliary: the wireup messages that connect RC endpoints)" if aux else ""
    base = name.split("'", 1)[0].split(":", 1)[0]
    members = ALIASES.get(base, (base,))
    network = any(m.split(":", 1)[0] in NET_TRANSPORTS for m in members) or "auxiliary" in name
    if network and _listed(net_devices):
        return Problem(
            "UCX_NET_DEVICES",
            f"UCX_TLS={tls} asks for {name}{role}, but UCX_NET_DEVICES={net_devices} leaves it no device "
            f"(UCX opened: {_resources_text(info)}): add a device of {name} to UCX_NET_DEVICES "
            f"(a netdev for tcp, <RDMA device>:<port> for the verbs transports) or take it out of UCX_TLS",
        )
    return Problem(
        "UCX_TLS",
        f"UCX_TLS={tls} asks for {name}{role}, but UCX found no device of it here "
        f"(UCX opened: {_resources_text(info)})",
    )


def _resources_text(info: UcxInfo) -> str:
    return ", ".join(f"{r.tl}/{r.device}" + (" (aux)" if r.aux else "") for r in info.resources) or "nothing"


def judge(
    info: UcxInfo,
    env: Mapping[str, str],
    roce_v2: Mapping[str, Sequence[int]] | None = None,
) -> list[Problem]:
    """What stops the worker's UCX, each problem naming the variable to change. ``env``: the worker's UCX
    variables (UCX's own ``-c`` values win where it printed them); ``roce_v2``: ``device:port`` -> the indexes
    of its RoCE v2 GIDs as sysfs lists them, every port of the node (None: not read)."""

    def value(name: str) -> str:
        return info.config.get(name, env.get(name, ""))

    tls = value("UCX_TLS")
    net = value("UCX_NET_DEVICES")
    problems: list[Problem] = []
    for log in info.logs:
        if log.level not in ("FATAL", "ERROR", "WARN"):
            continue
        if m := _UNAVAILABLE.search(log.message):
            problems.append(
                Problem(
                    DEVICE_LISTS.get(m.group(1), "UCX_NET_DEVICES"),
                    f"{m.group(2)} not on this node as UCX sees it (UCX's devices: {m.group(3)}); "
                    f"the RDMA device or its port is absent, or misnamed ({log.source})",
                )
            )
        elif m := _UNAVAILABLE_TL.search(log.message):
            problems.append(
                Problem("UCX_TLS", f"transport {m.group(1)} is not in this UCX (it has: {m.group(2)})")
            )
        elif "rocm" in log.source.lower() or "ROCm" in log.message:
            variable = "UCX_ROCM_COPY_DMABUF" if "dmabuf" in log.message.lower() else "UCX_TLS"
            hint = (
                " (UCX reads dma-buf support only from /boot/config-$(uname -r): mount it, or set try)"
                if variable == "UCX_ROCM_COPY_DMABUF"
                else ""
            )
            problems.append(
                Problem(variable, f"the ROCm memory domain did not open: {log.message} ({log.source}){hint}")
            )
        elif m := _BAD_GID.search(log.message):
            problems.append(
                Problem(
                    "UCX_IB_GID_INDEX",
                    f"GID index {m.group(1)} is not valid on {m.group(2)}:{m.group(3)} ({log.source})",
                )
            )
    problems += _missing_transports(info, tls, net)
    problems += _gid_problems(info, value("UCX_IB_GID_INDEX"), net, roce_v2)
    if info.failed and not problems:
        errors = [f"{log.message} ({log.source})" for log in info.logs if log.level in ("FATAL", "ERROR")]
        problems.append(
            Problem(
                "UCX_TLS",
                f"ucx_info could not create a UCP {info.failed} with UCX_TLS={tls or '(unset)'}, "
                f"UCX_NET_DEVICES={net or '(unset)'}: " + ("; ".join(errors) or "no error line"),
            )
        )
    return list(dict.fromkeys(problems))


def _gid_problems(
    info: UcxInfo, gid_index: str, net_devices: str, roce_v2: Mapping[str, Sequence[int]] | None
) -> list[Problem]:
    """The GID index against the RDMA ports the worker's UCX uses: each must have a RoCE v2 GID there."""
    if roce_v2 is None or not gid_index.strip().isdigit():
        return []
    used = {r.device for r in info.resources if r.tl in IB_TRANSPORTS}
    ports = [d for d in _listed(net_devices) if ":" in d] or sorted(used)
    problems: list[Problem] = []
    index = int(gid_index)
    for port in ports:
        if port not in roce_v2:
            if used or any(":" in d for d in _listed(net_devices)):
                problems.append(
                    Problem(
                        "UCX_NET_DEVICES",
                        f"{port} is not an RDMA port of this node (sysfs has: {', '.join(sorted(roce_v2)) or 'none'})",
                    )
                )
            continue
        if index not in roce_v2[port]:
            have = ", ".join(str(i) for i in roce_v2[port]) or "none"
            problems.append(
                Problem(
                    "UCX_IB_GID_INDEX",
                    f"GID index {index} on {port} is not a RoCE v2 GID (its RoCE v2 GIDs: {have})",
                )
            )
    return problems


def summary(info: UcxInfo) -> str:
    """One line: UCX's version, the resources it opened and the endpoint's lanes."""
    lanes = ", ".join(f"{tl}/{dev}" for tl, dev in info.lanes) or "none"
    version = f"UCX {info.version}" if info.version else "UCX"
    return f"{version}: resources {_resources_text(info)}; endpoint lanes {lanes}"
