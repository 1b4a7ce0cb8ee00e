"""``vllm-cpu``: the real engine in the CPU rehearsal. ``python -m dynamo.vllm`` on vLLM's CPU build, serving
the tiny Qwen3 (``tinymodel``), with the real NixlConnector moving KV blocks from the prefill node to the
decode node over UCX.

The command line is the one ``vllm`` and ``atom`` run (one builder, ``dynamo_vllm.py``); what differs is data:
- KV in host memory (``kv_buffer_device: "cpu"``), the only buffer vLLM's CPU platform has;
- UCX forced onto TCP for the KV path. The two rehearsal nodes share one kernel, and left alone UCX picks
  ``cma`` (a same-kernel copy) even between network namespaces: that would not stand for two machines. The
  gates then require the UCX_PROTO_INFO rows of the KV reads to name ``tcp`` and none a same-host transport;
- one core per worker (``VLLM_CPU_OMP_THREADS_BIND``): the rehearsal's workers share the machine;
- the uni executor (the model in the engine-core process), as vLLM runs one GPU: the multiprocess executor
  vLLM's CPU platform picks otherwise made the KV transfers 10-100x slower here;
- the torch.compile caches on the shared directory, so a second run starts faster. Compiled mode, never
  ``--enforce-eager``: with it, vLLM 0.32's CPU attention dies with "Illegal instruction" on the first
  request whose KV came over NIXL;
- the workers run from the environment ``scripts/install_vllm_cpu.sh`` builds (``.venv-vllm-cpu``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.engines.base import Engine, RoleContext, RolePlan, Timeouts, hardware_label
from atomdyn_launchers.engines.dynamo_vllm import VLLM_METRICS, VllmPlatform, plan_vllm_role
from atomdyn_launchers.sbatch import Arg, Shell

VENV_DIR = ".venv-vllm-cpu"  # under the project directory; made by scripts/install_vllm_cpu.sh
TINY_MODEL = "tiny-qwen3-bf16"
LABEL = "rehearsal (CPU, vLLM, NIXL over TCP)"
# UCX transports that only work within one kernel: KV carried by one of them did not cross the "network".
SAME_HOST_TRANSPORTS = ("cma", "sysv", "posix", "xpmem", "knem")
# GiB of KV cache per worker (vLLM's CPU cache is host memory; the tiny model needs little).
KV_CACHE_GIB = "1"


def cache_dir(ctx: RoleContext) -> str:
    """Where the workers keep vLLM's and Inductor's compile caches: shared, so a second run reuses them."""
    if not ctx.cache_dir:
        return f"{ctx.home_dir}/cache"  # no shared cache configured: per run (every start compiles)
    return f"{ctx.cache_dir}/vllm-cpu"


def ucx_env(ctx: RoleContext) -> dict[str, str]:
    if ctx.mode == "agg":
        return {}  # no KV moves between workers
    return {
        "UCX_TLS": "tcp,self",  # self: a process's transfers to itself; every other peer over TCP
        # Print the protocol UCX picks per endpoint: the evidence reads which transport carried the KV.
        "UCX_PROTO_INFO": "y",
    }


def _extra_env(ctx: RoleContext) -> dict[str, Arg]:
    cache = cache_dir(ctx)
    return {
        # One core per worker (the role's index modulo the node's cores): the workers share this machine.
        "VLLM_CPU_OMP_THREADS_BIND": Shell(f'"$(( {ctx.index} % $(nproc) ))"'),
        "VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB,
        "OMP_NUM_THREADS": "1",
        "VLLM_CACHE_ROOT": f"{cache}/vllm",
        "TORCHINDUCTOR_CACHE_DIR": f"{cache}/inductor",
        # vLLM 0.32's AOT-compiled model cannot be loaded back with torch 2.13 ("'function' object has no
        # attribute 'finalize_loading'": every start compiled again, with or without the "mega" artifact);
        # without AOT compilation vLLM caches its compiled graphs and Inductor's code per graph.
        "VLLM_USE_AOT_COMPILE": "0",
        # The frontend gets the tokenizer from the worker, not from a model hub (there is none here).
        "DYN_SELF_HOST_METADATA": "1",
        # With it unset vLLM's CPU platform turns --distributed-executor-backend uni back into mp
        # (vllm/platforms/cpu.py); dynamo.vllm's AsyncLLM keeps its engine-core process either way.
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }


# The model in the engine-core process (one process fewer per worker, no shared-memory queue between them), as
# vLLM runs one GPU by default. With the mp executor vLLM's CPU platform forces, P/D runs on two cores had mean
# KV transfers of 179-1939 ms (3 runs) and requests up to 14 s; with uni 3.9-104 ms (median of 12 runs: 11 ms)
# and no request over 2.1 s, same bench and machine (docs/real-engine-rehearsal.md, "The KV path's speed").
EXECUTOR_ARGS = ("--distributed-executor-backend", "uni")


class VllmCpuEngine(Engine):
    name = "vllm-cpu"
    vendor = "none"
    logged_platform = "cpu"
    dynamo_module = "vllm"
    default_model = TINY_MODEL
    # Two cores: each worker compiles its model before it registers (67-160 s measured, longer when both
    # start at once); a cold compile cache is the slow case.
    # Measured on the 2-core VM under this engine's load: the whole machine froze for seconds at a time, once for
    # 99 s (a process sleeping 10 ms woke 73 s late; leases of 70 s expired by etcd's jumped clock); etcd then
    # answered in 4-5 s, and once a node's helper heard nothing for 38 s (docs/real-engine-rehearsal.md). So:
    # 60 s of grace (a real etcd loss takes up to a minute to be named) and 300 s leases (a killed launcher's
    # jobs stop themselves within about five minutes).
    # First response: 1-5 s after the frontend lists the workers in the recorded runs; 300 s covers a freeze.
    timeouts = Timeouts(
        ready_s=900.0,
        settle_s=120.0,
        time_limit="01:00:00",
        etcd_grace_s=60.0,
        etcd_lease_s=300,
        first_response_s=300.0,
    )
    description = "dynamo.vllm on vLLM's CPU build, KV over NIXL/UCX TCP (rehearsal)"
    cross_layer_blocks = False
    cross_layer_blocks_why = (
        "vLLM 0.32's CPU attention declares only the layer-major LBHNC KV layout, and its NixlConnector reads "
        "no enable_cross_layers_blocks"
    )
    expectations = GateExpectations(
        nixl_transfers=True,
        external_prefix_hits=True,
        kv_transport="tcp",
        forbidden_kv_transports=SAME_HOST_TRANSPORTS,
        # The tiny model at temperature 0 on one vLLM build: the P/D answer must equal the aggregated one. Not
        # required: its runs committed under evidence/ before the launcher asked the fixed prompt are n/a there.
        aggregated_answer=True,
        metrics=VLLM_METRICS,
        # Not router_overlap: its runs committed under evidence/ predate the KV events; the real-engine test
        # checks the router's kv_hit_rate on repeated prompts itself.
    )

    def venv(self, python_venv: Path, project_dir: Path) -> Path:
        return project_dir / VENV_DIR

    def plan(self, ctx: RoleContext) -> RolePlan:
        platform = VllmPlatform(
            gpu_visibility=None,
            vendor="none",
            ucx_env=ucx_env,
            extra_env=_extra_env(ctx),
            kv_buffer_device="cpu",
            extra_args=EXECUTOR_ARGS,
        )
        return replace(plan_vllm_role(ctx, platform), gpus=0)

    def platform_label(self, fingerprint: Any) -> str:
        if not fingerprint or not fingerprint.get("accelerator"):
            return LABEL
        return f"rehearsal (vLLM's CPU build on {hardware_label(fingerprint)})"
