"""Signals and gates on real and realistic runs, and on every kind of bad input the issue names."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from evidence_helpers import request, write_jsonl

from atomdyn_launchers.evidence.gates import GATES, evaluate, gates_for, overall
from atomdyn_launchers.evidence.signals import collect_signals


def _verdicts(run: Path) -> dict[str, str]:
    return {r.id: r.verdict for r in evaluate(collect_signals(run))}


def _failed(run: Path) -> dict[str, str]:
    return {r.id: r.reason for r in evaluate(collect_signals(run)) if r.verdict == "fail"}


MOCKER_GATES = [
    "launcher_result", "jobs_clean", "provenance", "placement", "distinct_nodes", "timeline", "requests_sent", "requests_ok",
    "non_empty_output", "generated_tokens", "frontend_counted", "pd_split", "kv_handoff", "prefix_hit_decode",
]  # fmt: skip


def test_recorded_mocker_run_passes_every_disagg_gate(mocker_run: Path) -> None:
    signals = collect_signals(mocker_run)
    results = evaluate(signals)
    assert [r.id for r in results] == MOCKER_GATES
    assert {r.verdict for r in results} == {"pass"} and overall(results) == "pass"
    assert signals.get("requests.total") == 6 and signals.get("requests.pd_split") == 6
    assert signals.get("requests.completion_tokens") == 144
    assert (
        signals.get("requests.repeat_hit_max") > 0.9
    )  # the long prompt repeated: router saw the cached blocks
    assert signals.get("frontend.requests_success") == 7  # the readiness probe plus the six smoke requests
    assert signals.get("logs.nixl_err") == 0 and signals.get("dmabuf.active") is False
    assert signals.problems == []


def test_atom_run_passes_and_reads_nixl_dmabuf_and_prefix_signals(atom_run: Path) -> None:
    signals = collect_signals(atom_run)
    results = evaluate(signals)
    assert overall(results) == "pass", [r for r in results if r.verdict != "pass"]
    ids = {r.id for r in results}
    assert {"kv_handoff", "kv_failures", "nixl_err", "nixl_rocm_init", "dmabuf_registered", "dmabuf_failures",
            "prefix_hit_decode"} <= ids  # fmt: skip
    assert signals.get("kv.transfers") == 12 and signals.get("kv.bytes") == 35389440
    assert signals.get("kv.failed_transfers") == 0
    assert signals.get("prefix.decode_hits") == 4608 and signals.get("prefix.decode_external_hits") == 3072
    assert signals.get("dmabuf.ok") == 8 and signals.get("dmabuf.fail") == 0
    assert signals.get("logs.host_vram") == 2
    assert signals.get("nixl_rocm.initialized_roles") == ["decode", "prefill"]
    assert [(round(t), mb, n) for t, mb, n in signals.kv_points] == [
        (0, 2.25, 3),
        (10, 2.25, 8),
        (20, 9.0, 1),
    ]


def test_every_gate_reads_a_signal_the_collector_produces(atom_run: Path, mocker_run: Path) -> None:
    produced = set(collect_signals(atom_run).values) | set(collect_signals(mocker_run).values)
    for gate in GATES:
        assert gate.signal in produced, gate
        if gate.when:
            assert gate.when in produced, gate
        if isinstance(gate.expect, str) and gate.expect.startswith("$"):
            assert gate.expect[1:] in produced, gate


def test_gate_table_per_kind() -> None:
    assert "distinct_nodes" not in {g.id for g in gates_for("agg-single", "mocker")}
    assert "distinct_nodes" in {g.id for g in gates_for("agg-two", "vllm")}
    assert "nixl_rocm_init" in {g.id for g in gates_for("disagg", "atom")}
    assert "nixl_rocm_init" not in {g.id for g in gates_for("disagg", "vllm")}
    assert {g.signal for g in gates_for("disagg", "mocker") if g.id == "kv_handoff"} == {"requests.pd_split"}


def test_nixl_err_record_fails(atom_run: Path) -> None:
    log = atom_run / "logs" / "decode.worker.log"
    log.write_text(
        log.read_text() + "E1129 23:15:44.1 1171 ucx_backend.cpp:912] transfer failed: NIXL_ERR_BACKEND\n"
    )
    assert _failed(atom_run) == {"nixl_err": "logs.nixl_err is 1, expected == 0"}


def test_dmabuf_registration_failure_fails_with_its_errno(atom_run: Path) -> None:
    log = atom_run / "logs" / "prefill.worker.log"
    log.write_text(
        log.read_text()
        + "dmabuf-shim: reg fail backend=hsa path=dmabuf size=2359296 offset=4096 fd_closed=1 "
        "addr=0x7f3a20001000 iova=0x7f3a20001000 access=0xf errno=22\n"
    )
    assert _failed(atom_run) == {"dmabuf_failures": "dmabuf.fail is 1, expected == 0"}
    assert collect_signals(atom_run).get("dmabuf.fail_errnos") == {"EINVAL": 1}


def test_failed_kv_transfers_and_no_prefix_hit_fail(atom_run: Path) -> None:
    prom = atom_run / "metrics" / "decode.worker.prom"
    text = prom.read_text().replace("vllm:prefix_cache_hits_total{", "vllm:ignored{")
    prom.write_text(text.replace('nixl_num_failed_transfers_total{engine="0",model_name="Qwen/Qwen3-8B"} 0.0',
                                 'nixl_num_failed_transfers_total{engine="0",model_name="Qwen/Qwen3-8B"} 2.0'))  # fmt: skip
    failed = _failed(atom_run)
    assert failed["kv_failures"] == "kv.failed_transfers is 2, expected == 0"
    assert failed["prefix_hit_decode"].startswith(
        "no data: no metrics/*.prom file has vllm:prefix_cache_hits"
    )


def test_worker_without_nixl_rocm_init_fails(atom_run: Path) -> None:
    log = atom_run / "logs" / "prefill.worker.log"
    log.write_text("\n".join(line for line in log.read_text().splitlines() if "nixl_rocm" not in line) + "\n")
    assert _failed(atom_run) == {"nixl_rocm_init": "nixl_rocm.uninitialized_roles is 1, expected == 0"}


def test_zero_generated_tokens_is_a_failure_not_a_success(mocker_run: Path) -> None:
    records = [request(i, f"g{i}", completion_tokens=0, content_chars=0) for i in range(4)]
    write_jsonl(mocker_run / "requests.jsonl", records)
    failed = _failed(mocker_run)
    assert failed["generated_tokens"] == "requests.completion_tokens is 0, expected > 0"
    assert failed["non_empty_output"] == "requests.empty is 4, expected == 0"


def test_same_worker_for_prefill_and_decode_and_same_node_fail(mocker_run: Path) -> None:
    write_jsonl(
        mocker_run / "requests.jsonl", [request(i, "same", decode_worker_id=7587888281234) for i in range(3)]
    )
    run = json.loads((mocker_run / "run.json").read_text())
    for job in run["jobs"]:
        job["node_ran"] = job["node_requested"] = "n1"
    (mocker_run / "run.json").write_text(json.dumps(run))
    failed = _failed(mocker_run)
    assert failed["pd_split"] == "requests.pd_not_split is 3, expected == 0"
    assert failed["kv_handoff"] == "requests.pd_split is 0, expected >= 1"
    assert failed["distinct_nodes"] == "placement.distinct_nodes is 1, expected >= 2"
    assert failed["prefix_hit_decode"] == "no data: repeated prompts carry no kv_hit_rate"


def test_failed_request_and_failed_job_fail(mocker_run: Path) -> None:
    with open(mocker_run / "requests.jsonl", "a") as out:
        out.write(json.dumps(request(6, "x", status=503, ok=False, error="Model not ready")) + "\n")
    run = json.loads((mocker_run / "run.json").read_text())
    run["jobs"][0].update(state="FAILED", exit_code="1:0")
    (mocker_run / "run.json").write_text(json.dumps(run))
    failed = _failed(mocker_run)
    assert failed["requests_ok"] == "requests.failed is 1, expected == 0"
    assert failed["jobs_clean"] == "jobs.clean is False, expected == True"


def test_missing_metrics_fail_the_gates_they_feed(mocker_run: Path, atom_run: Path) -> None:
    shutil.rmtree(mocker_run / "metrics")
    assert _failed(mocker_run) == {"frontend_counted": "no data: no metrics/*.prom file"}
    (atom_run / "metrics" / "decode.worker.prom").unlink()
    failed = _failed(atom_run)
    assert set(failed) == {"kv_handoff", "kv_failures", "prefix_hit_decode"}
    assert all(reason.startswith("no data: no metrics/*.prom file has") for reason in failed.values())


def test_truncated_and_garbage_files_never_crash_and_never_pass(mocker_run: Path) -> None:
    requests = mocker_run / "requests.jsonl"
    data = requests.read_bytes()
    requests.write_bytes(data[: len(data) - 40])  # cut inside the last record
    (mocker_run / "logs" / "decode.worker.log").write_bytes(os.urandom(200_000))
    (mocker_run / "metrics" / "decode.frontend.prom").write_bytes(
        b"\x00\xff garbage {{{ \n" + os.urandom(5000)
    )
    (mocker_run / "timeline.jsonl").write_bytes(b'{"t": 1, "event": "submitted"}\n\x89PNG\r\n{"t": 2, "ev')
    with open(mocker_run / "requests.jsonl", "rb+") as out:  # a 3 MB line of garbage before the cut record
        body = out.read()
        out.seek(0)
        out.write(b"\xff" * (3 << 20) + b"\n" + body)
    signals = collect_signals(mocker_run)
    assert signals.get("requests.total") == 5
    assert any("truncated last line" in p for p in signals.problems)
    assert "requests.jsonl: 1 line(s) are not JSON objects and were ignored" in signals.problems
    assert any("not JSON objects" in p for p in signals.problems)
    failed = _failed(mocker_run)
    assert failed["timeline"] == "timeline.complete is False, expected == True"
    assert failed["frontend_counted"].startswith(
        "no data: no metrics/*.prom file has dynamo_frontend_requests"
    )


def test_aborted_run_fails_naming_the_missing_data(tmp_path: Path) -> None:
    run = tmp_path / "20261130T010203Z-disagg-atom"
    run.mkdir()
    write_jsonl(run / "timeline.jsonl", [{"t": 1.0, "event": "submitted", "role": "prefill"}])
    results = evaluate(collect_signals(run))
    assert overall(results) == "fail"
    reasons = {r.id: r.reason for r in results}
    assert reasons["launcher_result"] == "no data: run.json is missing (aborted run?)"
    assert reasons["requests_sent"] == "no data: requests.jsonl is missing"
    assert reasons["nixl_err"] == "no data: no logs/ files (aborted run?)"
    assert reasons["kv_handoff"] == "no data: no metrics/*.prom file"
    assert "pass" not in {r.verdict for r in results}


def test_empty_directory_of_unknown_kind_fails(tmp_path: Path) -> None:
    results = evaluate(collect_signals(tmp_path))
    assert results[0].id == "run_kind" and results[0].verdict == "fail"
    assert overall(results) == "fail"


def test_missing_lock_digest_or_unverified_placement_fail(mocker_run: Path) -> None:
    run = json.loads((mocker_run / "run.json").read_text())
    run.update(lock_digest=None, placement_verified=False)
    (mocker_run / "run.json").write_text(json.dumps(run))
    assert _failed(mocker_run) == {
        "provenance": "run.provenance is False, expected == True",
        "placement": "placement.ok is False, expected == True",
    }


def test_aggregated_atom_run_needs_a_prefix_hit(atom_run: Path) -> None:
    run = json.loads((atom_run / "run.json").read_text())
    run.update(kind="agg-single", jobs=run["jobs"][:1])
    run["jobs"][0]["role"] = "agg"
    (atom_run / "run.json").write_text(json.dumps(run))
    (atom_run / "metrics" / "decode.worker.prom").unlink()
    results = {r.id: r for r in evaluate(collect_signals(atom_run))}
    assert "distinct_nodes" not in results and "kv_handoff" not in results
    assert results["prefix_hit"].verdict == "fail"
    assert results["prefix_hit"].reason == "prefix.hits is 0, expected > 0"  # the prefill file's 0 hits
