"""Stage record: job states and placement from Slurm, the run's etcd keys deleted, run.json written; the
run's :class:`Outcome`."""

from __future__ import annotations

import dataclasses
import json
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_launchers.contract.answers import FIXED_PROMPT
from atomdyn_launchers.contract.readiness import ReadinessError
from atomdyn_launchers.contract.rundir import format_exit_code, read_jsonl
from atomdyn_launchers.diagnose.scan import safely as diagnose_safely
from atomdyn_launchers.engines.hardware import model_claim, read_worker_probes
from atomdyn_launchers.etcd.keys import probe_prefix
from atomdyn_launchers.run import benchmark as serving_benchmark
from atomdyn_launchers.run.context import RunContext
from atomdyn_launchers.run.lockinfo import checkout_lock_digest, run_lock_digest
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.smoke import SmokeResult
from atomdyn_launchers.slurm.client import Allocation, JobInfo, SlurmError


@dataclass
class Outcome:
    run_id: str
    run_dir: Path
    passed: bool
    failure: str | None
    timeline: list[dict[str, object]] = field(default_factory=list)
    results: list[SmokeResult] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


def kv_event_roles(ctx: RunContext) -> list[str]:
    """The roles whose plan gave the workers a KV-event publisher (vLLM's --kv-events-config)."""
    submission = ctx.submission()
    runtime = submission.runtime()
    return [spec.role for spec in ctx.roles if "kv_events" in submission.role(spec, runtime)[0].listens]


def record(ctx: RunContext, monitor: Monitor) -> Outcome:
    placement = _final_jobs(ctx, monitor)
    if monitor.failure is None:
        unclean = [
            f"{role} ({rec.state}, exit {rec.exit_code}"
            + (
                f"; cancelled: SIGTERM not delivered: {monitor.hard_cancelled[role]}"
                if role in monitor.hard_cancelled
                else ""
            )
            + (f"; {monitor.nodes_down[role]}" if role in monitor.nodes_down else "")
            + ")"
            for role, rec in monitor.jobs.items()
            if rec.state != "COMPLETED" or rec.exit_code != "0:0"
        ]
        if unclean:
            monitor.fail("jobs did not stop cleanly: " + ", ".join(unclean))
        elif not placement:
            monitor.fail(
                "placement not verified: "
                + ", ".join(f"{r} asked {j.node_requested} ran {j.node_ran}" for r, j in monitor.jobs.items())
            )
    with suppress(ReadinessError):
        ctx.etcd.client.delete_prefix(ctx.etcd.prefix)
        if ctx.probe is not None:
            ctx.etcd.client.delete_prefix(probe_prefix(ctx.rundir.run_id))
    passed = monitor.failure is None
    if monitor.failure is not None:  # a failed run's benchmark figures are never a result
        serving_benchmark.mark_failed(ctx.rundir.path, monitor.failure)
    fingerprints = role_files(ctx.rundir.path, "fingerprints")
    lock_digest, lock_source = run_lock_digest(
        ctx.config.runtime,
        role_files(ctx.rundir.path, "images"),
        checkout_lock_digest(ctx.options.lock_path, ctx.config.project_dir),
    )
    ctx.rundir.write_run(
        kind=ctx.options.kind,
        engine=ctx.engine.name,
        model=ctx.model.name,
        runtime=ctx.config.runtime,
        platform=ctx.engine.platform_of(
            fingerprints,
            # what the workers logged of vLLM's platform and the model loaded (none ran in a NIXL probe run)
            read_worker_probes(ctx.rundir.path / "logs", [spec.role for spec in ctx.roles])
            if ctx.probe is None
            else None,
            model_claim(ctx.model.name, ctx.config.redacted().get("MODEL_PATH")),
        ),
        lock_digest=lock_digest,
        config=ctx.config.redacted(),
        jobs=list(monitor.jobs.values()),
        placement_verified=placement,
        result="pass" if passed else "fail",
        failure=monitor.failure,
        extra={
            "requests_total": ctx.options.resolved_requests(),
            "requests_ok": sum(1 for r in monitor.results if r.ok),
            "registrations": {r: json.loads(reg.to_json()) for r, reg in monitor.registrations.items()},
            "lock_digest_source": lock_source,
            "ports": {role: dataclasses.asdict(p) for role, p in ctx.ports.items()},
            "slurm_calls": ctx.slurm.call_counts(),
            # The KV correctness check was part of this run (answers.py); evidence of older runs lacks it.
            **(
                {"fixed_prompt": FIXED_PROMPT}
                if ctx.engine.expectations.aggregated_answer and ctx.probe is None
                else {}
            ),
            # The roles whose workers published KV events to the router; evidence of older runs lacks it.
            "kv_event_roles": kv_event_roles(ctx),
            # A run inside an allocation: the job its roles ran in as steps (jobs[].step_id).
            **(
                {"allocation": allocation_record(ctx.allocation, ctx.options.allocation_detected)}
                if ctx.allocation is not None
                else {}
            ),
            # A probe run: what it was asked to move (its sides' reports are under nixl/).
            **({"probe": {"kind": "nixl-pair", **dataclasses.asdict(ctx.probe)}} if ctx.probe else {}),
            # A failed run: the known failure signatures its logs show, the first cause first (diagnose/).
            **({"diagnosis": _diagnosis(ctx, monitor)} if not passed else {}),
        },
    )
    calls = ctx.slurm.call_counts()
    ctx.progress.line(
        f"slurm: {calls['total']} commands in {calls['seconds']} s ({calls['per_minute']} a minute), "
        "run.json slurm_calls"
    )
    monitor.event("done", detail="pass" if passed else f"fail: {monitor.failure}")
    ctx.progress.line(f"{'PASS' if passed else 'FAIL'}: {ctx.rundir.path}")
    return Outcome(
        run_id=ctx.rundir.run_id,
        run_dir=ctx.rundir.path,
        passed=passed,
        failure=monitor.failure,
        timeline=read_jsonl(ctx.rundir.path / "timeline.jsonl"),
        results=list(monitor.results),
    )


def _diagnosis(ctx: RunContext, monitor: Monitor) -> dict[str, Any] | None:
    """The failed run's diagnosis from its logs and what this stage knows (run.json is not written yet)."""
    run = {
        "kind": ctx.options.kind,
        "engine_profile": ctx.engine.name,
        "failure": monitor.failure,
        "jobs": [job.to_json() for job in monitor.jobs.values()],
        "probe": ctx.probe is not None,
    }
    found = diagnose_safely(ctx.rundir.path, run=run)
    if found is not None and found["first"]:
        ctx.progress.line(f"diagnosis: {found['first']} ({found['findings'][0]['file']}): "
                          f"{found['findings'][0]['cause']} (invoke diagnose {ctx.rundir.path})")  # fmt: skip
    return found


def allocation_record(alloc: Allocation, detected: bool) -> dict[str, object]:
    """run.json's ``allocation``: the job the roles ran in as steps, its nodes, and how it was chosen."""
    return {
        "job_id": alloc.job_id,
        "node_list": alloc.node_list,
        "nodes": list(alloc.nodes),
        "source": "environment (SLURM_JOB_ID of salloc)" if detected else "--allocation",
    }


def _final_jobs(ctx: RunContext, monitor: Monitor) -> bool:
    """Fill job records from Slurm; return True when placement matches what was asked."""
    verified = True
    steps = monitor.role_steps()
    for role, job in monitor.jobs.items():
        info: JobInfo | None = None
        if role in steps:  # a step of the allocation: srun's exit status, the node Slurm listed it on
            info = steps[role].info()
            job.step_id = info.step_id
        elif job.job_id is not None:
            try:
                info = ctx.slurm.job(job.job_id)
            except SlurmError:
                info = None
        if info is not None:
            job.state = info.state
            job.node_ran = info.nodes
            job.exit_code = format_exit_code(info.exit_code)
            job.derived_exit_code = format_exit_code(info.derived_exit_code)
        reg = monitor.registrations.get(role)
        if job.node_ran != job.node_requested:
            verified = False
        elif ctx.probe is None and (reg is None or reg.node != job.node_requested):
            verified = False  # a serving role's own registration names the node it ran on
    nodes = [j.node_ran for j in monitor.jobs.values()]
    if len(nodes) > 1 and len(set(nodes)) != len(nodes):
        verified = False
    return verified and bool(monitor.jobs)


def role_files(run_path: Path, sub: str) -> dict[str, dict[str, Any]]:
    """role -> the JSON object each job wrote to <run dir>/<sub>/<role>.json (unreadable ones left out)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((run_path / sub).glob("*.json")):
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(loaded, dict):
            found[path.stem] = loaded
    return found
