"""The gate expectations of the engine a run names (run.json's ``engine_profile``).

The engine object owns them (``engine.expectations``, a :class:`~atomdyn_launchers.rundir.GateExpectations`),
found through the engine registry. An engine the registry does not hold yet is looked up in the table below,
which says what the engines' own objects say; a name in neither is unknown and judged by the common gates only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from atomdyn_launchers.rundir import GateExpectations

_UNTIL_THE_REGISTRY_HOLDS_THEM = {
    "mocker": GateExpectations(pd_worker_split=True, router_prefix_hits=True),
    "vllm": GateExpectations(nixl_transfers=True, external_prefix_hits=True),
    "vllm-cpu": GateExpectations(nixl_transfers=True, external_prefix_hits=True, kv_transport="tcp"),
    "atom": GateExpectations(
        nixl_transfers=True,
        external_prefix_hits=True,
        kv_transport="rc",
        forbidden_kv_transports=("tcp",),
        dmabuf_registrations_per_worker=720,  # what the PoC's P/D run logged per worker
        nixl_backend="nixl_rocm",
        doctor_required=True,
    ),
}


def _registry() -> Callable[[str], Any] | None:
    try:
        from atomdyn_launchers.engines import get_engine  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    found: Callable[[str], Any] = get_engine
    return found


def expectations_for(engine: object) -> GateExpectations | None:
    """The engine's expectations, or None for an engine nobody knows."""
    if not isinstance(engine, str):
        return None
    lookup = _registry()
    if lookup is not None:
        try:
            declared = getattr(lookup(engine), "expectations", None)
        except (LookupError, ValueError):
            declared = None
        if isinstance(declared, GateExpectations):
            return declared
    return _UNTIL_THE_REGISTRY_HOLDS_THEM.get(engine)


def platform_label(engine: object, fingerprints: Mapping[str, Any]) -> str | None:
    """The platform the jobs' fingerprints show, labeled by the engine object (from what the nodes reported,
    never from the engine's name); None when the registry cannot label it."""
    lookup = _registry()
    if lookup is None or not isinstance(engine, str) or not fingerprints:
        return None
    try:
        label = getattr(lookup(engine), "platform_label", None)
    except (LookupError, ValueError):
        return None
    if label is None:
        return None
    labels = []
    for role in sorted(fingerprints):
        found = label(fingerprints[role]) if isinstance(fingerprints[role], Mapping) else None
        if isinstance(found, str) and found not in labels:
            labels.append(found)
    return "; ".join(labels) if labels else None
