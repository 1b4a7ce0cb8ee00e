"""``atom``: ``python -m dynamo.vllm`` on MI355X with ATOM as vLLM's platform plugin, KV moved by NIXL over
RoCE (ionic NICs) with the NIXL HOST-classification opt-in and the dma-buf registration helper.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.node_needs import NodeNeeds
from atomdyn_launchers.engines.base import Engine, EngineError, RoleContext, RolePlan, Timeouts
from atomdyn_launchers.engines.dynamo_vllm import VLLM_METRICS, VllmPlatform, devices, plan_vllm_role
from atomdyn_launchers.runtimes.devices import DeviceAccess, RdmaMounts
from atomdyn_launchers.sbatch import Arg, Shell

# The KV path on ionic RoCE: reliable-connected verbs (rc_verbs) carry the KV, and never `tcp` as a data
# transport, which would let a P/D run fall back to TCP silently instead of failing. The GID index
# (UCX_IB_GID_INDEX) is the config's: 1 is the project's default, not UCX's (UCX's is auto,
# src/uct/ib/base/ib_md.c at the pin) and not a property of ionic the pinned sources state; the RDMA check
# verifies on the worker's port, before the engine starts, that it names an IPv4 RoCE v2 GID there.
UCX_PATHS = ("host-vram", "rocm")
# NIXL makes each endpoint from the peer's worker address, and UCX then needs an auxiliary transport that can
# reach the peer's interface to exchange the RC connection messages (src/ucp/wireup/select.c at the pinned UCX).
# Across nodes that is UD or TCP: "tcp" names it `tcp:aux`, which UCX enables as an auxiliary only, never for a
# data lane (UCP_TL_RSC_FLAG_AUX, src/ucp/core/ucp_context.c); "ud" is the `rc_v` alias (rc_verbs plus
# ud_verbs:aux), whose UD queue pairs failed on ionic in field reports. The cross-node NIXL rung of the bring-up
# settles which one a cluster's NICs take.
UCX_WIREUP: Mapping[str, tuple[str, ...]] = {"tcp": ("rc_verbs", "tcp:aux"), "ud": ("rc_v",)}
# tcp:aux needs a device too. tcp's devices are netdevs (device type NET, src/uct/tcp/tcp_iface.c), and
# UCX_NET_DEVICES filters every NET device, tcp's included (ucp_is_resource_in_device_list, ucp_context.c): with
# the RDMA device alone in it tcp has no resource and an RC endpoint made from a worker address finds no
# auxiliary ("no auxiliary transport to ...", src/ucp/wireup/select.c). So a netdev joins UCX_NET_DEVICES:
# ATOM_UCX_AUX_NETDEV, by default ("roce") the one under each RDMA port, read on the node from the port's GID
# (sysfs gid_attrs/ndevs/<index>): its IPv4 address is the RoCE v2 GID's, so the peer's tcp address is reached
# by the route RoCE takes (UCX's tcp only connects through the interface of the best route to the peer's
# address, uct_tcp_iface_is_reachable_v2). The GID: UCX_IB_GID_INDEX, or with auto the first IPv4 RoCE v2 one.
AUX_NETDEV_ROCE = "roce"
SYSFS_IB = "/sys/class/infiniband"  # where the job reads the ports' GIDs (a test points it elsewhere)
# UCX_PROTO_INFO=y prints, per endpoint, the protocol table the evidence reads to prove which transport moved KV.
UCX_COMMON: Mapping[str, str] = {"UCX_PROTO_INFO": "y"}
# The validated path (default): no ROCm transport. That is what makes UCX classify VRAM as host memory: rocm_cpy
# is the only memory domain that detects ROCm memory, and UCX closes a memory domain with no selected transport
# ("closing md %s because it has no selected transport resources", src/ucp/core/ucp_context.c at the pin), so
# every buffer is host to it: the project's choice, not a UCX defect. UCX registers VRAM with a plain
# ibv_reg_mr, which the dma-buf helper turns into a dma-buf registration at the right offset; NIXL keeps a
# registration of VRAM classified as host only with the compatibility patch's opt-in. Safe only while every KV
# transfer is the NIC's zero-copy RDMA on that registration (the gates: every KV-sized row over rc zero-copy,
# the answer equal to an aggregated run's): a copy, an emulation or a shared-memory transport would touch VRAM
# with the CPU. No shared-
# memory transport either: cma and posix/sysv copy through the CPU, and on VRAM that UCX takes for host memory
# they would fail or read through the BAR; KV between two workers of one node goes through the NIC too.
HOST_VRAM_TLS = ("self",)
UCX_HOST_VRAM: Mapping[str, str] = {"NIXL_COMPAT_ALLOW_HOST_VRAM": "1"}
# The ROCm-transport variant (ATOM_UCX_PATH=rocm): UCX classifies VRAM as ROCm memory and registers it through
# its own dma-buf support (off by default in UCX); no helper, no opt-in. Device memory between workers of one
# node goes over rocm_ipc; `sm` (posix, sysv, xpmem, knem, cma) then sees only real host memory.
# UCX decides dma-buf support from /boot/config-$(uname -r) alone (src/uct/rocm/base/rocm_base.c at b56982d8),
# so the container gets the node's file (DeviceAccess.kernel_config); and "try", not "y": with "y" and no file
# UCX refuses the rocm_copy MD ("ROCm dmabuf support requested but not found", rocm_copy_md.c), and with it the
# only MD that detects ROCm memory. "try" (a value of UCX's ternary options, src/ucs/config/parser.c) opens
# the MD either way and uses dma-buf when the file says the kernel has it.
ROCM_TLS = ("rocm_copy", "rocm_ipc", "rocm", "sm", "self")
UCX_ROCM: Mapping[str, str] = {"UCX_MEMTYPE_CACHE": "y", "UCX_ROCM_COPY_DMABUF": "try"}
# ATOM's own settings (its recipes and CI).
ATOM_ENV: Mapping[str, str] = {
    "VLLM_ROCM_USE_AITER": "1",
    "SAFETENSORS_FAST_GPU": "1",
    "VLLM_RPC_TIMEOUT": "1800000",
}

# ATOM's tested container settings (its README and CI, read at f9017b58): Docker's default seccomp profile blocks
# memory-policy calls ROCm may make (mbind, set_mempolicy) and the cross-process memory calls of UCX's shared-
# memory transports; SYS_PTRACE allows those calls between a node's workers; a 64 MiB stack. Its P/D Slurm job adds
# the open-files limit below (dma-buf exports, endpoints and sockets are file descriptors). Not its --privileged:
# the devices are given one by one.
ATOM_CONTAINER_ARGS = (
    *("--security-opt", "seccomp=unconfined"),
    *("--cap-add", "SYS_PTRACE"),
    *("--ulimit", "stack=67108864"),
)
ATOM_PD_CONTAINER_ARGS = ("--ulimit", "nofile=65536:524288")


def container_args(mode: str | None) -> tuple[str, ...]:
    return ATOM_CONTAINER_ARGS + (() if mode == "agg" else ATOM_PD_CONTAINER_ARGS)


def ucx_path(ctx: RoleContext) -> str:
    if ctx.ucx_path not in UCX_PATHS:
        raise EngineError(f"unknown ATOM_UCX_PATH {ctx.ucx_path!r}; known: {', '.join(UCX_PATHS)}")
    return ctx.ucx_path


def ucx_tls(ctx: RoleContext) -> str:
    """UCX_TLS of the KV path: the RC transport and its wireup auxiliary, then the path's own transports."""
    if ctx.ucx_wireup not in UCX_WIREUP:
        raise EngineError(f"unknown ATOM_UCX_WIREUP {ctx.ucx_wireup!r}; known: {', '.join(UCX_WIREUP)}")
    rc, *aux = UCX_WIREUP[ctx.ucx_wireup]
    path = HOST_VRAM_TLS if ucx_path(ctx) == "host-vram" else ROCM_TLS
    return ",".join((rc, *path, *aux))


def _rdma_ports(ctx: RoleContext) -> list[tuple[str, str]]:
    """(device, port) of each RDMA device in the role's UCX_NET_DEVICES (``ionic_0:1``)."""
    entries = (ctx.ucx_net_devices or "").split(",")
    return [(device, port) for device, sep, port in (e.partition(":") for e in entries) if sep]


def ucx_net_devices(ctx: RoleContext) -> Arg | None:
    """UCX_NET_DEVICES of a P/D worker: the config's devices, and with the tcp wireup the netdev tcp:aux runs
    on (a name, or ``$UCX_AUX_NETDEV`` that :func:`aux_netdev_prelude` reads on the node). None: not set (UCX
    then uses every device, tcp's too)."""
    devices = ctx.ucx_net_devices
    if not devices or ctx.ucx_wireup != "tcp":
        return devices
    if ctx.ucx_aux_netdev != AUX_NETDEV_ROCE:
        listed = devices.split(",")
        return devices if ctx.ucx_aux_netdev in listed else f"{devices},{ctx.ucx_aux_netdev}"
    return Shell(shlex.quote(devices + ",") + '"$UCX_AUX_NETDEV"')


def aux_netdev_prelude(ctx: RoleContext) -> list[str]:
    """With the tcp wireup and ATOM_UCX_AUX_NETDEV=roce: the netdev under each RDMA port of UCX_NET_DEVICES, read
    from sysfs on the node, into UCX_AUX_NETDEV (comma-separated, each once); a port without one fails the role."""
    if not ctx.ucx_net_devices or ctx.ucx_wireup != "tcp" or ctx.ucx_aux_netdev != AUX_NETDEV_ROCE:
        return []
    ports = _rdma_ports(ctx)
    if not ports:
        raise EngineError(
            f"UCX_NET_DEVICES={ctx.ucx_net_devices} names no RDMA device with its port (ionic_0:1), so "
            "ATOM_UCX_AUX_NETDEV=roce finds no netdev for tcp:aux: name one in ATOM_UCX_AUX_NETDEV"
        )
    paths = " ".join(shlex.quote(f"{SYSFS_IB}/{device}/ports/{port}") for device, port in ports)
    index = shlex.quote(ctx.ucx_gid_index)
    gid = "auto (the first IPv4 RoCE v2 GID)" if ctx.ucx_gid_index == "auto" else ctx.ucx_gid_index
    return [
        "# tcp:aux (UCX's wireup) needs a netdev in UCX_NET_DEVICES, which filters tcp's devices too: the one",
        "# under each RDMA port's GID (auto: its first IPv4 RoCE v2 GID), from sysfs. ATOM_UCX_AUX_NETDEV names",
        "# another.",
        "roce_netdev() {",
        "  local port=$1 index=$2 gid",
        '  if [ "$index" = auto ]; then',
        "    index=''",
        "    for gid in $(seq 0 255); do",
        '      if [ "$(cat "$port/gid_attrs/types/$gid" 2>/dev/null)" = "RoCE v2" ] &&',
        """        grep -qi '^0000:0000:0000:0000:0000:ffff:' "$port/gids/$gid" 2>/dev/null; then""",
        "        index=$gid",
        "        break",
        "      fi",
        "    done",
        "  fi",
        '  [ -n "$index" ] && cat "$port/gid_attrs/ndevs/$index" 2>/dev/null',
        "}",
        "UCX_AUX_NETDEV=''",
        f"RDMA_PORTS=({paths})",
        'for port in "${RDMA_PORTS[@]}"; do',
        f'  if ! netdev=$(roce_netdev "$port" {index}) || [ -z "$netdev" ]; then',
        f'    log "no netdev under GID {gid} of $port for tcp:aux (UCX_IB_GID_INDEX; or name one in '
        'ATOM_UCX_AUX_NETDEV)"',
        "    exit 3",
        "  fi",
        '  case ",$UCX_AUX_NETDEV," in',
        '    *",$netdev,"*) ;;',
        "    *) UCX_AUX_NETDEV=${UCX_AUX_NETDEV:+$UCX_AUX_NETDEV,}$netdev ;;",
        "  esac",
        "done",
        f'log "tcp:aux on $UCX_AUX_NETDEV, the netdev under {ctx.ucx_net_devices}"',
    ]


def _ucx_env(ctx: RoleContext) -> Mapping[str, Arg]:
    gid = {} if ctx.ucx_gid_index == "auto" else {"UCX_IB_GID_INDEX": ctx.ucx_gid_index}
    own = UCX_HOST_VRAM if ucx_path(ctx) == "host-vram" else UCX_ROCM
    env: dict[str, Arg] = {**UCX_COMMON, "UCX_TLS": ucx_tls(ctx), **gid, **own}
    devices = ucx_net_devices(ctx)
    if devices is not None:
        env["UCX_NET_DEVICES"] = devices
    return env


def _needs_helper(ctx: RoleContext) -> bool:
    # Only P/D moves KV over RDMA (and only the NIXL overlay image carries the helper: aggregated runs use the
    # base image, which has none); only the validated path registers VRAM through it.
    return ctx.mode != "agg" and ucx_path(ctx) == "host-vram"


MI355X = VllmPlatform(
    gpu_visibility="ROCR_VISIBLE_DEVICES",
    vendor="amd",
    ucx_env=_ucx_env,
    ucx_prelude=aux_netdev_prelude,
    extra_env=ATOM_ENV,
    model_args=True,
    preload_helper=_needs_helper,
    # P/D only: the NICs as the worker's container sees them (SRQ for rc_verbs), then NIXL's doctor.
    rdma_check=lambda ctx: ctx.mode != "agg",
    doctor=lambda ctx: ctx.mode != "agg",
    rdma_required=True,
    container_args=container_args,
    kernel_config=lambda ctx: ctx.mode != "agg" and ucx_path(ctx) == "rocm",
)


# A GPU is not bitwise reproducible across workers (other kernels and reduction orders for a prompt computed in
# one batch shape or another), so the P/D answer is not compared whole: its first 16 of the 24 tokens must equal
# the aggregated answer's (a near tie late in the answer may flip; KV read from a wrong place derails the first
# tokens), and where the two chose the same token their log probabilities must agree within 0.1 nats (noise
# between kernels is expected far below that, not yet measured on a GPU; wrong KV moves them by whole nats).
ANSWER_PREFIX_TOKENS = 16
ANSWER_LOGPROB_TOLERANCE = 0.1


class AtomEngine(Engine):
    name = "atom"
    vendor = "amd"
    logged_platform = "rocm"
    dynamo_module = "vllm"
    timeouts = Timeouts(ready_s=3600.0, settle_s=300.0, time_limit="04:00:00", first_response_s=1200.0)
    description = "dynamo.vllm with ATOM on MI355X, NIXL over RoCE"
    # P/D on the validated path: KV over RDMA (rc), zero-copy, never TCP; every worker's VRAM classified as host
    # registered through the helper's dma-buf (as many registrations as the worker made, no fixed count);
    # nixl_rocm as the backend, and each worker's doctor report. And the KV bytes themselves: the dma-buf offset
    # bug writes KV to the wrong place with no error, which every count above would miss. The fixed prompt, asked
    # alone at temperature 0, must start as the aggregated run's answer did, and agree in log probabilities
    # (ANSWER_PREFIX_TOKENS, ANSWER_LOGPROB_TOLERANCE: docs/nixl-path.md says why these). Both answer gates are
    # required: a P/D run whose fixed prompt's data is missing fails them ("no data"), never passes them over as
    # n/a, since they are the one check that catches a misplaced KV block.
    expectations = GateExpectations(
        nixl_transfers=True,
        external_prefix_hits=True,
        kv_transport="rc",
        forbidden_kv_transports=("tcp",),
        kv_zero_copy=True,
        dmabuf_registrations=True,
        nixl_backend="nixl_rocm",
        doctor_required=True,
        aggregated_answer=True,
        answer_prefix_tokens=ANSWER_PREFIX_TOKENS,
        answer_logprob_tolerance=ANSWER_LOGPROB_TOLERANCE,
        router_overlap=True,
        metrics=VLLM_METRICS,
        required=frozenset({"kv_answer_equals_aggregated", "kv_answer_logprob_max_delta"}),
    )
    platform = MI355X

    def run_expectations(self, config: Mapping[str, str]) -> GateExpectations:
        """The ROCm-transport path (ATOM_UCX_PATH=rocm) registers VRAM through UCX itself: no helper lines."""
        if config.get("ATOM_UCX_PATH") == "rocm":
            return replace(self.expectations, dmabuf_registrations=False)
        return self.expectations

    def images(self, kind: str | None, base_image: str | None, nixl_image: str | None) -> list[str]:
        """P/D runs need the NIXL overlay (ROCm UCX, NIXL, the dma-buf helper); the base image has none of it."""
        if kind == "disagg":
            if not nixl_image:
                raise EngineError(
                    "atom P/D runs need NIXL_IMAGE (the overlay with NIXL, ROCm UCX and the dma-buf helper): "
                    "DYNAMO_ATOM_IMAGE has no helper"
                )
            return [nixl_image]
        return super().images(kind, base_image, nixl_image)

    def launch_problems(
        self, kind: str, nodes: Sequence[str], net_devices: Callable[[str], str | None]
    ) -> list[str]:
        if kind != "disagg":
            return []
        return [
            f"UCX_NET_DEVICES names no device for {node}: atom P/D runs name the RDMA device(s) UCX moves KV "
            "over (on a node with several NICs UCX would pick one itself)"
            for node in nodes
            if not net_devices(node)
        ]

    def node_needs(self, kind: str | None) -> NodeNeeds:
        # The helper is checked where it is loaded: P/D runs (or a standalone check, which covers them).
        return NodeNeeds(
            gpu_devices=("/dev/kfd", "/dev/dri"),
            rdma="required",
            gpu_memory=True,
            dmabuf_shim=kind in (None, "disagg"),
        )

    def plan(self, ctx: RoleContext) -> RolePlan:
        return plan_vllm_role(ctx, self.platform)

    def container_devices(self, rdma: RdmaMounts | None = None) -> DeviceAccess:
        return devices(self.platform, rdma or RdmaMounts())
