"""Data that makes sense (issue 36, item 5): each fault below passed every gate and was published before."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from evidence_helpers import vllm_cpu_run  # noqa: F401  (a fixture)

from atomdyn_launchers.evidence.gates import GateResult, evaluate
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.evidence.summary import collect
from atomdyn_launchers.evidence.verify import verify_path

SENSE_GATES = {
    "request_indexes_unique",
    "request_latencies_sane",
    "request_tokens_plausible",
    "requests_corrupt_lines",
    "timeline_monotonic",
    "timeline_corrupt_lines",
}


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _edit(run: Path, name: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    records = _records(run / name)
    change(records)
    _write(run / name, records)


def _judged(run: Path) -> dict[str, GateResult]:
    return {r.id: r for r in evaluate(collect_signals(run))}


def test_a_run_that_makes_sense_lists_none_of_these_gates(vllm_cpu_run: Path) -> None:  # noqa: F811
    judged = _judged(vllm_cpu_run)
    assert not SENSE_GATES & set(judged)  # so evidence collected before them verifies unchanged
    assert all(r.verdict != "fail" for r in judged.values())


def _duplicate_row(records: list[dict[str, Any]]) -> None:
    records.append(dict(records[0]))


def _negative_latency(records: list[dict[str, Any]]) -> None:
    records[0]["latency_s"] = -1.5


def _latency_as_text(records: list[dict[str, Any]]) -> None:
    records[0]["latency_s"] = "4.7"


def _huge_tokens(records: list[dict[str, Any]]) -> None:
    records[0]["completion_tokens"] = 10**30


def _negative_prompt_tokens(records: list[dict[str, Any]]) -> None:
    records[1]["prompt_tokens"] = -3


def _index_missing(records: list[dict[str, Any]]) -> None:
    del records[2]["index"]


@pytest.mark.parametrize(
    ("change", "gate"),
    [
        (_duplicate_row, "request_indexes_unique"),
        (_index_missing, "request_indexes_unique"),
        (_negative_latency, "request_latencies_sane"),
        (_latency_as_text, "request_latencies_sane"),
        (_huge_tokens, "request_tokens_plausible"),
        (_negative_prompt_tokens, "request_tokens_plausible"),
    ],
)
def test_a_request_row_that_makes_no_sense_fails_its_gate(
    vllm_cpu_run: Path,  # noqa: F811
    change: Callable[[list[dict[str, Any]]], None],
    gate: str,
) -> None:
    _edit(vllm_cpu_run, "requests.jsonl", change)
    judged = _judged(vllm_cpu_run)
    assert judged[gate].verdict == "fail" and judged[gate].value == 1, judged[gate]


def test_a_timeline_running_backwards_fails(vllm_cpu_run: Path) -> None:  # noqa: F811
    def backwards(records: list[dict[str, Any]]) -> None:
        records[3]["t"] = records[0]["t"] - 60

    _edit(vllm_cpu_run, "timeline.jsonl", backwards)
    assert _judged(vllm_cpu_run)["timeline_monotonic"].verdict == "fail"


@pytest.mark.parametrize(
    ("name", "line", "gate", "why"),
    [
        ("requests.jsonl", "\x00\n", "requests_corrupt_lines", "a NUL line"),
        (
            "requests.jsonl",
            '{"index": 99, "latency_s": NaN}\n',
            "requests_corrupt_lines",
            "NaN is not a JSON number",
        ),
        ("requests.jsonl", '{"index": 99, "index": 98}\n', "requests_corrupt_lines", "duplicate key 'index'"),
        ("timeline.jsonl", "\x00\x00\x00\n", "timeline_corrupt_lines", "a NUL line"),
        ("timeline.jsonl", "not json\n", "timeline_corrupt_lines", "not valid JSON"),
    ],
)
def test_a_corrupt_line_is_a_named_failure(
    vllm_cpu_run: Path,  # noqa: F811
    tmp_path: Path,
    name: str,
    line: str,
    gate: str,
    why: str,
) -> None:
    with open(vllm_cpu_run / name, "a") as handle:
        handle.write(line)
    out, summary = collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)
    failed = {g["id"]: g for g in summary["gates"] if g["verdict"] == "fail"}
    assert gate in failed and failed[gate]["value"] == 1, summary["gates"]
    excerpt = (out / failed[gate]["excerpt"]).read_text()
    assert f"{name}:" in excerpt and why in excerpt, excerpt
    assert verify_path(out).intact  # judged again from data/ alike
