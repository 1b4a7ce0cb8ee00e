"""Stage watch: until every role registered in etcd (its processes healthy) and the frontend lists the
instances the run needs."""

from __future__ import annotations

import time

from atomdyn_launchers.contract.readiness import frontend_instances, http_json
from atomdyn_launchers.run.context import RunContext
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.plan import required_instances


def watch(ctx: RunContext, monitor: Monitor) -> None:
    monitor.deadline = time.monotonic() + ctx.ready_timeout_s
    monitor.deadline_budget = None

    def roles_missing() -> str | None:
        missing = [r.role for r in ctx.roles if r.role not in monitor.registrations]
        if not missing:
            return None
        states = ", ".join(f"{r}: {monitor.job_states.get(r, '?')}" for r in missing)
        return f"roles not registered in etcd: {states}"

    monitor.wait_until("every role to register", roles_missing)
    base_url = monitor.frontend_url()
    wanted = required_instances(ctx.options.kind, ctx.options.prefill_workers, ctx.options.decode_workers)

    def instances_missing() -> str | None:
        try:
            _, body = http_json(f"{base_url}/health")
        except OSError as exc:
            return f"frontend {base_url}/health not answering ({exc})"
        have = frontend_instances(body)
        short = {c: n for c, n in wanted.items() if have.get(c, 0) < n}
        return None if not short else f"frontend lists {have or 'no'} generate instances, needs {wanted}"

    monitor.wait_until("the frontend to list every worker", instances_missing)
    monitor.event("healthy", role=ctx.frontend_role.role, detail=f"{base_url} lists {wanted}")
    ctx.progress.line(f"healthy: {base_url}")
