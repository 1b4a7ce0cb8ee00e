"""dmabuf-shim: the LD_PRELOAD helper that registers GPU memory with the NIC through dma-buf.

The preload library does not depend on Python: `library_path()` finds it beside this file. The native module
(`_native`, built for one Python) reads the counters of the copy preloaded into the current process; it is
imported on first use, so the command line works where that module cannot load (another Python's build).
"""

from __future__ import annotations

from importlib.metadata import version as _distribution_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dmabuf_shim._native import bench, counters, probe

LIBRARY_NAME = "libdmabuf_shim.so"
__version__ = _distribution_version("dmabuf-shim")  # pyproject.toml is the one version source
__all__ = ["__version__", "bench", "counters", "library_path", "probe", "version"]


def library_path() -> str:
    """Absolute path of the preload library installed with this package."""
    return str(Path(__file__).resolve().with_name(LIBRARY_NAME))


def version() -> str:
    """The version this package (and so its preload library) was built as."""
    return __version__


def __getattr__(name: str) -> Any:
    if name in ("bench", "counters", "probe"):
        from dmabuf_shim import _native

        return getattr(_native, name)
    raise AttributeError(f"module 'dmabuf_shim' has no attribute {name!r}")
