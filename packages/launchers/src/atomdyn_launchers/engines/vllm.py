"""``vllm``: ``python -m dynamo.vllm`` on NVIDIA GPUs, KV moved by vLLM's NixlConnector (CUDA UCX transports).

ATOM's vLLM platform plugin is switched off (``ATOM_DISABLE_VLLM_PLUGIN=1``): the image may carry ATOM.
"""

from __future__ import annotations

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.node_needs import NodeNeeds
from atomdyn_launchers.engines.base import Engine, RoleContext, RolePlan, Timeouts
from atomdyn_launchers.engines.dynamo_vllm import VLLM_METRICS, VllmPlatform, devices, plan_vllm_role
from atomdyn_launchers.runtimes.devices import DeviceAccess, RdmaMounts

NVIDIA = VllmPlatform(
    gpu_visibility="CUDA_VISIBLE_DEVICES",
    vendor="nvidia",
    extra_env={"ATOM_DISABLE_VLLM_PLUGIN": "1"},
)


class VllmEngine(Engine):
    name = "vllm"
    vendor = "nvidia"
    logged_platform = "cuda"
    dynamo_module = "vllm"
    timeouts = Timeouts(ready_s=3600.0, settle_s=300.0, time_limit="04:00:00", first_response_s=1200.0)
    description = "dynamo.vllm on NVIDIA GPUs"
    # The fixed prompt at temperature 0: an aggregated run records the reference, a P/D run's answer must equal
    # it token for token (one GPU model, one vLLM build; the H200 runs of issue 39 are its first evidence). A P/D
    # run that recorded no fixed prompt fails that gate for lack of data (required), never n/a.
    expectations = GateExpectations(
        nixl_transfers=True,
        external_prefix_hits=True,
        router_overlap=True,
        aggregated_answer=True,
        metrics=VLLM_METRICS,
        required=frozenset({"kv_answer_equals_aggregated"}),
    )
    platform = NVIDIA

    def node_needs(self, kind: str | None) -> NodeNeeds:
        return NodeNeeds(gpu_devices=("/dev/nvidiactl",), rdma="optional", gpu_memory=True)

    def plan(self, ctx: RoleContext) -> RolePlan:
        return plan_vllm_role(ctx, self.platform)

    def container_devices(self, rdma: RdmaMounts | None = None) -> DeviceAccess:
        return devices(self.platform, rdma or RdmaMounts())
