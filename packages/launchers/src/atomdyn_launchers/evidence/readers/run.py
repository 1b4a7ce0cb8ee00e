"""``run.json``: the launcher's record of the run (its kind, engine, verdict, jobs and placement, provenance)."""

from __future__ import annotations

import re
from typing import Any

from atomdyn_launchers.contract.kinds import KINDS
from atomdyn_launchers.contract.rundir import SCHEMA_VERSION, RunRecord
from atomdyn_launchers.evidence.jsonfile import read_json
from atomdyn_launchers.evidence.readers.base import SAFE_RUN_ID, Reader, Signals

_RUN_ID = re.compile(r"^\d{8}T\d{6}Z-(" + "|".join(map(re.escape, KINDS)) + r")-([A-Za-z0-9_-]+)$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def read_run(signals: Signals) -> None:
    path = signals.run_dir / "run.json"
    why = None
    run: Any = None
    try:
        run = read_json(path, expect=None)
    except FileNotFoundError:
        why = "run.json is missing (aborted run?)"
    except (OSError, ValueError) as exc:
        why = f"run.json is unreadable: {exc}"
    if why is None and not isinstance(run, dict):
        why = "run.json is not a JSON object"
    if why is None and run.get("schema_version") != SCHEMA_VERSION:
        why = f"run.json has schema_version {run.get('schema_version')!r}, expected {SCHEMA_VERSION}"
    from_name = _RUN_ID.match(signals.name)
    if why is not None:
        signals.problems.append(why)
        for name in (
            "run.result",
            "run.requests_total",
            "run.requests_ok",
            "jobs.count",
            "jobs.clean",
            "placement.verified",
            "placement.as_requested",
            "placement.ok",
            "run.provenance",
        ):
            signals.absent(name, why)
        signals.absent("placement.distinct_nodes", why)
        signals.set("run.kind", from_name.group(1) if from_name else None)
        signals.set("run.engine", from_name.group(2) if from_name else None)
        signals.set("run.id", signals.name)
        return
    signals.run = run
    record = RunRecord.from_json(run)
    run_id = record.run_id
    if not (run_id and SAFE_RUN_ID.match(run_id)):
        signals.problems.append(
            f"run.json run_id {run.get('run_id')!r} is not a plain name; using the directory name"
        )
        run_id = signals.name
    signals.set("run.id", run_id)
    kind = record.kind if record.kind in KINDS else (from_name.group(1) if from_name else None)
    signals.set("run.kind", kind)
    signals.set("run.engine", record.engine or (from_name.group(2) if from_name else None))
    signals.set("run.model_profile", record.model)
    signals.set("run.runtime", record.runtime)
    signals.set("run.platform", record.platform)
    signals.set("run.lock_digest", record.lock_digest)
    source = record.extra.get("lock_digest_source")  # e.g. the running image's label, or the checkout's lock
    signals.set("run.lock_digest_source", source if isinstance(source, str) else None)
    # The launcher asks the fixed prompt for engines that check KV correctness; runs before it did say nothing.
    signals.set("run.fixed_prompt", bool(record.extra.get("fixed_prompt")))
    signals.set("run.kv_events", bool(record.extra.get("kv_event_roles")))
    signals.set("run.failure", record.failure)
    # Evidence must say where it ran and from which pinned inputs (CONTRIBUTING: platform and lock digest). A
    # platform the jobs' probes could not agree on is "unknown (...)" (engines/hardware.py): no provenance.
    # (collect refuses a run.json platform other than the one the fingerprints give, so this is theirs too.)
    provenance = bool(record.platform and record.platform.strip() and not record.platform.startswith("unknown")
                      and record.lock_digest and _DIGEST.match(record.lock_digest))  # fmt: skip
    signals.set("run.provenance", provenance)
    signals.excerpt("run", f"run.json: platform={run.get('platform')!r} lock_digest={run.get('lock_digest')}")
    for key, count in (("requests_total", record.requests_total), ("requests_ok", record.requests_ok)):
        if count is not None:  # what the launcher counted, cross-checked by the gates
            signals.set(f"run.{key}", count)
        else:
            signals.absent(f"run.{key}", f"run.json records no {key}")
    if record.result in ("pass", "fail"):
        signals.set("run.result", record.result)
    else:
        signals.absent("run.result", f"run.json result is {run.get('result')!r}")
    signals.excerpt("run", f"run.json: result={run.get('result')} failure={run.get('failure')}")
    verified = record.placement_verified
    if verified is not None:
        signals.set("placement.verified", verified)
    else:
        signals.absent("placement.verified", "run.json has no placement_verified")
    if record.jobs is None:
        for name in (
            "jobs.count",
            "jobs.clean",
            "placement.as_requested",
            "placement.distinct_nodes",
            "placement.ok",
        ):
            signals.absent(name, "run.json lists no jobs")
        return
    signals.set("jobs.count", len(record.jobs))
    ran = [job.node_ran for job in record.jobs if job.node_ran]
    for job in run["jobs"]:
        shown = ("role", "job_id", "node_requested", "node_ran", "state", "exit_code", "derived_exit_code")
        signals.excerpt("jobs", "run.json job: " + " ".join(f"{k}={job.get(k)}" for k in shown))
    as_requested = all(job.node_ran and job.node_ran == job.node_requested for job in record.jobs)
    signals.set("jobs.clean", all(job.ended_cleanly for job in record.jobs))
    signals.set("placement.as_requested", as_requested)
    if verified is not None:  # the launcher's own check also compares where each role registered from
        signals.set("placement.ok", verified and as_requested)
    else:
        signals.absent("placement.ok", "run.json has no placement_verified")
    if len(ran) == len(record.jobs):
        signals.set("placement.distinct_nodes", len(set(ran)))
    else:
        signals.absent("placement.distinct_nodes", "a job has no node_ran (it never started?)")


READER = Reader(
    "run.json",
    frozenset({
        "run.id", "run.kind", "run.engine", "run.model_profile", "run.runtime", "run.platform",
        "run.lock_digest", "run.lock_digest_source", "run.fixed_prompt", "run.kv_events", "run.failure",
        "run.provenance", "run.requests_total", "run.requests_ok", "run.result", "placement.verified",
        "jobs.count", "jobs.clean", "placement.as_requested", "placement.ok", "placement.distinct_nodes",
    }),
    read_run,
)  # fmt: skip
