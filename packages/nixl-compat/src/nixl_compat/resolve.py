"""Choose which upstream NIXL build (nixl_rocm, nixl_cu13, nixl_cu12) serves this host.

The `nixl` meta package picks a backend from `torch.version.cuda`; ROCm torch reports None there, so on an
AMD node with any CUDA variant installed it picks the CUDA build. This module decides from the host instead,
and never imports the meta package unless told to.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Literal

ENV_VAR = "NIXL_COMPAT_BACKEND"
BACKENDS = ("nixl_rocm", "nixl_cu13", "nixl_cu12")
META = "nixl"
FORCEABLE = (*BACKENDS, META)
KFD_PATH = Path("/dev/kfd")

HostKind = Literal["rocm", "cuda", "cpu"]
Status = Literal["selected", "rejected", "missing", "not tried"]


class BackendResolutionError(ImportError):
    """No NIXL backend can serve this host; the message lists every candidate and why it was rejected."""


@dataclass(frozen=True)
class HostInfo:
    kind: HostKind
    torch_version: str | None
    torch_hip: str | None
    torch_cuda: str | None
    kfd: bool
    reasons: tuple[str, ...]

    @property
    def cuda_major(self) -> int | None:
        return int(self.torch_cuda.split(".")[0]) if self.torch_cuda else None


@dataclass(frozen=True)
class Candidate:
    module: str
    status: Status
    reason: str
    origin: str | None = None


@dataclass(frozen=True)
class Resolution:
    module_name: str
    module: ModuleType
    distribution: str | None
    version: str | None
    path: str
    host: HostInfo
    forced: str | None
    candidates: tuple[Candidate, ...]
    meta_choice: str | None = field(default=None)


def _torch_version_module() -> ModuleType | None:
    """torch.version without importing torch (a ~1 s import): read it off disk unless torch is loaded."""
    loaded = sys.modules.get("torch")
    if loaded is not None:
        version = getattr(loaded, "version", None)
        return version if isinstance(version, ModuleType) else None
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    version_py = Path(spec.origin).parent / "version.py"
    vspec = importlib.util.spec_from_file_location("_nixl_compat_torch_version", version_py)
    if vspec is None or vspec.loader is None:
        return None
    module = importlib.util.module_from_spec(vspec)
    try:
        vspec.loader.exec_module(module)
    except (OSError, SyntaxError, ImportError):
        return None
    return module


def probe_host(kfd_path: Path = KFD_PATH) -> HostInfo:
    """ROCm if torch is a ROCm build or the AMD kernel driver node exists; CUDA if torch is a CUDA build."""
    version = _torch_version_module()
    hip = getattr(version, "hip", None) if version else None
    cuda = getattr(version, "cuda", None) if version else None
    tver = getattr(version, "__version__", None) if version else None
    kfd = kfd_path.exists()
    reasons: list[str] = []
    if hip:
        reasons.append(f"torch is a ROCm build (torch.version.hip={hip})")
    if kfd:
        reasons.append(f"{kfd_path} exists (AMD GPU kernel driver)")
    if hip or kfd:
        return HostInfo("rocm", tver, hip, cuda, kfd, tuple(reasons))
    if cuda:
        return HostInfo("cuda", tver, hip, cuda, kfd, (f"torch is a CUDA build (torch.version.cuda={cuda})",))
    why = "no ROCm or CUDA torch and no AMD driver node" if version is None else "torch is a CPU build"
    return HostInfo("cpu", tver, hip, cuda, kfd, (why,))


def _order(host: HostInfo) -> tuple[list[str], dict[str, str]]:
    """Candidates in preference order, and those excluded for this host with the reason."""
    if host.kind == "rocm":
        why = f"CUDA build on a ROCm host ({'; '.join(host.reasons)}): its UCX cannot see AMD GPU memory"
        return ["nixl_rocm"], {"nixl_cu13": why, "nixl_cu12": why}
    if host.kind == "cuda":
        major = host.cuda_major
        first = f"nixl_cu{major}"
        order = [first] if first in BACKENDS else []
        order += [b for b in ("nixl_cu13", "nixl_cu12") if b not in order]
        return order, {"nixl_rocm": f"ROCm build on a CUDA host (torch.version.cuda={host.torch_cuda})"}
    return ["nixl_cu13", "nixl_cu12", "nixl_rocm"], {}


def _origin(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin or next(iter(spec.submodule_search_locations or [""]))


def distribution_of(module_name: str) -> tuple[str | None, str | None]:
    """(distribution name, version) that installed a top-level module, if its metadata says so."""
    dists = importlib.metadata.packages_distributions().get(module_name, [])
    for dist in dists:
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None, None


def meta_package_choice(host: HostInfo) -> str | None:
    """The backend the `nixl` meta package would load here, computed without importing it (or torch)."""
    if _origin("nixl_meta_utils") is None:
        return None
    if host.cuda_major is not None:
        return f"nixl_cu{host.cuda_major}"
    return next((b for b in ("nixl_cu13", "nixl_cu12", "nixl_rocm") if _origin(b)), None)


def _forced_value() -> str | None:
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    if value not in FORCEABLE:
        raise BackendResolutionError(f"{ENV_VAR}={value!r} is not one of {', '.join(FORCEABLE)}")
    return value


def _import(name: str) -> tuple[ModuleType | None, str]:
    try:
        return importlib.import_module(name), ""
    except ImportError as exc:
        return None, f"import failed: {exc}"


def _via_meta() -> tuple[ModuleType | None, str]:
    module, err = _import(f"{META}._api")
    if module is None:
        return None, err
    backend = module.__name__.rsplit(".", 1)[0]
    return sys.modules[backend], ""


def resolve_backend(kfd_path: Path = KFD_PATH) -> Resolution:
    host = probe_host(kfd_path)
    forced = _forced_value()
    excluded: dict[str, str] = {}
    if forced is not None:
        order = [forced]
    else:
        order, excluded = _order(host)
    candidates: list[Candidate] = []
    chosen: ModuleType | None = None
    for name in order:
        origin = _origin(name)
        if chosen is not None:
            status: Status = "not tried" if origin else "missing"
            candidates.append(Candidate(name, status, f"{chosen.__name__} selected first", origin))
            continue
        if origin is None:
            candidates.append(Candidate(name, "missing", "not installed"))
            continue
        module, err = _via_meta() if name == META else _import(name)
        if module is None:
            candidates.append(Candidate(name, "rejected", err, origin))
            continue
        chosen = module
        why = f"forced by {ENV_VAR}" if forced else f"preferred for a {host.kind} host"
        if name == META:
            why += f"; the meta package loaded {module.__name__}"
        candidates.append(Candidate(name, "selected", why, origin))
    for name, why in excluded.items():
        origin = _origin(name)
        candidates.append(Candidate(name, "rejected" if origin else "missing", why, origin))
    if chosen is None:
        lines = "\n".join(f"  {c.module}: {c.status}: {c.reason}" for c in candidates)
        hint = f"install the NIXL build for this host or set {ENV_VAR} to one of {', '.join(FORCEABLE)}"
        raise BackendResolutionError(
            f"no NIXL backend usable on this {host.kind} host ({'; '.join(host.reasons)}):\n{lines}\n{hint}"
        )
    dist, version = distribution_of(chosen.__name__)
    path = str(Path(chosen.__file__).parent) if chosen.__file__ else str(_origin(chosen.__name__))
    return Resolution(
        module_name=chosen.__name__,
        module=chosen,
        distribution=dist,
        version=version,
        path=path,
        host=host,
        forced=forced,
        candidates=tuple(candidates),
        meta_choice=meta_package_choice(host),
    )
