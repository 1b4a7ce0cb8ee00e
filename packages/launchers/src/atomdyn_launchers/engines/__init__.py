"""The engine registry: one object per engine, looked up by name (``get_engine``).

Each engine lives in its own module (``mocker.py``, ``vllm.py``, ``atom.py``, ``vllm_cpu.py``, ``sglang.py``);
``base.py`` says what an engine provides, and ``dynamo_vllm.py`` builds every ``dynamo.vllm`` role from
per-platform data. Where a role's processes run is the runtime's (``atomdyn_launchers.runtimes``), which wraps the
command lines an engine plans.
"""

from __future__ import annotations

from atomdyn_launchers.engines.atom import AtomEngine
from atomdyn_launchers.engines.base import MODES, Engine, EngineError, RoleContext, RolePlan
from atomdyn_launchers.engines.mocker import MockerEngine
from atomdyn_launchers.engines.sglang import SglangEngine
from atomdyn_launchers.engines.vllm import VllmEngine
from atomdyn_launchers.engines.vllm_cpu import VllmCpuEngine

__all__ = ["ENGINE_NAMES", "MODES", "Engine", "EngineError", "RoleContext", "RolePlan", "get_engine"]

_ENGINES: dict[str, Engine] = {
    e.name: e for e in (MockerEngine(), VllmEngine(), AtomEngine(), VllmCpuEngine(), SglangEngine())
}
ENGINE_NAMES: tuple[str, ...] = tuple(_ENGINES)


def get_engine(name: str) -> Engine:
    if name not in _ENGINES:
        raise EngineError(f"unknown engine profile {name!r}; known: {', '.join(ENGINE_NAMES)}")
    return _ENGINES[name]
