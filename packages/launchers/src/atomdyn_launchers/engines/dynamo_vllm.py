"""The one builder of ``python -m dynamo.vllm`` roles, shared by every vLLM-based engine (vllm, atom, vllm-cpu).

What differs per platform is data (:class:`VllmPlatform`): the UCX environment, extra flags and environment,
the KV buffer device, whether the dma-buf helper is preloaded, the GPU visibility variable, the devices a
container gets, and whether the in-container checks (RDMA devices, ``nixl-compat doctor``) gate the engine.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from atomdyn_launchers.contract.metrics import MetricNames
from atomdyn_launchers.engines.base import (
    RoleContext,
    RolePlan,
    dynamo_env,
    frontend,
    record_preludes,
    run_path,
    worker_name,
    wrap,
)
from atomdyn_launchers.runtimes.base import quoted
from atomdyn_launchers.runtimes.devices import DeviceAccess, RdmaMounts
from atomdyn_launchers.sbatch import Arg, Shell


def kv_transfer_config(kv_buffer_device: str | None = None, cross_layer_blocks: bool = False) -> str:
    config: dict[str, object] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    if kv_buffer_device is not None:
        config["kv_buffer_device"] = kv_buffer_device
    if cross_layer_blocks:  # one contiguous range per block (KV_CROSS_LAYER_BLOCKS=yes)
        config["kv_connector_extra_config"] = {"enable_cross_layers_blocks": "true"}
    return json.dumps(config, separators=(",", ":"))


KV_TRANSFER_CONFIG = kv_transfer_config()
# What every dynamo.vllm worker publishes on its system port (vLLM's own metrics, relayed by Dynamo), as the
# evidence reads them: the NixlConnector's transfer histogram, bytes and failures; the prefix cache's queries
# and hits, and the external ones (tokens read from another worker). Set once here for the family (vllm,
# vllm-cpu, atom), named in each engine's GateExpectations.
VLLM_METRICS = MetricNames(
    kv_transfers="vllm:nixl_xfer_time_seconds_count",
    kv_seconds="vllm:nixl_xfer_time_seconds_sum",
    kv_bytes="vllm:nixl_bytes_transferred_sum",
    kv_time_histogram="vllm:nixl_xfer_time_seconds",
    kv_failed_transfers="vllm:nixl_num_failed_transfers",
    prefix_queries="vllm:prefix_cache_queries_total",
    prefix_hits="vllm:prefix_cache_hits_total",
    external_prefix_queries="vllm:external_prefix_cache_queries_total",
    external_prefix_hits="vllm:external_prefix_cache_hits_total",
)

# How Dynamo 1.3.0's dynamo.vllm is told a worker's role (its backend_args.py: agg | prefill | decode; the
# --is-prefill-worker flags of older releases are deprecated there). The pin is known, so the flag is written,
# not probed with --help in every job; the in-image validator checks that the image's Dynamo accepts it.
DISAGGREGATION_FLAG = "--disaggregation-mode"


@dataclass(frozen=True)
class VllmPlatform:
    """Everything a vLLM-based engine changes in the shared role builder."""

    gpu_visibility: (
        str | None
    )  # the one variable that selects GPUs (ROCR_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES)
    vendor: str  # "amd" | "nvidia" | "none"
    # UCX/NIXL environment of the KV path, per mode (P/D may differ from aggregated runs). A UCX_NET_DEVICES
    # here replaces the config's; a Shell value reads what ucx_prelude set in the job.
    ucx_env: Callable[[RoleContext], Mapping[str, Arg]] = lambda ctx: {}
    # Job lines that compute what ucx_env reads (P/D only), before the checks that run with it.
    ucx_prelude: Callable[[RoleContext], list[str]] = lambda ctx: []
    extra_env: Mapping[str, Arg] = field(default_factory=dict)  # Shell: expanded in the job
    extra_args: tuple[str, ...] = ()
    kv_buffer_device: str | None = None  # None: vLLM's default for the platform
    model_args: bool = False  # the model profile's ATOM recipe settings (atom_env, atom_args)
    # Whether the dma-buf registration helper is preloaded for a role (needs: the image has it, RDMA P/D).
    preload_helper: Callable[[RoleContext], bool] = lambda ctx: False
    # In-container checks before the engine starts: RDMA devices (with SRQ) and `nixl-compat doctor`.
    rdma_check: Callable[[RoleContext], bool] = lambda ctx: False
    doctor: Callable[[RoleContext], bool] = lambda ctx: False
    rdma_required: bool = False  # the container must get /dev/infiniband (else: when the node has it)
    # Container settings by run mode ("agg", "prefill", "decode"; None: a check that stands for every mode).
    container_args: Callable[[str | None], tuple[str, ...]] = lambda mode: ()
    # Whether a role's container gets the node's kernel configuration (UCX's ROCm dma-buf check reads it).
    kernel_config: Callable[[RoleContext], bool] = lambda ctx: False


def devices(
    platform: VllmPlatform, rdma: RdmaMounts, mode: str | None = None, kernel_config: bool = False
) -> DeviceAccess:
    """A worker's devices; an aggregated worker moves no KV between workers and gets no RDMA device."""
    kv_moves = mode != "agg"
    required = platform.rdma_required and kv_moves
    return DeviceAccess(
        platform.vendor,
        platform.gpu_visibility,
        rdma_required=required,
        rdma=rdma if required else None,
        rdma_optional=kv_moves,
        container_args=platform.container_args(mode),
        kernel_config=kernel_config,
    )


def kv_events_config(ctx: RoleContext) -> str | None:
    """vLLM's KV-event publisher, for the KV router's overlap scores. Dynamo 1.3's worker relays vLLM's ZMQ events
    to the router only when given ``--kv-events-config`` with ``enable_kv_cache_events`` and prefix caching on,
    and never from a decode worker (``dynamo/vllm/args.py``, ``main.py``): without it ``--router-mode kv`` routes
    with no overlap data. vLLM binds the endpoint only when it holds ``*`` (it connects to any other address);
    Dynamo's relay reads it at 127.0.0.1. The port is the role's own (leased, checked free in the job)."""
    if ctx.mode == "decode" or not ctx.model.enable_prefix_caching or ctx.router_mode != "kv":
        return None
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{ctx.ports.kv_events}",
    }
    return json.dumps(config, separators=(",", ":"))


def mgmt_prelude(ctx: RoleContext) -> list[str]:
    """The node's management address: the source of its route to etcd (not `hostname -I`, which may list
    RDMA interfaces first). ATOMDYN_MGMT_ADDR overrides it."""
    first = ctx.etcd_endpoint.split(",", 1)[0]  # ETCD_ENDPOINTS may list several
    host = first.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    return [
        f"ETCD_HOST_ADDR=$(getent ahostsv4 {shlex.quote(host)} | awk 'NR==1 {{print $1}}')",
        "ROUTE_SRC=$(ip -4 route get \"$ETCD_HOST_ADDR\" | sed -n 's/.* src \\([0-9.]*\\).*/\\1/p')",
        "MGMT_ADDR=${ATOMDYN_MGMT_ADDR:-$ROUTE_SRC}",
        'if [ -z "$MGMT_ADDR" ]; then',
        '  log "cannot determine the management address (no route to $ETCD_HOST_ADDR)"',
        "  exit 2",
        "fi",
        'log "management address $MGMT_ADDR"',
    ]


def shim_prelude(ctx: RoleContext) -> list[str]:
    """The dma-buf registration helper's LD_PRELOAD path, as `dmabuf-shim env` reports it in the runtime."""
    tool = quoted(ctx.runtime.tool(["dmabuf-shim", "env"]))
    lines = [f"SHIM_TOOL=({tool})"]
    if not ctx.runtime.in_image and ctx.prepared_shim:  # the node's Python: the prepared install
        prepared = shlex.quote(ctx.prepared_shim)
        python = shlex.quote(ctx.runtime.python)
        lines += [
            f"if [ -d {prepared} ]; then",
            f"  SHIM_TOOL=(env PYTHONPATH={prepared} {python} -m dmabuf_shim env)",
            f"  log 'dma-buf helper from the prepared install {ctx.prepared_shim}'",
            "fi",
        ]
    return [
        *lines,
        """if ! SHIM_LINE=$("${SHIM_TOOL[@]}" | grep -m1 'LD_PRELOAD='); then""",
        "  log 'dmabuf-shim env printed no LD_PRELOAD line: is dmabuf-shim installed?'",
        "  exit 2",
        "fi",
        "SHIM_PRELOAD=${SHIM_LINE#*LD_PRELOAD=}",
        "SHIM_PRELOAD=${SHIM_PRELOAD#export }",
        'SHIM_PRELOAD=${SHIM_PRELOAD//\\"/}',
        'log "preloading $SHIM_PRELOAD"',
    ]


def rdma_check_prelude(ctx: RoleContext, access: DeviceAccess, env: Mapping[str, Arg]) -> list[str]:
    """`ibv_devinfo -v` as the worker's container sees the NICs (same image, devices and mounts), kept in the
    run directory and read on the node: devices, ports, GIDs and max_srq (UCX's rc_verbs needs SRQ). Then
    `ibv_devinfo -l` under glibc's `LD_DEBUG=libs` there, which shows the verbs provider libraries libibverbs
    loaded, in its order: the check records them and fails the role when a library RDMA_PROVIDER_LIBS names
    (mounted into the container) is not the first of its name loaded, i.e. not the one used."""
    base = run_path(ctx, "rdma")
    loader_env: dict[str, Arg] = {**env, "LD_DEBUG": "libs"}
    if ctx.runtime.in_image:
        probe = ctx.runtime.tool(
            ["ibv_devinfo", "-v"], env=env, devices=access, name=f"{ctx.role}-rdma-check"
        )
        loaded = ctx.runtime.tool(
            ["ibv_devinfo", "-l"], env=loader_env, devices=access, name=f"{ctx.role}-rdma-providers"
        )
        expected = access.rdma.providers if access.rdma is not None else ()
    else:
        probe = ["ibv_devinfo", "-v"]
        loaded = ["env", "LD_DEBUG=libs", "ibv_devinfo", "-l"]
        expected = ()  # the node's own libibverbs and configuration: nothing is mounted or named
    check: list[Arg] = [*ctx.node_python, "-m", "atomdyn_launchers.job.rdma", base + ".devinfo.txt"]
    check += ["--json", base + ".json", "--need-srq", "--gid-index", ctx.ucx_gid_index]
    if ctx.ucx_net_devices:
        check += ["--net-devices", ctx.ucx_net_devices]
    check += ["--providers", base + ".providers.txt"]
    for lib in expected:
        check += ["--expect-provider", lib]
    return [
        "# The RDMA devices the worker will see, checked before the engine starts.",
        f"mkdir -p {shlex.quote(ctx.run_dir + '/rdma')}",
        f"if ! {quoted(probe)} >{shlex.quote(base + '.devinfo.txt')} 2>&1; then",
        f"  log 'ibv_devinfo -v failed where the worker runs (see rdma/{ctx.role}.devinfo.txt)'",
        "  exit 3",
        "fi",
        "# The verbs provider libraries libibverbs loads there (the loader's trace), checked with the devices.",
        f"if ! {quoted(loaded)} >{shlex.quote(base + '.providers.txt')} 2>&1; then",
        f"  log 'ibv_devinfo -l failed where the worker runs (see rdma/{ctx.role}.providers.txt)'",
        "fi",
        f"if ! {quoted(check)}; then",
        f"  log 'RDMA check failed (see rdma/{ctx.role}.json)'",
        "  exit 3",
        "fi",
    ]


def doctor_prelude(ctx: RoleContext, access: DeviceAccess, env: Mapping[str, Arg]) -> list[str]:
    """`nixl-compat doctor --json` in the worker's runtime (same image, devices and environment, helper
    preloaded) before the engine starts; its report kept in the run directory; a failed doctor fails the role."""
    target = run_path(ctx, "doctor") + ".json"
    argv = ["nixl-compat", "doctor", "--json"]
    for device in (ctx.ucx_net_devices or "").split(","):
        if device:
            argv += ["--expect-net-device", device]
    probe = ctx.runtime.tool(argv, env=env, devices=access, name=f"{ctx.role}-doctor")
    return [
        "# NIXL as the worker will load it: backend, UCX transports, a loopback self-test.",
        f"mkdir -p {shlex.quote(ctx.run_dir + '/doctor')}",
        f"if ! {quoted(probe)} >{shlex.quote(target + '.tmp')}; then",
        f"  mv -f {shlex.quote(target + '.tmp')} {shlex.quote(target)}",
        f"  log 'nixl-compat doctor failed (see doctor/{ctx.role}.json)'",
        "  exit 3",
        "fi",
        f"mv -f {shlex.quote(target + '.tmp')} {shlex.quote(target)}",
    ]


def plan_vllm_role(ctx: RoleContext, platform: VllmPlatform) -> RolePlan:
    model = ctx.model
    argv: list[Arg] = [ctx.runtime.python, "-m", "dynamo.vllm", "--model", ctx.model_path]
    argv += ["--served-model-name", model.served_model_name, DISAGGREGATION_FLAG, ctx.mode]
    if ctx.mode != "agg":
        argv += [
            "--kv-transfer-config",
            kv_transfer_config(platform.kv_buffer_device, ctx.kv_cross_layer_blocks),
        ]
    argv += model.vllm_args()
    if platform.model_args:
        argv += list(model.atom_args)
    argv += list(platform.extra_args)
    listens: tuple[str, ...] = ("system",)
    events = kv_events_config(ctx)
    if events is not None:
        argv += ["--kv-events-config", events]
        listens += ("kv_events",)
    env: dict[str, Arg] = {"DYN_SYSTEM_PORT": str(ctx.ports.system)}
    if ctx.mode != "agg":  # only P/D moves KV: NIXL's side channel, UCX's settings and the RDMA devices
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = Shell('"$MGMT_ADDR"')
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(ctx.ports.nixl_side_channel)
        env.update(platform.ucx_env(ctx))
        if ctx.ucx_net_devices and "UCX_NET_DEVICES" not in env:
            env["UCX_NET_DEVICES"] = ctx.ucx_net_devices
        listens += ("nixl_side_channel",)
    env.update(platform.extra_env)
    if platform.model_args:
        env.update(model.atom_env)
    access = devices(platform, ctx.rdma, ctx.mode, platform.kernel_config(ctx))
    prelude = record_preludes(ctx) + mgmt_prelude(ctx)
    if ctx.mode != "agg":
        prelude += platform.ucx_prelude(ctx)
    prelude += access.selection_prelude() + ctx.runtime.prelude(access)
    if platform.preload_helper(ctx):
        env["LD_PRELOAD"] = Shell('"$SHIM_PRELOAD"')
        prelude += shim_prelude(ctx)
    # The checks run with the worker's own environment: inside a container that includes Dynamo's.
    check_env: dict[str, Arg] = {
        k: v for k, v in env.items() if k.startswith(("UCX_", "NIXL_", "LD_PRELOAD"))
    }
    if platform.rdma_check(ctx):
        prelude += rdma_check_prelude(ctx, access, {})
    if platform.doctor(ctx):
        prelude += doctor_prelude(ctx, access, check_env)
    if ctx.kv_probe is not None:
        return _probe_plan(ctx, platform, prelude, env, access)
    processes = [wrap(ctx, worker_name(ctx.mode), argv, env, access)]
    if ctx.with_frontend:
        processes.insert(0, frontend(ctx))
    return RolePlan(
        processes,
        prelude,
        dynamo_env(ctx),
        worker_name(ctx.mode),
        model.gpus_per_worker,
        model.served_model_name,
        listens,
    )


# The probe's side per P/D mode: the prefill worker is read from, the decode worker reads (vLLM pulls KV).
PROBE_SIDES = {"prefill": "target", "decode": "initiator"}


def _probe_plan(
    ctx: RoleContext, platform: VllmPlatform, prelude: list[str], env: dict[str, Arg], access: DeviceAccess
) -> RolePlan:
    """The role's worker replaced by the cross-node NIXL probe: the same runtime, devices, preludes (RDMA
    check, doctor, the helper's preload) and environment; the KV buffers where the engine keeps its KV."""
    probe = ctx.kv_probe
    if probe is None or ctx.mode not in PROBE_SIDES:
        raise ValueError(f"role {ctx.role}: the NIXL probe pairs a prefill and a decode role, not {ctx.mode}")
    device = "cpu" if platform.vendor == "none" or platform.kv_buffer_device == "cpu" else "cuda"
    argv = probe.argv(ctx.runtime.python, PROBE_SIDES[ctx.mode], ctx.role, device)
    mkdir = f"mkdir -p {shlex.quote(probe.report_dir)}"
    return RolePlan(
        [wrap(ctx, "probe", argv, env, access)],
        [*prelude, mkdir],
        dynamo_env(ctx),
        "probe",
        ctx.model.gpus_per_worker,
        ctx.model.served_model_name,
        listens=(),
    )
