"""Slurm launchers for Dynamo + ATOM, the typed cluster configuration and the local rehearsal cluster."""

__version__ = "0.1.0"
