"""Fixtures of the evidence tests: see evidence_helpers.py."""

from evidence_helpers import atom_run, mocker_run, vllm_cpu_run

__all__ = ["atom_run", "mocker_run", "vllm_cpu_run"]
