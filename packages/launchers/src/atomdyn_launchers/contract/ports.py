"""The ports one role listens on: what the job script checks free, the registration publishes and the
launcher's port leases hand out."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ports:
    """Per-role ports. Fixed numbers: each role runs on its own node (or its own network namespace)."""

    http: int = 8000
    system: int = 8081
    bootstrap: int = 8090
    nixl_side_channel: int = 20097
    kv_events: int = 5557  # vLLM's KV-event publisher (ZMQ), which Dynamo's worker relays to the router

    @classmethod
    def for_role(cls, index: int, base_offset: int = 0) -> Ports:
        # Distinct per role even if two roles ever share a host: side-channel ports must be unique per worker.
        return cls(
            http=8000 + base_offset,
            system=8081 + index + base_offset,
            bootstrap=8090 + index + base_offset,
            nixl_side_channel=20097 + index + base_offset,
            kv_events=5557 + index + base_offset,
        )
