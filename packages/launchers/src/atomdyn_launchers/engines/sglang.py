"""``sglang``: ``python -m dynamo.sglang`` on MI355X, KV moved between the prefill and decode workers by SGLang's
MORI transfer backend over RoCE (ionic NICs): the proof of concept's SGLang case study, where the sub-allocated
dma-buf offset bug was found (fixed in ROCm/mori#509, commit 0d05a4d2; docs/mori-path.md).

Every flag and variable here was read from the pinned sources, never from memory (file:line at the pin):

- Dynamo 1.3.0.post1's ``dynamo.sglang`` (the wheel in .venv-vllm-cpu): ``args.py`` parses its own and the
  runtime's flags, then hands the rest to SGLang's parser (``ServerArgs.add_cli_args``, args.py:294-339), so the
  worker takes SGLang's flags as they are. ``--disaggregation-mode`` is SGLang's (``null`` by default: no
  flag is aggregated; Dynamo also maps ``agg`` to ``null``, args.py:172-178). Without
  ``--disaggregation-bootstrap-port`` Dynamo picks a free port of its own (args.py:348-354): the role's leased
  ``bootstrap`` port is passed instead, so it is checked free and recorded like every port. The prefill worker
  registers as ``<namespace>.prefill.generate``, the others as ``backend`` (args.py:370-391). SGLang's metrics
  reach Dynamo's system port only with ``--enable-metrics`` (publisher.py:400-415). The bootstrap address a
  prefill worker advertises is ``SGLANG_HOST_IP`` where set (``_disagg.py``:82-83; SGLang's
  ``get_local_ip_auto``, srt/utils/network.py:344), here the node's management address.
- SGLang 0.5.14 (Dynamo's ``sglang`` extra; the PyPI wheel's ``sglang/srt/server_args.py``):
  ``--disaggregation-mode`` (2223), ``--disaggregation-transfer-backend`` with ``mori`` among its choices
  (2227, DISAGG_TRANSFER_BACKEND_CHOICES 213-220), ``--disaggregation-bootstrap-port`` (2234),
  ``--disaggregation-ib-device`` (2238), ``--model-path`` (417), ``--served-model-name`` (1147),
  ``--tp-size`` (849), ``--max-running-requests`` (660), ``--disable-radix-cache`` (771), ``--kv-cache-dtype``
  (591), ``--enable-metrics`` (1030), ``--kv-events-config`` (1100; its fields, srt/disaggregation/
  kv_events.py:383-392), ``--kv-canary`` (2165) and ``--kv-canary-real-data`` (6283-6294),
  ``--cuda-graph-backend-prefill`` (1932).
- MORI's transfer backend in SGLang 0.5.14 (``srt/disaggregation/mori/conn.py``): ``--disaggregation-ib-device``
  becomes ``MORI_RDMA_DEVICES`` (346); the ``SGLANG_MORI_*`` knobs and their defaults are ``srt/environ.py``
  416-438 (left at SGLang's defaults: none is measured on MI355X yet). MORI itself at 0d05a4d2 (the #509 fix):
  ``MORI_RDMA_DEVICES`` names devices, not ports (src/application/transport/rdma/rdma.cpp:731);
  ``MORI_IB_GID_INDEX`` (src/io/rdma/backend_impl.cpp:458; unset, MORI picks a GID).

The KV checksum: SGLang 0.5.14 has no checksum option for the transfer itself; its KV canary is the nearest and
is what a P/D worker here runs with. ``--kv-canary raise`` writes a chain hash of (token, position) per KV slot
and fails the server on the first mismatch; ``--kv-canary-real-data partial`` adds the first 16 bytes of each
real KV slot to it (srt/kv_canary/config.py). The canary's buffers are spliced into the pool's buffer list the
transfer backends register (srt/kv_canary/pool_patcher/buf_info_splice.py), so they travel with the KV: a block
written to the wrong place on decode breaks the chain there. The canary refuses a piecewise prefill graph
(srt/kv_canary/api.py:40-44), hence ``--cuda-graph-backend-prefill breakable``. Whether its JIT kernels build
on ROCm (gfx950) is not known here: the first MI355X run says.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.metrics import MetricNames
from atomdyn_launchers.contract.node_needs import NodeNeeds
from atomdyn_launchers.engines.atom import ANSWER_LOGPROB_TOLERANCE, ANSWER_PREFIX_TOKENS, container_args
from atomdyn_launchers.engines.base import (
    Engine,
    EngineError,
    RoleContext,
    RolePlan,
    Timeouts,
    dynamo_env,
    frontend,
    record_preludes,
    worker_name,
    wrap,
)
from atomdyn_launchers.engines.dynamo_vllm import mgmt_prelude, rdma_check_prelude
from atomdyn_launchers.runtimes.devices import DeviceAccess, RdmaMounts
from atomdyn_launchers.sbatch import Arg, Shell

# What the worker publishes on Dynamo's system port with --enable-metrics (SGLang 0.5.14,
# srt/observability/metrics_collector.py), as the evidence reads it. Failed KV transfers are counted on the decode
# worker too (sglang:num_transfer_failed_reqs_total, 516-524; srt/disaggregation/decode.py:1685, 1708); cached
# prompt tokens by source (sglang:cached_tokens_total, 1508, each once: 1650-1673) and prompt tokens
# (sglang:prompt_tokens_total, 1429) are the prefix cache. Not named: SGLang observes its KV transfers (sglang:kv_transfer_latency_ms, _total_mb,
# _speed_gb_s, 498-546) on the prefill worker, in milliseconds and megabytes (srt/disaggregation/prefill.py:810),
# where the evidence counts transfers on the decode worker in seconds and bytes (contract/metrics.py); and SGLang
# has no external-prefix counter.
SGLANG_METRICS = MetricNames(
    kv_failed_transfers="sglang:num_transfer_failed_reqs",
    prefix_queries="sglang:prompt_tokens_total",
    prefix_hits="sglang:cached_tokens_total",
)

# SGLang's transfer backend for the KV (DISAGG_TRANSFER_BACKEND_CHOICES, server_args.py:213-220).
TRANSFER_BACKEND = "mori"
# The KV canary of a P/D worker (see the module's docstring): fail on the first mismatch, real KV bytes hashed.
KV_CANARY_ARGS = (
    *("--kv-canary", "raise"),
    *("--kv-canary-real-data", "partial"),
    *("--cuda-graph-backend-prefill", "breakable"),
)


def rdma_devices(ctx: RoleContext) -> list[str]:
    """The RDMA devices of the role's node for MORI: the device of each ``device:port`` entry of the config's
    UCX_NET_DEVICES for that node (MORI_RDMA_DEVICES takes device names; netdevs there are UCX's, not MORI's)."""
    entries = (ctx.ucx_net_devices or "").split(",")
    return list(dict.fromkeys(device for device, sep, _ in (e.partition(":") for e in entries) if sep))


def kv_events_config(ctx: RoleContext) -> str | None:
    """SGLang's KV-event publisher for the KV router's overlap scores, on the workers that prefill (Dynamo relays
    it from ``SGLANG_HOST_IP``, publisher.py:298-331); the role's leased port, bound on every interface."""
    if ctx.mode == "decode" or not ctx.model.enable_prefix_caching or ctx.router_mode != "kv":
        return None
    return json.dumps(
        {"publisher": "zmq", "endpoint": f"tcp://*:{ctx.ports.kv_events}"}, separators=(",", ":")
    )


def worker_argv(ctx: RoleContext) -> list[Arg]:
    """``python -m dynamo.sglang`` and its flags (SGLang's own, as Dynamo hands them to SGLang's parser)."""
    model = ctx.model
    argv: list[Arg] = [ctx.runtime.python, "-m", "dynamo.sglang", "--model-path", ctx.model_path]
    argv += ["--served-model-name", model.served_model_name, "--tp-size", str(model.tensor_parallel_size)]
    if model.max_num_seqs is not None:
        argv += ["--max-running-requests", str(model.max_num_seqs)]
    if not model.enable_prefix_caching:
        argv.append("--disable-radix-cache")
    if model.kv_cache_dtype is not None:
        argv += ["--kv-cache-dtype", model.kv_cache_dtype]
    argv.append("--enable-metrics")
    events = kv_events_config(ctx)
    if events is not None:
        argv += ["--kv-events-config", events]
    if ctx.mode != "agg":
        argv += ["--disaggregation-mode", ctx.mode]
        argv += ["--disaggregation-transfer-backend", TRANSFER_BACKEND]
        argv += ["--disaggregation-bootstrap-port", str(ctx.ports.bootstrap)]
        devices = rdma_devices(ctx)
        if devices:
            argv += ["--disaggregation-ib-device", ",".join(devices)]
        argv += list(KV_CANARY_ARGS)
    return argv


def worker_env(ctx: RoleContext) -> dict[str, Arg]:
    env: dict[str, Arg] = {
        "DYN_SYSTEM_PORT": str(ctx.ports.system),
        # The address SGLang advertises (bootstrap, MORI's engine) and Dynamo's KV-event relay connects to.
        "SGLANG_HOST_IP": Shell('"$MGMT_ADDR"'),
    }
    if ctx.mode != "agg" and ctx.ucx_gid_index != "auto":
        env["MORI_IB_GID_INDEX"] = ctx.ucx_gid_index  # the RDMA check verifies it names a RoCE v2 GID
    return env


class SglangEngine(Engine):
    name = "sglang"
    vendor = "amd"
    dynamo_module = "sglang"
    timeouts = Timeouts(ready_s=3600.0, settle_s=300.0, time_limit="04:00:00", first_response_s=1200.0)
    description = "dynamo.sglang on MI355X, KV over MORI on RoCE"
    cross_layer_blocks = False
    # KV over MORI: the ladder's NIXL rung is not needed (mori-repro checks the registration rule instead).
    nixl_probe = False
    # The ladder's validate rung runs mori-repro in the image on each worker node, before any model loads.
    mori_repro = True
    cross_layer_blocks_why = (
        "KV_CROSS_LAYER_BLOCKS is vLLM's NixlConnector layout; SGLang's MORI backend has its own"
    )
    # The KV bytes themselves, as for atom: the fixed prompt's P/D answer must start as the aggregated run's and
    # agree in log probabilities (the dma-buf offset bug misplaces KV without an error). The router's kv_hit_rate
    # from the workers' KV events shows a repeated prompt's cache hit (SGLang's decode keeps no radix cache by
    # default, so a decode-side prefix counter stays 0). No NIXL, UCX or dma-buf helper gate: MORI registers
    # and moves the KV itself, and its transfer metrics are the prefill worker's (SGLANG_METRICS).
    expectations = GateExpectations(
        router_prefix_hits=True,
        router_overlap=True,
        aggregated_answer=True,
        answer_prefix_tokens=ANSWER_PREFIX_TOKENS,
        answer_logprob_tolerance=ANSWER_LOGPROB_TOLERANCE,
        metrics=SGLANG_METRICS,
        # Required, as for atom: a P/D run whose fixed prompt's data is missing fails them, never n/a.
        required=frozenset({"kv_answer_equals_aggregated", "kv_answer_logprob_max_delta"}),
    )

    def images(self, kind: str | None, base_image: str | None, nixl_image: str | None) -> list[str]:
        """One image for every run kind: SGLang's ROCm image with Dynamo's wheels (DYNAMO_ATOM_IMAGE names the
        engine's image); MORI is in it, so no overlay."""
        return [base_image] if base_image else []

    def launch_problems(
        self, kind: str, nodes: Sequence[str], net_devices: Callable[[str], str | None]
    ) -> list[str]:
        if kind != "disagg":
            return []
        return [
            f"UCX_NET_DEVICES names no RDMA device for {node}: sglang P/D runs give MORI the node's device "
            "(--disaggregation-ib-device, from the device:port entries)"
            for node in nodes
            if not net_devices(node)
        ]

    def node_needs(self, kind: str | None) -> NodeNeeds:
        return NodeNeeds(gpu_devices=("/dev/kfd", "/dev/dri"), rdma="required", gpu_memory=True)

    def container_devices(self, rdma: RdmaMounts | None = None) -> DeviceAccess:
        return self._devices(None, rdma or RdmaMounts())

    def _devices(self, mode: str | None, rdma: RdmaMounts) -> DeviceAccess:
        kv_moves = mode != "agg"
        return DeviceAccess(
            self.vendor,
            "ROCR_VISIBLE_DEVICES",
            rdma_required=kv_moves,
            rdma=rdma if kv_moves else None,
            rdma_optional=kv_moves,
            container_args=container_args(mode),
        )

    def plan(self, ctx: RoleContext) -> RolePlan:
        if ctx.kv_probe is not None:
            raise EngineError("the sglang engine moves KV over MORI, not NIXL: the NIXL probe does not apply")
        if ctx.mode != "agg" and not rdma_devices(ctx):
            raise EngineError(
                f"role {ctx.role}: UCX_NET_DEVICES={ctx.ucx_net_devices or ''} names no RDMA device:port for MORI"
            )
        access = self._devices(ctx.mode, ctx.rdma)
        env = worker_env(ctx)
        prelude = record_preludes(ctx) + mgmt_prelude(ctx)
        prelude += access.selection_prelude() + ctx.runtime.prelude(access)
        if ctx.mode != "agg":
            prelude += rdma_check_prelude(ctx, access, {})
        listens: tuple[str, ...] = ("system",)
        if kv_events_config(ctx) is not None:
            listens += ("kv_events",)
        if ctx.mode == "prefill":
            listens += ("bootstrap",)
        processes = [wrap(ctx, worker_name(ctx.mode), worker_argv(ctx), env, access)]
        if ctx.with_frontend:
            processes.insert(0, frontend(ctx))
        return RolePlan(
            processes,
            prelude,
            dynamo_env(ctx),
            worker_name(ctx.mode),
            ctx.model.gpus_per_worker,
            ctx.model.served_model_name,
            listens,
        )
