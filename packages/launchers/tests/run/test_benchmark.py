"""The serving benchmark's judgement, table and plot (aiperf itself runs in the 8-node rehearsal)."""

from __future__ import annotations

import json
from pathlib import Path

from atomdyn_launchers.config.recipes import Benchmark, Slo
from atomdyn_launchers.run.benchmark import (
    Level,
    SweepResult,
    aiperf_argv,
    gates_failure,
    judge,
    mark_failed,
    pareto_plot,
    parse_export,
    read_result,
    table_markdown,
    write_report,
)


def _level(concurrency: int, tokens: float = 6400.0, errors: int = 0) -> Level:
    lat = {"p50": 10.0 * concurrency, "p90": 12.0 * concurrency, "p99": 15.0 * concurrency}
    return Level(
        concurrency=concurrency,
        requests=100,
        errors=errors,
        output_tokens=tokens,
        output_tps=tokens / 10,
        tps_per_user=640.0 / concurrency,
        goodput_rps=None,
        request_rps=10.0,
        latency={"ttft_ms": dict(lat), "itl_ms": dict(lat), "latency_ms": dict(lat)},
    )


def test_zero_generated_tokens_is_failed_never_a_result() -> None:
    assert judge([_level(1), _level(4, tokens=0.0)], None) == "FAILED: concurrency 4 generated 0 tokens"
    assert judge([_level(1), _level(4, errors=3)], None).startswith("FAILED: concurrency 4: 3 failed")
    assert judge([], None) == "FAILED: no level was measured"
    assert judge([_level(1)], "KV gates failed").startswith("FAILED: the run failed (KV gates failed)")
    assert judge([_level(1), _level(4)], None) == "PASS"


def test_a_failed_run_rewrites_the_benchmark_verdict(tmp_path: Path) -> None:
    (tmp_path / "benchmark").mkdir()
    result = SweepResult([_level(1)], "PASS", workers=6, gpus=0)
    (tmp_path / "benchmark" / "benchmark.json").write_text(json.dumps(result.to_json()), encoding="utf-8")
    mark_failed(tmp_path, "jobs did not stop cleanly")
    assert read_result(tmp_path).verdict.startswith("FAILED: the run failed (jobs did not stop cleanly)")


def test_table_and_plot_per_worker_without_gpus(tmp_path: Path) -> None:
    result = SweepResult([_level(1), _level(4)], "PASS", workers=4, gpus=0)
    table = table_markdown(result)
    assert "tok/s per worker" in table and "Verdict: **PASS**" in table
    assert "| 4 | 100 / 0 | 640.0 | 160.0 | 160.0 | - | 40.0 / 48.0 / 60.0 |" in table
    assert "tok/s per GPU" in table_markdown(SweepResult(result.levels, "PASS", workers=2, gpus=2))
    assert pareto_plot(result, tmp_path / "p.png", "rehearsal")
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_aiperf_command_line() -> None:
    bench = Benchmark("aiperf", (1, 8), 32, 512, 64, True, Slo(ttft_ms=200, itl_ms=20))
    argv = aiperf_argv(Path("/v/bin/aiperf"), bench, "http://10.0.0.3:21000", "m", "/models/m", 8, Path("/o"))
    text = " ".join(argv)
    assert text.startswith("/v/bin/aiperf profile --model m --url http://10.0.0.3:21000")
    assert "--concurrency 8 --request-count 32" in text and "--streaming" in argv
    assert argv[argv.index("--goodput") + 1] == "time_to_first_token:200 inter_token_latency:20"
    assert "ignore_eos:true" in argv


FIXTURE = Path(__file__).parents[1] / "fixtures" / "aiperf" / "profile_export_aiperf.json"


def test_parse_a_real_aiperf_export() -> None:
    """aiperf 0.13.0's export of the 2P4D rehearsal at concurrency 4 (addresses and paths replaced)."""
    level = parse_export(FIXTURE, 4)
    assert (level.requests, level.errors) == (64, 0)
    assert level.output_tokens == 4243.0
    assert 1447.0 < level.output_tps < 1448.0
    assert level.latency["ttft_ms"]["p50"] > 0 and level.latency["itl_ms"]["p99"] > 0
    assert level.goodput_rps is not None and level.goodput_rps > 0
    assert judge([level], None) == "PASS"


def test_errors_and_zero_tokens_in_an_export_fail_it(tmp_path: Path) -> None:
    export = json.loads(FIXTURE.read_text(encoding="utf-8"))
    export["error_summary"] = [{"error_details": {"code": 500}, "count": 3}]
    export["total_output_tokens"] = {"unit": "tokens", "avg": 0.0}
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    level = parse_export(path, 4)
    assert level.errors == 3
    assert judge([level], None) == "FAILED: concurrency 4 generated 0 tokens"


def test_failed_evidence_gates_fail_the_benchmark(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "benchmark").mkdir(parents=True)
    result = SweepResult([_level(1), _level(4)], "PASS", workers=6, gpus=0)
    (run / "benchmark" / "benchmark.json").write_text(json.dumps(result.to_json()), encoding="utf-8")
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    gates = [{"id": "kv_transfers", "verdict": "fail"}, {"id": "requests_sent", "verdict": "pass"}]
    (evidence / "summary.json").write_text(json.dumps({"gates_failed": 1, "gates": gates}), encoding="utf-8")
    assert gates_failure(evidence) == "1 evidence gate(s) failed: kv_transfers"
    write_report(run, tmp_path / "out", "rehearsal", evidence)
    table = (tmp_path / "out" / "benchmark.md").read_text(encoding="utf-8")
    assert "Verdict: **FAILED: the run failed (1 evidence gate(s) failed: kv_transfers)" in table
