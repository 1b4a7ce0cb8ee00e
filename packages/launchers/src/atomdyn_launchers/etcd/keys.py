"""Where a run's keys live in etcd: one prefix per run, a key per role, and the launcher's presence key."""

from __future__ import annotations

KEY_ROOT = "atomdyn/runs"


def prefix_end(prefix: str) -> str:
    """The etcd range end that covers every key starting with ``prefix``."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return bytes(raw).decode()


def run_prefix(run_id: str) -> str:
    return f"{KEY_ROOT}/{run_id}/roles/"


def probe_prefix(run_id: str) -> str:
    """The cross-node NIXL probe's keys (its two sides' metadata and report), beside the roles'."""
    return f"{KEY_ROOT}/{run_id}/nixl/"


def launcher_key(run_id: str) -> str:
    return f"{KEY_ROOT}/{run_id}/launcher"
