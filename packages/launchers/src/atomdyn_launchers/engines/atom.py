"""``atom``: ``python -m dynamo.vllm`` on MI355X with ATOM as vLLM's platform plugin, KV moved by NIXL over
RoCE (ionic NICs) with the NIXL HOST-classification opt-in and the dma-buf registration helper.
"""

from __future__ import annotations

from collections.abc import Mapping

from atomdyn_launchers.engines.base import Engine, EngineError, NodeNeeds, RoleContext, RolePlan, Timeouts
from atomdyn_launchers.engines.dynamo_vllm import VllmPlatform, devices, plan_vllm_role
from atomdyn_launchers.engines.runtime import DeviceAccess, RdmaMounts

# ionic RoCE with ROCm memory. RC queue pairs only: UD fails on ionic, so neither UD transports nor the `ib`
# alias that pulls them in; the ROCm transports let UCX see VRAM as VRAM.
ATOM_UCX_ENV: Mapping[str, str] = {
    "UCX_TLS": "rc_v,tcp,rocm,rocm_copy,rocm_ipc,self,sm",
    "UCX_MEMTYPE_CACHE": "y",
    "UCX_IB_GID_INDEX": "1",  # the IPv4 RoCEv2 GID on ionic
    "VLLM_ROCM_USE_AITER": "1",
    # Read by the NIXL compatibility patch: lets VRAM that UCX classifies as HOST register (and says so).
    "NIXL_COMPAT_ALLOW_HOST_VRAM": "1",
    "SAFETENSORS_FAST_GPU": "1",
    "VLLM_RPC_TIMEOUT": "1800000",
}


def _ucx_env(ctx: RoleContext) -> Mapping[str, str]:
    return ATOM_UCX_ENV


MI355X = VllmPlatform(
    gpu_visibility=("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    vendor="amd",
    ucx_env=_ucx_env,
    model_args=True,
    # Only P/D moves KV over RDMA, and only the NIXL overlay image carries the helper: aggregated runs use
    # the base image, which has none.
    preload_helper=lambda ctx: ctx.mode != "agg",
    rdma_required=True,
)


class AtomEngine(Engine):
    name = "atom"
    vendor = "amd"
    dynamo_module = "vllm"
    timeouts = Timeouts(ready_s=3600.0, settle_s=300.0, time_limit="04:00:00")
    description = "dynamo.vllm with ATOM on MI355X, NIXL over RoCE"
    platform = MI355X

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
