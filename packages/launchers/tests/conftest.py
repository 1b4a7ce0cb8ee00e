"""Shared fixtures. ``local_cluster``: one real local cluster (Slurm, two nodes, etcd) for the whole session.

The cluster lives in a state directory under pytest's temporary directory, so its tag (namespaces, host
interface) and subnet differ from a developer's cluster and from other concurrent sessions. It runs jobs
with this interpreter's virtualenv (PYTHON_VENV = sys.prefix), so what the tests import, the jobs can too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from atomdyn_launchers.config import ClusterConfig
from atomdyn_launchers.localcluster import LocalCluster, missing_tools, prune_orphans

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


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running local cluster (``.config()`` is its ClusterConfig), brought down at session end."""
    require_cluster_infrastructure()
    base = tmp_path_factory.mktemp("lc")
    prune_orphans(log=lambda message: print(message, file=sys.stderr))  # clusters of killed sessions
    cluster = LocalCluster(
        base / "state", shared_dir=base / "shared", python_venv=Path(sys.prefix), owner_pid=os.getpid()
    )
    cluster.up(log=lambda message: print(message, file=sys.stderr))
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def local_cluster_config(local_cluster: LocalCluster) -> ClusterConfig:
    return local_cluster.config()
