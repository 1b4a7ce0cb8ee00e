"""Whether this machine can run the local cluster: a plain module (test modules import no conftest, whose
name another conftest in a subdirectory shares)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.engines.vllm_cpu import VENV_DIR
from atomdyn_launchers.rehearsal.localcluster import missing_tools

IN_CI = os.environ.get("CI") == "true"


def require_cluster_infrastructure() -> None:
    """Skip without root or the Debian packages; in CI (CI=true) fail instead: a skip would hide it."""
    problems = []
    if os.geteuid() != 0:
        problems.append("not root")
    missing = missing_tools()
    if missing:
        problems.append("missing " + ", ".join(missing))
    if problems:
        message = "local cluster unavailable: " + "; ".join(problems)
        if IN_CI:
            pytest.fail(message + " (.ci/run must provide them)")
        pytest.skip(message)


def require_vllm_cpu_venv(config: ClusterConfig) -> None:
    """The real engine's environment (scripts/install_vllm_cpu.sh, run by scripts/bootstrap.sh): skip without
    it; in CI fail instead."""
    require_vllm_cpu_venv_at(config.project_dir)


def require_vllm_cpu_venv_at(project_dir: Path) -> None:
    """As require_vllm_cpu_venv, for the project directory itself (no cluster needed)."""
    venv = project_dir / VENV_DIR
    if not (venv / "bin" / "python").exists():
        message = f"{venv} is missing (scripts/install_vllm_cpu.sh, run by scripts/bootstrap.sh, makes it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
