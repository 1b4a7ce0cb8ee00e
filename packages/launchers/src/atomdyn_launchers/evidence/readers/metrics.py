"""``metrics/`` and ``metrics-ready/``: the Prometheus scrapes of the frontend and the workers, read through the
metric names the run's engine declares (``GateExpectations.metrics``, a
:class:`~atomdyn_launchers.contract.metrics.MetricNames`): no engine's metric name is written here.

The frontend is Dynamo's whatever the engine (``dynamo_frontend_requests_total``). The KV transfers are counted by
the decode workers of a P/D run (they read the KV); the prefix cache of a P/D run is its decode roles', of an
aggregated run its one worker role's.
"""

from __future__ import annotations

from atomdyn_launchers.contract.kinds import DISAGG_KINDS
from atomdyn_launchers.contract.metrics import MetricNames
from atomdyn_launchers.contract.rundir import READY_METRICS_DIR
from atomdyn_launchers.evidence import logscan, prom
from atomdyn_launchers.evidence.expectations import metric_names
from atomdyn_launchers.evidence.readers.base import Reader, Signals, mode

FRONTEND_REQUESTS = "dynamo_frontend_requests_total"
# signal -> the MetricNames quantity it is read from (summed over files and labels)
KV_SIGNALS = {
    "kv.transfers": "kv_transfers",
    "kv.seconds": "kv_seconds",
    "kv.bytes": "kv_bytes",
    "kv.failed_transfers": "kv_failed_transfers",
}
# the prefix cache's counts by what they count -> the MetricNames quantity
PREFIX_COUNTS = {
    "queries": "prefix_queries",
    "hits": "prefix_hits",
    "external_queries": "external_prefix_queries",
    "external_hits": "external_prefix_hits",
}
# every signal this reader sets -> the quantities it reads (the test of the engines' metric names uses it)
SIGNAL_QUANTITIES: dict[str, tuple[str, ...]] = {
    "frontend.requests_success": (),
    "frontend.requests_total": (),
    **{signal: (quantity,) for signal, quantity in KV_SIGNALS.items()},
    "kv.failed_transfers_warmup": ("kv_failed_transfers",),
    **{f"prefix.decode_{key}": (quantity,) for key, quantity in PREFIX_COUNTS.items()},
    "prefix.hits": ("prefix_hits",),
    "prefix.decode_hit_rate": ("prefix_hits", "prefix_queries"),
}


def _engine_metrics(signals: Signals) -> MetricNames:
    """The metric names of the engine the run names (an engine nobody knows names none)."""
    return metric_names(signals.get("run.engine"), signals.run.get("config"))


def _split_warmup_failures(
    signals: Signals, total: float, disagg: bool, failed_names: frozenset[str]
) -> None:
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
        if disagg and mode(path.name.split(".", 1)[0]) != "decode":
            continue
        try:
            for sample in prom.read_samples(path, failed_names):
                warmup += sample.value
                signals.excerpt(
                    "metrics.kv", f"{READY_METRICS_DIR}/{path.name}: {sample.line[: logscan.MAX_LINE]}"
                )
        except OSError as exc:
            signals.problems.append(f"{READY_METRICS_DIR}/{path.name}: unreadable: {exc}")
    signals.set("kv.failed_transfers_warmup", int(warmup))
    signals.set("kv.failed_transfers", int(max(total - warmup, 0.0)))


def read_metrics(signals: Signals) -> None:
    names = _engine_metrics(signals)
    kv = {sample: signal for signal, quantity in KV_SIGNALS.items() for sample in names.samples(quantity)}
    counts = {sample: key for key, quantity in PREFIX_COUNTS.items() for sample in names.samples(quantity)}
    wanted = frozenset({FRONTEND_REQUESTS, *kv, *counts})
    files = sorted((signals.run_dir / "metrics").glob("*.prom"))
    sums: dict[str, float] = {}
    prefix: dict[str, dict[str, float]] = {}
    disagg = signals.get("run.kind") in DISAGG_KINDS
    shown: dict[str, int] = {}
    for path in files:
        role = path.name.split(".", 1)[0]
        try:
            for sample in prom.read_samples(path, wanted):
                if sample.name == FRONTEND_REQUESTS:
                    sums["frontend.requests_total"] = sums.get("frontend.requests_total", 0.0) + sample.value
                    if sample.labels.get("status") == "success":
                        key = "frontend.requests_success"
                        sums[key] = sums.get(key, 0.0) + sample.value
                    group = "metrics.frontend"
                elif sample.name in kv:
                    if disagg and mode(role) != "decode":  # the decode workers read the KV and count it
                        continue
                    key = kv[sample.name]
                    sums[key] = sums.get(key, 0.0) + sample.value
                    group = "metrics.kv"
                else:
                    per_role = prefix.setdefault(role, {})
                    key = counts[sample.name]
                    per_role[key] = per_role.get(key, 0.0) + sample.value
                    group = "metrics.prefix"
                if shown.get(sample.name, 0) < 3:
                    shown[sample.name] = shown.get(sample.name, 0) + 1
                    signals.excerpt(group, f"{path.name}: {sample.line[: logscan.MAX_LINE]}")
        except OSError as exc:
            signals.problems.append(f"metrics/{path.name}: unreadable: {exc}")
    where = "no metrics/*.prom file" if not files else "no metrics/*.prom file has "
    decode_only = " for the decode role" if disagg else ""

    def lacking(quantity: str, suffix: str) -> str:
        """Why a signal read from ``quantity`` is absent: no scrape, none with the metric, or no such metric."""
        named = names.named(quantity)
        if named is None:
            return f"engine {signals.get('run.engine')!r} names no metric for {quantity} (its MetricNames)"
        return where + (named + suffix if files else "")

    for key, metric in (
        ("frontend.requests_success", f'{FRONTEND_REQUESTS}{{status="success"}}'),
        ("frontend.requests_total", FRONTEND_REQUESTS),
    ):
        if key in sums:
            value = sums[key]
            signals.set(key, int(value) if value.is_integer() else value)
        else:
            signals.absent(key, where + (metric if files else ""))
    for key, quantity in KV_SIGNALS.items():
        if key in sums:
            value = sums[key]
            signals.set(key, int(value) if value.is_integer() and key != "kv.seconds" else value)
        else:
            signals.absent(key, lacking(quantity, decode_only))
    if "kv.failed_transfers" in sums:
        failed_names = frozenset(names.samples("kv_failed_transfers"))
        _split_warmup_failures(signals, sums["kv.failed_transfers"], disagg, failed_names)
    # Disaggregated: the decode roles' caches, summed. Aggregated: the one worker role there is.
    decode: dict[str, float] | None = None
    for role, per_role in prefix.items():
        if mode(role) == "decode":
            decode = decode if decode is not None else {}
            for key, value in per_role.items():
                decode[key] = decode.get(key, 0.0) + value
    if decode is None and signals.get("run.kind") not in DISAGG_KINDS and len(prefix) == 1:
        decode = next(iter(prefix.values()))
    for key, quantity in PREFIX_COUNTS.items():
        name = f"prefix.decode_{key}"
        if decode is not None and key in decode:
            signals.set(name, int(decode[key]))
        else:
            signals.absent(name, lacking(quantity, " for the decode role"))
    if any("hits" in per_role for per_role in prefix.values()):
        signals.set("prefix.hits", int(sum(per_role.get("hits", 0.0) for per_role in prefix.values())))
    else:
        signals.absent("prefix.hits", lacking("prefix_hits", ""))
    hits, queries = signals.get("prefix.decode_hits"), signals.get("prefix.decode_queries")
    if hits is not None and queries:
        signals.set("prefix.decode_hit_rate", round(hits / queries, 4))


READER = Reader("metrics/*.prom, metrics-ready/*.prom", frozenset(SIGNAL_QUANTITIES), read_metrics)
