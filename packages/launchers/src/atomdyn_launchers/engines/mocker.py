"""``mocker``: Dynamo 1.3's CPU mock engine (``python -m dynamo.mocker``), the fast rehearsal.

It moves no KV cache and touches no GPU; in a disaggregated run the prefill and decode workers still run on
two nodes and the frontend routes between them, which is what the rehearsal proves.
"""

from __future__ import annotations

from typing import Any

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.engines.base import (
    Engine,
    EngineError,
    RoleContext,
    RolePlan,
    Timeouts,
    dynamo_env,
    frontend,
    hardware_label,
    record_preludes,
    worker_name,
    wrap,
)
from atomdyn_launchers.runtimes.devices import NO_DEVICES
from atomdyn_launchers.sbatch import Arg


class MockerEngine(Engine):
    name = "mocker"
    vendor = "none"
    dynamo_module = "mocker"
    timeouts = Timeouts(ready_s=120.0, settle_s=60.0, time_limit="00:30:00")
    description = "Dynamo's CPU mock engine (rehearsal)"
    cross_layer_blocks = False
    cross_layer_blocks_why = "the mock engine allocates no KV cache and moves none"
    # The P/D handoff shows as different prefill and decode worker ids; cache hits in the router's kv_hit_rate.
    # It names no worker metrics (MetricNames()): it moves no KV, and its gates read the requests and Dynamo's
    # frontend, whatever engine runs behind it.
    expectations = GateExpectations(pd_worker_split=True, router_prefix_hits=True)
    mock_timing = True
    # It moves no KV: the cross-node NIXL probe of its rehearsal runs as the real engine's workers would.
    kv_probe_engine = "vllm-cpu"

    def plan(self, ctx: RoleContext) -> RolePlan:
        if ctx.kv_probe is not None:
            raise EngineError(f"the mock engine moves no KV: its NIXL probe runs as {self.kv_probe_engine}")
        model = ctx.model
        argv: list[Arg] = [ctx.runtime.python, "-m", "dynamo.mocker", "--model-path", ctx.model_path]
        argv += ["--disaggregation-mode", ctx.mode, "--speedup-ratio", f"{ctx.mock.speedup_ratio:g}"]
        if model.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(model.max_num_seqs)]
        argv.append(
            "--enable-prefix-caching" if model.enable_prefix_caching else "--no-enable-prefix-caching"
        )
        if ctx.mode == "prefill":
            argv += ["--bootstrap-ports", str(ctx.ports.bootstrap)]
        argv += kv_transfer_model(ctx)
        env: dict[str, Arg] = {
            "DYN_SYSTEM_PORT": str(ctx.ports.system),
            # Serves the tokenizer files to the frontend; without it the frontend tries the model hub.
            "DYN_SELF_HOST_METADATA": "1",
            "HOME": f"{ctx.home_dir}/{worker_name(ctx.mode)}",
        }
        processes = [wrap(ctx, worker_name(ctx.mode), argv, env, NO_DEVICES)]
        if ctx.with_frontend:
            processes.insert(0, frontend(ctx))
        listens = ("system", "bootstrap") if ctx.mode == "prefill" else ("system",)
        return RolePlan(
            processes,
            record_preludes(ctx),
            dynamo_env(ctx),
            worker_name(ctx.mode),
            0,
            ctx.model_path,
            listens,
        )

    def platform_label(self, fingerprint: Any) -> str:
        # The mock engine does no GPU work: wherever it ran, it is a rehearsal of the launchers.
        if not fingerprint or not fingerprint.get("accelerator"):
            return "rehearsal (CPU, mock engine)"
        return f"rehearsal (mock engine on {hardware_label(fingerprint)})"


def kv_transfer_model(ctx: RoleContext) -> list[Arg]:
    """The P/D workers' KV transfer model, where the run gives one (an aggregated worker moves no KV)."""
    if ctx.mode == "agg":
        return []
    args: list[Arg] = []
    if ctx.mock.kv_transfer_bandwidth_gbps is not None:
        args += ["--kv-transfer-bandwidth", f"{ctx.mock.kv_transfer_bandwidth_gbps:g}"]
    if ctx.mock.kv_bytes_per_token is not None:
        args += ["--kv-bytes-per-token", str(ctx.mock.kv_bytes_per_token)]
    return args
