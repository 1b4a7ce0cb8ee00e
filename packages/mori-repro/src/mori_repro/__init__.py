"""Standalone loopback reproducer of the sub-allocated dma-buf offset bug, and its bug-report bundle."""

from importlib.metadata import version as _version

from mori_repro.exitcodes import ExitCode

__all__ = ["ExitCode", "__version__"]
__version__ = _version("mori-repro")  # pyproject.toml is the one version source
