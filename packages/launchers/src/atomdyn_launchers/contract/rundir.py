"""The run record: everything one run leaves behind, in the layout docs/run-directory.md describes.

This module is the one place that says what a run directory holds: its timeline events and request fields, the
``run.json`` schema and its version, and how Slurm's exit codes and job states are read (the run kinds are in
:mod:`.kinds`, the gates an engine expects in :mod:`.expectations`). The launchers write it; the evidence code
imports it.

The evidence tools read these files while a run may still be writing them: ``run.json`` is replaced
atomically; ``timeline.jsonl`` and ``requests.jsonl`` grow by whole lines (one write call per line).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json, atomic_write_text
from atomdyn_launchers.contract.kinds import KINDS

SCHEMA_VERSION = 1  # of run.json
EVENTS = (
    "submitted",
    "pending",
    "running",
    "registered",
    "healthy",
    "first_good_response",
    "requests_done",
    "accuracy_done",
    "finished",
    "cancelled",
    "failed",
    "done",
)
REQUEST_FIELDS = (
    "index",
    "prompt_group",
    "status",
    "ok",
    "latency_s",
    "content_chars",
    "completion_tokens",
    "prompt_tokens",
    "prefill_worker_id",
    "decode_worker_id",
    "worker_id",
    "kv_hit_rate",
    "error",
)

# The workers' /metrics as they stood at the first verified response: what warming up cost (a NIXL handshake
# that timed out while a worker compiled), told apart from the run's own requests.
READY_METRICS_DIR = "metrics-ready"


# Slurm base job states after which nothing more happens to a job, and those among them that mean it failed.
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "SPECIAL_EXIT",
        "TIMEOUT",
    }
)
FAILED_STATES = frozenset(
    {"BOOT_FAIL", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}
)

ExitCode = tuple[int, int]  # (exit status, signal): Slurm's "N:M"
_EXIT_CODE = re.compile(r"(\d+):(\d+)")


def parse_exit_code(text: object) -> ExitCode | None:
    """Slurm's ``"N:M"`` (exit status, signal); a bare integer is ``(N, 0)``; None when unreadable."""
    if isinstance(text, int) and not isinstance(text, bool):
        return (text, 0)
    if not isinstance(text, str):
        return None
    found = _EXIT_CODE.fullmatch(text.strip())
    if found:
        return (int(found.group(1)), int(found.group(2)))
    return (int(text.strip()), 0) if text.strip().isdigit() else None


def format_exit_code(code: ExitCode | None) -> str | None:
    return None if code is None else f"{code[0]}:{code[1]}"


def base_state(text: object) -> str:
    """A job state reduced to its base word: ``"CANCELLED by 0"`` -> ``CANCELLED``, ``"COMPLETED+"`` ->
    ``COMPLETED``; an empty string when there is none."""
    if not isinstance(text, str) or not text.strip():
        return ""
    return text.split()[0].rstrip("+")


_REQUESTS_DONE = re.compile(r"(\d+)/(\d+) ok")


def requests_done_detail(ok: int, total: int) -> str:
    """The ``detail`` of the ``requests_done`` event: ``"<ok>/<total> ok"``."""
    return f"{ok}/{total} ok"


def parse_requests_done(detail: object) -> tuple[int, int] | None:
    """(ok, total) from a ``requests_done`` event's detail; None when it has none."""
    found = _REQUESTS_DONE.fullmatch(detail.strip()) if isinstance(detail, str) else None
    return (int(found.group(1)), int(found.group(2))) if found else None


@dataclass
class JobRecord:
    """One role's Slurm job as run.json records it (exit codes as Slurm's ``"N:M"`` strings)."""

    role: str
    job_id: int | None
    node_requested: str
    node_ran: str | None = None
    state: str | None = None
    exit_code: str | None = None
    derived_exit_code: str | None = None
    # A role started as a step of an allocation (``--allocation``): ``job_id`` is the allocation's, this the
    # step's (``job_id.step_id``); absent from run.json for a batch job.
    step_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        if self.step_id is None:
            del record["step_id"]
        return record

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> JobRecord:
        """A job of a run.json read back; fields of the wrong type become None (the gates then fail)."""

        def text(key: str) -> str | None:
            value = raw.get(key)
            return value if isinstance(value, str) and value else None

        job_id = raw.get("job_id")
        step_id = raw.get("step_id")
        return cls(
            role=text("role") or "",
            job_id=job_id if isinstance(job_id, int) and not isinstance(job_id, bool) else None,
            node_requested=text("node_requested") or "",
            node_ran=text("node_ran"),
            state=text("state"),
            exit_code=text("exit_code"),
            derived_exit_code=text("derived_exit_code"),
            step_id=step_id if isinstance(step_id, int) and not isinstance(step_id, bool) else None,
        )

    @property
    def ended_cleanly(self) -> bool:
        """Started on a node and ended in no failed state, exit status 0, and no step failed (``DerivedExitCode``
        catches a failed step that ``ExitCode`` hides)."""
        state = base_state(self.state)
        status = parse_exit_code(self.exit_code)
        derived = parse_exit_code(self.derived_exit_code)
        return (
            bool(self.node_ran)
            and bool(state)
            and state not in FAILED_STATES
            and status is not None
            and status[0] == 0
            and (self.derived_exit_code is None or (derived is not None and derived[0] == 0))
        )


def _text(raw: Mapping[str, Any], key: str) -> str | None:
    value = raw.get(key)
    return value if isinstance(value, str) else None


def _count(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class RunRecord:
    """``run.json``: what the launcher recorded about one run (docs/run-directory.md, "run.json").

    :meth:`from_json` reads a record back leniently: a field of the wrong type becomes None (an empty list, an
    empty mapping) and the evidence gates that need it fail naming it; nothing here raises on content.
    """

    run_id: str | None
    kind: str | None
    engine: str | None  # run.json's "engine_profile"
    model: str | None  # "model_profile"
    runtime: str | None
    platform: str | None
    lock_digest: str | None
    config: dict[str, str]
    jobs: list[JobRecord] | None  # None: run.json lists no job (or not as objects)
    placement_verified: bool | None
    result: str | None  # "pass" | "fail"
    failure: str | None
    requests_total: int | None = None  # smoke requests planned
    requests_ok: int | None = None  # answered correctly
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. registrations
    schema_version: object = SCHEMA_VERSION

    _KEYS = (
        "schema_version", "run_id", "kind", "engine_profile", "model_profile", "runtime", "platform",
        "lock_digest", "config", "jobs", "placement_verified", "result", "failure", "requests_total",
        "requests_ok",
    )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "kind": self.kind,
            "engine_profile": self.engine,
            "model_profile": self.model,
            "runtime": self.runtime,
            "platform": self.platform,
            "lock_digest": self.lock_digest,
            "config": dict(self.config),
            "jobs": [job.to_json() for job in self.jobs or []],
            "placement_verified": self.placement_verified,
            "result": self.result,
            "failure": self.failure,
        }
        for key in ("requests_total", "requests_ok"):
            if getattr(self, key) is not None:
                record[key] = getattr(self, key)
        record.update({k: v for k, v in self.extra.items() if k not in self._KEYS})
        return record

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunRecord:
        jobs = raw.get("jobs")
        config = raw.get("config")
        verified = raw.get("placement_verified")
        return cls(
            run_id=_text(raw, "run_id"),
            kind=_text(raw, "kind"),
            engine=_text(raw, "engine_profile"),
            model=_text(raw, "model_profile"),
            runtime=_text(raw, "runtime"),
            platform=_text(raw, "platform"),
            lock_digest=_text(raw, "lock_digest"),
            config={str(k): str(v) for k, v in config.items()} if isinstance(config, dict) else {},
            jobs=[JobRecord.from_json(j) for j in jobs]
            if isinstance(jobs, list) and jobs and all(isinstance(j, dict) for j in jobs)
            else None,
            placement_verified=verified if isinstance(verified, bool) else None,
            result=_text(raw, "result"),
            failure=_text(raw, "failure"),
            requests_total=_count(raw, "requests_total"),
            requests_ok=_count(raw, "requests_ok"),
            extra={k: v for k, v in raw.items() if k not in cls._KEYS},
            schema_version=raw.get("schema_version"),
        )


def make_run_id(kind: str, engine: str, now: datetime | None = None) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown run kind {kind!r}; known: {', '.join(KINDS)}")
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{kind}-{engine}"


class RunDir:
    """A created run directory with its subdirectories; append-only logs are safe across threads."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._lock = threading.Lock()
        for sub in ("scripts", "logs", "metrics"):
            (path / sub).mkdir(parents=True, exist_ok=True)

    @classmethod
    def create(cls, runs_root: Path, kind: str, engine: str, now: datetime | None = None) -> RunDir:
        """Make ``runs_root/<run-id>``; if that second's id is taken, use the next second (format kept)."""
        runs_root.mkdir(parents=True, exist_ok=True)
        moment = now or datetime.now(timezone.utc)
        for _ in range(120):
            run_id = make_run_id(kind, engine, moment)
            try:
                (runs_root / run_id).mkdir()
            except FileExistsError:
                moment += timedelta(seconds=1)
                continue
            return cls(runs_root / run_id, run_id)
        raise RuntimeError(f"no free run id under {runs_root} for {kind}-{engine}")

    # -- paths -------------------------------------------------------------------------------------------

    def script(self, role: str) -> Path:
        return self.path / "scripts" / f"{role}.sbatch"

    def slurm_out(self, role: str) -> Path:
        return self.path / "logs" / f"{role}.slurm.out"

    def metrics(self, role: str, process: str, at_ready: bool = False) -> Path:
        """A process's /metrics at the end of the run, or (``at_ready``) at its first verified response."""
        return self.path / (READY_METRICS_DIR if at_ready else "metrics") / f"{role}.{process}.prom"

    @property
    def home(self) -> Path:
        """Per-run HOME for Dynamo processes, so caches (~/.cache/dynamo) never leak between runs."""
        return self.path / "home"

    # -- records -----------------------------------------------------------------------------------------

    def _append(self, name: str, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True) + "\n"
        with self._lock:
            fd = os.open(self.path / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def event(
        self,
        event: str,
        *,
        role: str | None = None,
        job_id: int | None = None,
        detail: str | None = None,
        t: float | None = None,
    ) -> dict[str, Any]:
        if event not in EVENTS:
            raise ValueError(f"unknown timeline event {event!r}")
        record: dict[str, Any] = {"t": time.time() if t is None else t, "event": event}
        if role is not None:
            record["role"] = role
        if job_id is not None:
            record["job_id"] = job_id
        if detail is not None:
            record["detail"] = detail
        self._append("timeline.jsonl", record)
        return record

    def request(self, record: Mapping[str, Any]) -> None:
        missing = [f for f in REQUEST_FIELDS if f not in record]
        if missing:
            raise ValueError(f"request record lacks {', '.join(missing)}")
        self._append("requests.jsonl", {f: record[f] for f in REQUEST_FIELDS})

    def write_script(self, role: str, text: str) -> Path:
        path = self.script(role)
        atomic_write_text(path, text, mode=0o755)
        return path

    def write_run(
        self,
        *,
        kind: str,
        engine: str,
        model: str,
        runtime: str,
        platform: str,
        lock_digest: str | None,
        config: Mapping[str, str],
        jobs: list[JobRecord],
        placement_verified: bool,
        result: str,
        failure: str | None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        if result not in ("pass", "fail"):
            raise ValueError(f"result must be pass or fail, not {result!r}")
        extra = dict(extra or {})
        record = RunRecord(
            run_id=self.run_id,
            kind=kind,
            engine=engine,
            model=model,
            runtime=runtime,
            platform=platform,
            lock_digest=lock_digest,
            config=dict(config),
            jobs=list(jobs),
            placement_verified=placement_verified,
            result=result,
            failure=failure,
            requests_total=extra.pop("requests_total", None),
            requests_ok=extra.pop("requests_ok", None),
            extra=extra,
        )
        path = self.path / "run.json"
        atomic_write_json(path, record.to_json())
        return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file (a trailing partial line is ignored)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines(keepends=True):
        if line.endswith("\n") and line.strip():
            out.append(json.loads(line))
    return out
