"""The run directory: everything one run leaves behind, in the layout docs/run-directory.md describes.

The evidence tools read these files while a run may still be writing them: ``run.json`` is replaced
atomically; ``timeline.jsonl`` and ``requests.jsonl`` grow by whole lines (one write call per line).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json, atomic_write_text

SCHEMA_VERSION = 1
KINDS = ("agg-single", "agg-two", "disagg")
EVENTS = (
    "submitted",
    "pending",
    "running",
    "registered",
    "healthy",
    "first_good_response",
    "requests_done",
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


@dataclass
class JobRecord:
    role: str
    job_id: int | None
    node_requested: str
    node_ran: str | None = None
    state: str | None = None
    exit_code: str | None = None
    derived_exit_code: str | None = None


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

    def process_log(self, role: str, process: str) -> Path:
        return self.path / "logs" / f"{role}.{process}.log"

    def metrics(self, role: str, process: str) -> Path:
        return self.path / "metrics" / f"{role}.{process}.prom"

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
        record: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "kind": kind,
            "engine_profile": engine,
            "model_profile": model,
            "runtime": runtime,
            "platform": platform,
            "lock_digest": lock_digest,
            "config": dict(config),
            "jobs": [asdict(job) for job in jobs],
            "placement_verified": placement_verified,
            "result": result,
            "failure": failure,
        }
        if extra:
            record.update(extra)
        path = self.path / "run.json"
        atomic_write_json(path, record)
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
