"""What a node must have for an engine: the engines declare it, the node-side check reads it as JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NodeNeeds:
    """What ``nodes.check`` requires of a node for this engine (the node side reads it as data)."""

    gpu_devices: tuple[str, ...] = ()  # paths that must exist
    rdma: str = "not needed"  # "required" | "optional" | "not needed"
    gpu_memory: bool = False
    dmabuf_shim: bool = False  # `dmabuf-shim env --check` where the workers load it

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_devices": list(self.gpu_devices),
            "rdma": self.rdma,
            "gpu_memory": self.gpu_memory,
            "dmabuf_shim": self.dmabuf_shim,
        }
