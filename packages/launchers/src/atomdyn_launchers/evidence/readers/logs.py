"""``logs/``: the roles' logs, scanned line by line (evidence/logscan.py): NIXL errors, tracebacks, the dma-buf
helper's registrations, the VRAM UCX classified as host, UCX's protocol tables of the KV path."""

from __future__ import annotations

from pathlib import Path

from atomdyn_launchers.engines.hardware import WorkerProbe
from atomdyn_launchers.evidence import logscan
from atomdyn_launchers.evidence.readers.base import Reader, Signals, worker_roles

_NAMES = (
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


def role_of(path: Path) -> str:
    """``logs/<role>.<process>.log`` -> role."""
    return path.name.split(".", 1)[0]


def read_logs(signals: Signals) -> None:
    files = sorted(p for p in (signals.run_dir / "logs").glob("*") if p.is_file())
    if not files:
        for name in _NAMES:
            signals.absent(name, "no logs/ files (aborted run?)")
        signals.set("dmabuf.seen", False)
        return
    totals: dict[str, int] = {}
    ok_by_role: dict[str, int] = {}
    host_vram_by_role: dict[str, int] = {}
    errnos: dict[str, int] = {}
    transports: dict[str, int] = {}
    points: list[logscan.KvPoint] = []
    engine: dict[str, WorkerProbe] = {}
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
        role = role_of(path)
        ok_by_role[role] = ok_by_role.get(role, 0) + scan.count("dmabuf_ok")
        host_vram_by_role[role] = host_vram_by_role.get(role, 0) + scan.count("host_vram")
        for key, count in scan.dmabuf_errnos.items():
            errnos[key] = errnos.get(key, 0) + count
        for key, count in scan.kv_transports.items():
            transports[key] = transports.get(key, 0) + count
        for row, first in scan.kv_rows.items():
            signals.kv_rows.setdefault(row, first)
        points.extend(scan.kv_points)
        probe = engine.setdefault(role, WorkerProbe())
        probe.platforms |= scan.engine.platforms
        probe.models |= scan.engine.models
        probe.lines += scan.engine.lines
    if not read:
        for name in _NAMES:
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
    workers = sorted(worker_roles(signals))
    # What each worker logged of vLLM's platform and the model it loaded: the platform label needs it to agree
    # (engines/hardware.py corroborate, evidence/summary.py).
    signals.set(
        "workers.engine_probes", {role: engine.get(role, WorkerProbe()).to_json() for role in workers}
    )
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


READER = Reader(
    "logs/*",
    frozenset({
        *_NAMES, "dmabuf.seen", "logs.files", "dmabuf.plain", "dmabuf.fail_errnos", "dmabuf.ok_by_role",
        "logs.host_vram_by_role", "kv.log_transfers", "workers.engine_probes",
    }),
    read_logs,
)  # fmt: skip
