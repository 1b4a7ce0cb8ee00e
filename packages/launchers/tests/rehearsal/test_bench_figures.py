"""What disagg.bench reads from a run directory: KV transfers, the workers' compile cache, the KV's nodes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from atomdyn_launchers.rehearsal.bench_figures import (
    compile_cache,
    kv_nodes,
    kv_transfers,
    local_cluster_state_dir,
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
