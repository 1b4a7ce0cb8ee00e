"""The checks before anything is submitted: partition, nodes, model path and etcd."""

from __future__ import annotations

from collections.abc import Iterable

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.config.etcd import etcd_access
from atomdyn_launchers.contract.readiness import ReadinessError
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.slurm.client import Slurm


def check_model_path(config: ClusterConfig) -> None:
    if not config.model_path.exists():
        raise PreflightError(f"MODEL_PATH {config.model_path} does not exist (from {config.source})")


def check_etcd(config: ClusterConfig, timeout: float = 3.0) -> None:
    """etcd answers /health with {"health": "true"} and, with the configured TLS files and user, lets the
    launchers read their keys; otherwise a clear error naming the endpoints."""
    endpoints = config.require_etcd()
    try:
        client = EtcdClient(etcd_access(config), timeout_s=timeout)
        body = client.health()
        if body.get("health") == "true":
            client.check_access()
    except ReadinessError as exc:
        raise PreflightError(f"ETCD_ENDPOINTS={endpoints}: {exc}; nothing was submitted") from None
    if body.get("health") != "true":
        raise PreflightError(f"etcd at ETCD_ENDPOINTS={endpoints} reports unhealthy: {body!r}")
    down = client.unreachable_endpoints()
    if down:
        # Measured with Dynamo 1.3: its first lease request may go to any listed endpoint, and one that is
        # down stops the worker at start, so a run would fail later and less clearly.
        raise PreflightError(
            f"ETCD_ENDPOINTS={endpoints}: {'; '.join(down)}; Dynamo 1.3 does not start while a listed "
            "endpoint is down: remove it from ETCD_ENDPOINTS; nothing was submitted"
        )


def preflight(
    config: ClusterConfig,
    nodes: Iterable[str],
    *,
    slurm: Slurm | None = None,
    need_etcd: bool = True,
    need_model: bool = True,
) -> None:
    """The checks to run before submitting anything: partition, nodes, etcd, model path."""
    slurm = slurm or Slurm(config)
    slurm.check_partition()
    slurm.check_nodes(nodes)
    if need_model:
        check_model_path(config)
    if need_etcd:
        check_etcd(config)
