"""dmabuf-shim: the LD_PRELOAD helper that registers GPU memory with the NIC through dma-buf.

The native module knows where the preload library is installed, the version it was built as, and reads the
counters of the copy preloaded into the current process.
"""

from __future__ import annotations

from dmabuf_shim._native import counters, library_path, probe, version

__version__ = version()
__all__ = ["__version__", "counters", "library_path", "probe", "version"]
