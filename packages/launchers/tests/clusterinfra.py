"""Whether this machine can run the local cluster: a plain module (test modules import no conftest, whose
name another conftest in a subdirectory shares)."""

from __future__ import annotations

import os

import pytest

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
