"""Standalone loopback reproducer of the sub-allocated dma-buf offset bug, and its bug-report bundle."""

from mori_repro.exitcodes import ExitCode

__all__ = ["ExitCode", "__version__"]
__version__ = "0.1.0"
