"""Slurm launchers for Dynamo + ATOM, the typed cluster configuration and the local rehearsal cluster."""

from importlib.metadata import version as _version

__version__ = _version("atomdyn-launchers")  # pyproject.toml is the one version source
