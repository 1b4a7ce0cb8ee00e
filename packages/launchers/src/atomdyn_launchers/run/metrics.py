"""The workers' and the frontend's ``/metrics``, kept in the run directory: at the first verified response (what
warming up cost) and at the end (what the run did, and on a failure what explains it)."""

from __future__ import annotations

import urllib.error

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.contract import direct_http
from atomdyn_launchers.run.context import RunContext
from atomdyn_launchers.run.monitor import Monitor


def scrape_metrics(ctx: RunContext, monitor: Monitor, at_ready: bool = False) -> None:
    for role, reg in monitor.registrations.items():
        for process, port in reg.ports.items():
            url = f"http://{reg.host}:{port}/metrics"
            try:
                with direct_http.urlopen(url, timeout=5) as response:
                    text = response.read().decode("utf-8", "replace")
            except (OSError, urllib.error.URLError) as exc:
                ctx.progress.line(f"metrics from {role}.{process} ({url}) unavailable: {exc}")
                continue
            atomic_write_text(ctx.rundir.metrics(role, process, at_ready), text)
