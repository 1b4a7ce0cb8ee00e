"""AMD RIXL's module names on the upstream NIXL build chosen for this host.

`rixl._api`, `rixl._bindings`, `rixl._utils` and `rixl.logging` ARE the backend's modules (the same objects in
`sys.modules`), so vLLM's `from rixl._api import nixl_agent` gets upstream's class with nothing in between.
The backend is picked by `nixl_compat.resolve` (host first; `NIXL_COMPAT_BACKEND` forces one).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from nixl_compat.resolve import Resolution, resolve_backend

SUBMODULES = ("_bindings", "_utils", "logging", "_api")

resolution: Resolution = resolve_backend()
backend_name: str = resolution.module_name

# One line per process that imports rixl: the run's evidence counts it as the backend's initialization
# (vLLM only imports rixl when it sets up NIXL). NIXL_COMPAT_QUIET=1 silences it.
if os.environ.get("NIXL_COMPAT_QUIET") != "1":
    _version = resolution.version or "(version unknown)"
    print(
        f"nixl-compat: rixl using {backend_name} {_version} ({resolution.path})", file=sys.stderr, flush=True
    )

_this = sys.modules[__name__]
for _sub in SUBMODULES:
    _module = importlib.import_module(f"{backend_name}.{_sub}")
    sys.modules[f"{__name__}.{_sub}"] = _module
    setattr(_this, _sub, _module)

_api: Any = sys.modules[f"{__name__}._api"]
_bindings: Any = sys.modules[f"{__name__}._bindings"]

# The names upstream's packages export at top level (DEFAULT_COMM_PORT, nixl_agent, nixl_agent_config, ...).
for _name in dir(_api):
    if not _name.startswith("_") and (_name.isupper() or _name.startswith("nixl_")):
        setattr(_this, _name, getattr(_api, _name))

del _this, _sub, _module, _name
