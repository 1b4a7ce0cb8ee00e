"""The etcd a run uses: ETCD_ENDPOINTS, else etcd at the lock's version in a job of its own; the watch on the
roles' keys and the launcher's presence key. :func:`open_session` sets it up before the stages run (a run-owned
etcd that cannot start is a preflight error: nothing was submitted), :func:`close_session` takes it down after
the jobs have stopped."""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.config.etcd import etcd_access
from atomdyn_launchers.contract.leases import call_timeout_for
from atomdyn_launchers.engines import Engine
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import launcher_key, run_prefix
from atomdyn_launchers.job.owned_etcd import OwnedEtcdError
from atomdyn_launchers.nodes.etcd_owned import OwnedEtcd, owned_etcd_node
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.etcd_watch import Presence, RoleEvent, RoleWatcher
from atomdyn_launchers.slurm.client import Slurm, SlurmError


@dataclass(frozen=True)
class EtcdSession:
    """The etcd a run uses: its endpoint, the run's own etcd job if it started one, the role watch."""

    endpoint: str
    owned: OwnedEtcd | None
    client: EtcdClient
    prefix: str
    events: queue.Queue[RoleEvent]
    watcher: RoleWatcher
    presence: Presence

    def start(self) -> None:
        """Follow the roles' keys and publish the launcher's presence (the roles stop when it vanishes)."""
        self.watcher.start()
        self.presence.start()


def open_session(
    config: ClusterConfig,
    engine: Engine,
    kind: str,
    run_dir: Path,
    run_id: str,
    *,
    slurm: Slurm,
    progress: Progress,
    lock_path: Path | None = None,
    allocation: int | None = None,
) -> EtcdSession:
    """ETCD_ENDPOINT, else etcd at the lock's version in a job of its own (started here); inside an
    allocation (``allocation``), in a job step of it."""
    owned: OwnedEtcd | None = None
    if config.etcd_endpoint is None:
        node = owned_etcd_node(config, kind)
        try:
            owned = OwnedEtcd.start(
                config, run_dir, node, slurm=slurm, lock_path=lock_path, allocation=allocation, run_id=run_id
            )
        except (OwnedEtcdError, SlurmError) as exc:
            raise PreflightError(f"run-owned etcd: {exc}") from exc
        progress.line(f"run-owned etcd at {owned.endpoint} ({owned.label} on {node})")
    endpoint = owned.endpoint if owned is not None else config.require_etcd()
    client = EtcdClient(etcd_access(config, owned.endpoint if owned is not None else None))
    prefix = run_prefix(run_id)
    events: queue.Queue[RoleEvent] = queue.Queue()
    return EtcdSession(
        endpoint=endpoint,
        owned=owned,
        client=client,
        prefix=prefix,
        events=events,
        watcher=RoleWatcher(client, prefix, events),
        presence=Presence(
            EtcdClient(client.access, call_timeout_for(engine.timeouts.etcd_grace_s, client.timeout_s)),
            launcher_key(run_id),
            ttl_s=engine.timeouts.lease_s,
            lost_after_s=engine.timeouts.etcd_grace_s,
        ),
    )


def close_session(session: EtcdSession, fail: Callable[[str], None]) -> None:
    """After the jobs settled: the watch, then the presence key (its expiry is what stops orphaned jobs), then
    the run-owned etcd; ``fail`` hears of an etcd that did not stop."""
    session.watcher.stop()
    session.presence.stop()
    if session.owned is None:
        return
    try:
        session.owned.stop()
    except (OwnedEtcdError, SlurmError, TimeoutError) as exc:
        fail(f"run-owned etcd did not stop: {exc}")
