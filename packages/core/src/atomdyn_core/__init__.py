"""Shared foundations: the release lock, verified fetching, atomic writes, the sanitizer, the fingerprint."""

from importlib.metadata import version as _version

__version__ = _version("atomdyn-core")  # pyproject.toml is the one version source
