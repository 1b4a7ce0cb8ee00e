"""Stage probe: the cross-node NIXL probe's two one-shot jobs, waited for until both have done their work.

Each side's job ends on its own: exit 0 when the probe verified every byte, non-zero otherwise (the monitor
then fails the run at once, naming the job, while the other side's wait is still bounded by its timeout).
The probe's verdict beyond "both exited 0" (the UCX rows, the helper's registrations) is the evidence's.
"""

from __future__ import annotations

import time

from atomdyn_launchers.run.context import LaunchFailure, RunContext
from atomdyn_launchers.run.monitor import Monitor

# Beyond the probe's own waits: the jobs' start (queue, preludes, the RDMA check and doctor in the image).
START_ALLOWANCE_S = 120.0


def probe(ctx: RunContext, monitor: Monitor) -> None:
    options = ctx.probe
    if options is None:
        raise LaunchFailure("the probe stage runs only in a probe run")
    monitor.one_shot = True
    # Each side waits at most timeout_s for the other and for each READ; a whole series takes iterations READs.
    budget = options.timeout_s * 2 + START_ALLOWANCE_S
    monitor.deadline = time.monotonic() + max(budget, ctx.ready_timeout_s)
    monitor.deadline_budget = None

    def sides_missing() -> str | None:
        missing = [r.role for r in ctx.roles if r.role not in monitor.finished]
        if not missing:
            return None
        return "not finished: " + ", ".join(f"{r} ({monitor.job_states.get(r, '?')})" for r in missing)

    monitor.wait_until("both sides of the NIXL probe", sides_missing)
    ctx.progress.line(f"probe: both sides finished ({', '.join(r.role for r in ctx.roles)})")
