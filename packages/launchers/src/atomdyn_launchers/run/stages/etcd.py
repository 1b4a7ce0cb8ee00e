"""Stage etcd: follow the roles' keys and publish the launcher's presence, before any job is submitted."""

from __future__ import annotations

from atomdyn_launchers.run.context import RunContext
from atomdyn_launchers.run.monitor import Monitor


def watch_etcd(ctx: RunContext, monitor: Monitor) -> None:
    ctx.etcd.start()
