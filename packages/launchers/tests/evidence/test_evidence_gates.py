"""Signals and gates on real runs' lines, on every kind of bad input, and per engine expectation."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from evidence_helpers import (
    FIXTURES,
    H200_BENCH_LOG,
    HOST_VRAM_REGIONS,
    OBSERVED,
    REGISTRATIONS,
    REHEARSAL,
    UCX_CMA,
    UCX_RC,
    UCX_TCP,
    dmabuf_lines,
    host_vram_lines,
    real_lines,
    request,
    write_jsonl,
)

from atomdyn_launchers.contract import answers
from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.evidence.expectations import expectations_for
from atomdyn_launchers.evidence.gates import GATES, GateResult, carries, evaluate, gates_for, overall
from atomdyn_launchers.evidence.signals import collect_signals

ATOM = expectations_for("atom")


def _results(run: Path, expectations: GateExpectations | None = None) -> list[GateResult]:
    return evaluate(collect_signals(run), expectations)


def _failed(run: Path, expectations: GateExpectations | None = None) -> dict[str, str]:
    return {r.id: r.reason for r in _results(run, expectations) if r.verdict == "fail"}


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a") as out:
        out.write("".join(line + "\n" for line in lines))


MOCKER_GATES = [
    "launcher_result", "jobs_clean", "provenance", "placement_verified", "distinct_nodes",
    "jobs_recorded_vs_timeline", "timeline_complete",
    "requests_sent", "requests_recorded", "requests_recorded_vs_timeline", "requests_ok_recorded",
    "requests_ok_recorded_vs_timeline", "requests_failed", "empty_responses", "completion_tokens",
    "frontend_successes", "responses_not_pd_split", "pd_split_responses", "dmabuf_failures",
    "repeat_kv_hit_rate_max",
]  # fmt: skip


def test_recorded_mocker_run_passes_every_disagg_gate(mocker_run: Path) -> None:
    signals = collect_signals(mocker_run)
    results = evaluate(signals)
    assert [r.id for r in results] == MOCKER_GATES
    verdicts = {r.id: r.verdict for r in results}
    assert verdicts.pop("dmabuf_failures") == "n/a"  # no helper expected, none logged
    assert set(verdicts.values()) == {"pass"} and overall(results) == "pass"
    assert signals.get("requests.total") == 6 and signals.get("requests.pd_split") == 6
    assert signals.get("requests.completion_tokens") == 144
    assert signals.get("requests.repeat_hit_max") > 0.9  # the long prompt repeated: the router saw its blocks
    assert signals.get("frontend.requests_success") == 7  # the readiness probe plus the six smoke requests
    assert signals.get("logs.nixl_err") == 0 and signals.get("dmabuf.seen") is False
    assert signals.problems == []


def test_real_vllm_cpu_rehearsal_passes_the_gates_its_engine_expects(vllm_cpu_run: Path) -> None:
    signals = collect_signals(vllm_cpu_run)
    results = evaluate(signals, REHEARSAL)
    assert {r.id: r.verdict for r in results if r.verdict != "pass"} == {"dmabuf_failures": "n/a"}
    assert signals.get("kv.transfers") == 9 and signals.get("kv.bytes") == 1900544
    assert signals.get("kv.failed_transfers") == 0 and signals.get("prefix.decode_external_hits") == 2955
    assert signals.get("kv.transport_rows") == {"tcp/eth0": 15}  # UCX's own tables: the KV went over TCP
    assert [(n, mb) for _, mb, n in signals.kv_points] == [(5, 0.312)]  # vLLM's "KV Transfer metrics" line


def test_real_tcp_kv_path_fails_an_atom_pd_run(vllm_cpu_run: Path) -> None:
    """The same real run judged as ATOM expects: KV over TCP is the silent fallback that must fail."""
    failed = _failed(vllm_cpu_run, ATOM)
    assert failed["kv_forbidden_transport_rows"] == "kv.forbidden_transport_rows is 15, expected == 0"
    assert failed["kv_transport_rows"] == "kv.expected_transport_rows is 0, expected >= 1"
    assert failed["dmabuf_registrations_min_per_worker"] == "dmabuf.min_ok_per_worker is 0, expected >= 1"
    assert (
        failed["host_vram_registrations_min_per_worker"]
        == "logs.host_vram_min_per_worker is 0, expected >= 1"
    )
    assert failed["doctor_missing_roles"] == "doctor.missing_roles is 2, expected == 0"


def test_real_run_without_its_nixl_metrics_fails(vllm_cpu_run: Path) -> None:
    prom = vllm_cpu_run / "metrics" / "decode.decode.prom"
    prom.write_text(
        "".join(line for line in prom.read_text().splitlines(keepends=True) if "nixl" not in line)
    )
    failed = _failed(vllm_cpu_run, REHEARSAL)
    assert set(failed) == {"nixl_transfers", "nixl_bytes", "nixl_failed_transfers"}


def _failed_transfers(prom: Path, count: float) -> str:
    return re.sub(
        r"^(vllm:nixl_num_failed_transfers_total\{.*\}) \d+\.\d+$",
        rf"\g<1> {count}",
        prom.read_text(),
        flags=re.M,
    )


def test_kv_failures_while_warming_up_are_counted_apart_from_the_runs(vllm_cpu_run: Path) -> None:
    """vLLM 0.32 gives its NIXL handshake a fixed 5 s: a worker still compiling its first shapes can miss it,
    and the launcher's probe retries. Failures before the first verified response (the snapshot in
    metrics-ready/) are the warm-up's; the gate judges the ones after it."""
    final = vllm_cpu_run / "metrics" / "decode.decode.prom"
    ready = vllm_cpu_run / "metrics-ready" / "decode.decode.prom"
    ready.parent.mkdir()
    ready.write_text(_failed_transfers(final, 2.0))
    final.write_text(_failed_transfers(final, 2.0))
    signals = collect_signals(vllm_cpu_run)
    assert (signals.get("kv.failed_transfers"), signals.get("kv.failed_transfers_warmup")) == (0, 2)
    assert "nixl_failed_transfers" not in _failed(vllm_cpu_run, REHEARSAL)

    final.write_text(_failed_transfers(final, 3.0))  # one more after the first verified response
    assert _failed(vllm_cpu_run, REHEARSAL) == {
        "nixl_failed_transfers": "kv.failed_transfers is 1, expected == 0"
    }
    ready.unlink()  # no verified response, no snapshot: every failure is the run's
    assert (
        _failed(vllm_cpu_run, REHEARSAL)["nixl_failed_transfers"] == "kv.failed_transfers is 3, expected == 0"
    )
    assert collect_signals(vllm_cpu_run).get("kv.failed_transfers_warmup") is None


def test_a_gpu_engines_answer_is_judged_by_a_token_prefix_and_a_logprob_tolerance(vllm_cpu_run: Path) -> None:
    """The atom engine's rule (issue 23, item 4), on answers with log probabilities captured from a real aggregated
    vllm-cpu run and the P/D run after it (fixtures/answers-logprobs: equal tokens, equal log probabilities)."""
    assert ATOM is not None and ATOM.answer_prefix_tokens == 16 and ATOM.answer_logprob_tolerance == 0.1
    expects = replace(
        REHEARSAL, aggregated_answer=True, answer_prefix_tokens=16, answer_logprob_tolerance=0.1
    )
    run_json = json.loads((vllm_cpu_run / "run.json").read_text())
    (vllm_cpu_run / "run.json").write_text(json.dumps({**run_json, "fixed_prompt": answers.FIXED_PROMPT}))
    out = vllm_cpu_run / "answers"
    shutil.copytree(FIXTURES / "answers-logprobs", out)
    verdicts = {r.id: (r.verdict, r.value) for r in _results(vllm_cpu_run, expects)}
    assert verdicts["kv_answer_equals_aggregated"] == ("pass", 0)
    assert verdicts["kv_answer_logprob_max_delta"] == ("pass", 0.0)
    signals = collect_signals(vllm_cpu_run)
    evaluate(signals, expects)
    assert "compared by the engine's rule: the first 16 tokens, log probabilities within 0.1 where the tokens " \
        "agree" in signals.excerpts["answers"]  # fmt: skip

    answer = json.loads((out / "fixed-prompt.json").read_text())
    late = {**answer, "tokens": [*answer["tokens"][:20], "x", *answer["tokens"][21:]]}
    (out / "fixed-prompt.json").write_text(json.dumps(late))  # a near tie flipped after the compared prefix
    assert "kv_answer_equals_aggregated" not in _failed(vllm_cpu_run, expects)
    assert "kv_answer_equals_aggregated" in _failed(vllm_cpu_run, replace(expects, answer_prefix_tokens=None))
    early = {**answer, "tokens": [*answer["tokens"][:3], "x", *answer["tokens"][4:]]}
    (out / "fixed-prompt.json").write_text(json.dumps(early))  # KV read from the wrong place derails early
    assert _failed(vllm_cpu_run, expects)["kv_answer_equals_aggregated"] == (
        "kv.answer_differing_tokens is 1, expected == 0"
    )
    shifted = {**answer, "logprobs": [x - 0.5 * (i == 5) for i, x in enumerate(answer["logprobs"])]}
    (out / "fixed-prompt.json").write_text(json.dumps(shifted))  # the same token, with other odds
    assert _failed(vllm_cpu_run, expects) == {
        "kv_answer_logprob_max_delta": "kv.answer_logprob_max_delta is 0.5, expected <= 0.1 (expected by the engine)"
    }
    (out / "fixed-prompt.json").write_text(json.dumps({k: v for k, v in answer.items() if k != "logprobs"}))
    assert _failed(vllm_cpu_run, expects)["kv_answer_logprob_max_delta"].startswith(
        "no data: an answer kept no log probabilities"
    )


def test_the_pd_answer_is_judged_against_the_aggregated_one_token_for_token(vllm_cpu_run: Path) -> None:
    """Answers captured from a real aggregated run and the P/D run after it (fixtures/answers)."""
    expects = replace(REHEARSAL, aggregated_answer=True)
    # The fixture's run predates the check: its run.json does not say it asked, and the gate does not apply.
    assert {r.id: r.verdict for r in _results(vllm_cpu_run, expects)}["kv_answer_equals_aggregated"] == "n/a"
    run_json = json.loads((vllm_cpu_run / "run.json").read_text())
    run_json["fixed_prompt"] = (
        "Repeat after me: the decode worker reads its KV blocks from the prefill worker."
    )
    (vllm_cpu_run / "run.json").write_text(json.dumps(run_json))
    answers = vllm_cpu_run / "answers"
    shutil.copytree(FIXTURES / "answers", answers)
    signals = collect_signals(vllm_cpu_run)
    assert signals.get("kv.answer_differing_tokens") == 0
    assert "kv_answer_equals_aggregated" not in _failed(vllm_cpu_run, expects)

    answer = json.loads((answers / "fixed-prompt.json").read_text())
    answer["tokens"][5] += "x"  # one token the decode worker got wrong
    (answers / "fixed-prompt.json").write_text(json.dumps(answer))
    assert _failed(vllm_cpu_run, expects) == {
        "kv_answer_equals_aggregated": "kv.answer_differing_tokens is 1, expected == 0"
    }
    answer["tokens"] = answer["tokens"][:20]  # a shorter answer: the missing tokens differ too
    (answers / "fixed-prompt.json").write_text(json.dumps(answer))
    assert collect_signals(vllm_cpu_run).get("kv.answer_differing_tokens") == 5

    reference = json.loads((answers / "reference.json").read_text())
    (answers / "reference.json").write_text(json.dumps({**reference, "key": "vllm-cpu-other-build"}))
    assert _failed(vllm_cpu_run, expects)["kv_answer_equals_aggregated"].startswith(
        "no data: the reference is for vllm-cpu-other-build"
    )
    (answers / "reference.json").unlink()
    assert _failed(vllm_cpu_run, expects)["kv_answer_equals_aggregated"].startswith(
        "no data: no aggregated reference for vllm-cpu-tiny-qwen3-bf16-"
    )
    shutil.rmtree(answers)  # a run that asked nothing fails the gate where the engine expects it
    assert _failed(vllm_cpu_run, expects)["kv_answer_equals_aggregated"].startswith(
        "no data: no answers/fixed-prompt.json"
    )
    assert "kv_answer_equals_aggregated" not in {r.id for r in _results(vllm_cpu_run, REHEARSAL)}


def test_gate_lines_read_as_the_check(mocker_run: Path) -> None:
    lines = {r.id: r.line() for r in _results(mocker_run)}
    assert lines["requests_failed"] == "requests_failed 0 == 0"
    assert lines["requests_recorded"] == "requests_recorded 6 == run.requests_total (6)"
    assert lines["frontend_successes"] == "frontend_successes 7 >= requests.ok (6)"


def test_real_lines_pass_what_they_prove(atom_run: Path) -> None:
    signals = collect_signals(atom_run)
    results = evaluate(signals, OBSERVED)
    assert overall(results) == "pass", [r for r in results if r.verdict != "pass"]
    ids = {r.id for r in results}
    assert {"nixl_transfers", "nixl_failed_transfers", "nixl_err_records", "decode_external_prefix_hits",
            "dmabuf_registrations_min_per_worker", "host_vram_registrations_min_per_worker",
            "dmabuf_short_of_host_vram_workers", "dmabuf_failures", "doctor_missing_roles",
            "doctor_failed_selftests", "nixl_backend_missing_roles", "decode_prefix_hits"} <= ids  # fmt: skip
    assert signals.get("kv.transfers") == 9 and signals.get("kv.bytes") == 1900544
    assert signals.get("dmabuf.ok_by_role") == {"decode": REGISTRATIONS, "prefill": REGISTRATIONS}
    assert signals.get("doctor.backends") == {"decode": "nixl_cu13", "prefill": "nixl_cu13"}
    assert signals.get("logs.host_vram") == 2 * HOST_VRAM_REGIONS
    assert signals.get("logs.host_vram_by_role") == {
        "decode": HOST_VRAM_REGIONS,
        "prefill": HOST_VRAM_REGIONS,
    }
    assert signals.get("dmabuf.short_of_host_vram_workers") == []
    assert [(round(t), mb, n) for t, mb, n in signals.kv_points] == [(0, 0.312, 5)]


def test_the_atom_engine_expects_nixl_rocm_rc_and_no_tcp(atom_run: Path) -> None:
    assert ATOM is not None and ATOM.nixl_backend == "nixl_rocm" and ATOM.forbidden_kv_transports == ("tcp",)
    failed = _failed(atom_run)  # the engine's own expectations, looked up by run.json's engine_profile
    no_table = "no data: no UCX_PROTO_INFO table of a put/get between processes in logs/ (UCX_PROTO_INFO=y for the workers)"
    assert failed == {
        "nixl_backend_missing_roles": "doctor.roles_without_backend is 2, expected == 0",
        "kv_transport_rows": no_table,
        "kv_forbidden_transport_rows": no_table,
        "kv_rows_not_zero_copy": no_table,
    }


def test_a_silent_tcp_fallback_fails_a_pd_atom_run(atom_run: Path) -> None:
    _append(atom_run / "logs" / "decode.worker.log", UCX_TCP.read_text().splitlines())
    signals = collect_signals(atom_run)
    assert signals.get("kv.transport_rows") == {"tcp/ad2708h": 4}
    failed = _failed(atom_run, replace(ATOM, nixl_backend="nixl_cu13"))
    assert failed == {
        "kv_transport_rows": "kv.expected_transport_rows is 0, expected >= 1",
        "kv_forbidden_transport_rows": "kv.forbidden_transport_rows is 4, expected == 0",
    }
    cpu = GateExpectations(nixl_transfers=True, kv_transport="tcp")  # the CPU rehearsal's path is TCP
    assert _failed(atom_run, cpu) == {}
    assert _failed(atom_run, replace(cpu, kv_transport="cma")) == {
        "kv_transport_rows": "kv.expected_transport_rows is 0, expected >= 1"
    }


# The atom engine's expectations, but for the backend: the H200's doctor reports nixl_cu13.
AS_OBSERVED = replace(ATOM, nixl_backend="nixl_cu13") if ATOM else None
RC_GET = "inter-node remote memory read by ucp_get*(multi) into host memory from host"
RC_PUT = "inter-node remote memory write by ucp_put* from host memory to host"


def test_kv_moved_zero_copy_over_rdma_passes_an_atom_pd_run(atom_run: Path) -> None:
    _append(atom_run / "logs" / "decode.worker.log", UCX_RC["zero-copy"].read_text().splitlines())
    signals = collect_signals(atom_run)
    assert signals.get("kv.transport_rows") == {"rc_verbs/ionic_0:1": 5, "rc_verbs/ionic_1:1": 1}
    results = evaluate(signals, AS_OBSERVED)
    # This run recorded no KV-event publishers (its router mode gave the workers none): that gate does not apply.
    # Its fixed prompt's answer equals the aggregated run's (the KV-correctness gates, which atom requires).
    assert {r.id: r.verdict for r in results if r.verdict != "pass"} == {"repeat_router_overlap_max": "n/a"}
    assert overall(results) == "pass"
    # The copy rows lie below any KV block; an active-message table carries no KV.
    assert signals.get("kv.rows_not_zero_copy") == []


def test_kv_copied_over_rdma_fails_naming_the_rows(atom_run: Path) -> None:
    _append(atom_run / "logs" / "decode.worker.log", UCX_RC["copy"].read_text().splitlines())
    rows = [
        f"{RC_GET}: 0..16K | copy-out | rc_verbs/ionic_0:1",
        f"{RC_PUT}: 61..5736 | copy-in | rc_verbs/ionic_0:1",
    ]
    assert _failed(atom_run, AS_OBSERVED) == {
        "kv_rows_not_zero_copy": f"kv.rows_not_zero_copy is {rows!r}, expected == []"
    }
    gate = next(r for r in _results(atom_run, AS_OBSERVED) if r.id == "kv_rows_not_zero_copy")
    assert gate.excerpt == "kv.rows_not_zero_copy"
    signals = collect_signals(atom_run)
    evaluate(signals, AS_OBSERVED)
    lines = (atom_run / "logs" / "decode.worker.log").read_text().splitlines()
    numbers = [
        next(n for n, line in enumerate(lines, 1) if cell in line) for cell in ("0..16K ", "61..5736 ")
    ]
    assert signals.excerpts["kv.rows_not_zero_copy"] == [
        f"decode.worker.log:{n}: {lines[n - 1]}" for n in numbers
    ]


def test_kv_read_by_software_emulation_over_rdma_fails_naming_the_row(atom_run: Path) -> None:
    _append(atom_run / "logs" / "decode.worker.log", UCX_RC["emulation"].read_text().splitlines())
    rows = [f"{RC_GET}: 0..inf | software emulation | rc_verbs/ionic_0:1"]
    assert _failed(atom_run, AS_OBSERVED) == {
        "kv_rows_not_zero_copy": f"kv.rows_not_zero_copy is {rows!r}, expected == []"
    }


def test_the_rehearsals_emulated_tcp_reads_are_seen_but_not_judged(vllm_cpu_run: Path) -> None:
    """The real CPU rehearsal reads KV over TCP by software emulation, by design: its engine does not ask for
    zero-copy. Asked, the same real tables fail, naming UCX's rows."""
    vllm_cpu = expectations_for("vllm-cpu")
    assert vllm_cpu is not None and not vllm_cpu.kv_zero_copy and not REHEARSAL.kv_zero_copy
    assert "kv_rows_not_zero_copy" not in {g.id for g in gates_for("disagg", vllm_cpu)}
    failed = _failed(vllm_cpu_run, replace(REHEARSAL, kv_zero_copy=True))
    assert set(failed) == {"kv_rows_not_zero_copy"}
    emulated = "remote memory read by ucp_get*(multi) into host memory from host: 0..inf | software emulation"
    assert f"{emulated} | tcp/eth0" in failed["kv_rows_not_zero_copy"]
    assert "ucp_put" not in failed["kv_rows_not_zero_copy"]  # its writes are zero-copy


def test_zero_copy_is_asked_of_the_engines_whose_kv_must_move_by_rdma() -> None:
    assert ATOM is not None and ATOM.kv_zero_copy and ATOM.kv_transport == "rc"
    assert "kv_rows_not_zero_copy" in {g.id for g in gates_for("disagg", ATOM)}
    assert "kv_rows_not_zero_copy" not in {g.id for g in gates_for("agg-single", ATOM)}  # no KV moves
    vllm = expectations_for("vllm")  # declares no KV transport yet: nothing to ask zero-copy of
    assert vllm is not None and vllm.kv_transport is None and not vllm.kv_zero_copy
    with pytest.raises(ValueError, match="kv_zero_copy needs kv_transport"):
        GateExpectations(kv_zero_copy=True)


def test_same_kernel_copy_is_seen_as_such(atom_run: Path) -> None:
    _append(atom_run / "logs" / "decode.worker.log", UCX_CMA.read_text().splitlines())
    assert collect_signals(atom_run).get("kv.transport_rows") == {"cma/memory": 4}
    assert _failed(atom_run, GateExpectations(kv_transport="cma", forbidden_kv_transports=("tcp",))) == {}


def test_a_same_host_copy_fails_where_the_kv_must_cross_the_network(atom_run: Path) -> None:
    _append(atom_run / "logs" / "decode.worker.log", UCX_CMA.read_text().splitlines())
    rehearsal = GateExpectations(kv_transport="tcp", forbidden_kv_transports=("cma", "sysv", "posix"))
    assert _failed(atom_run, rehearsal) == {
        "kv_transport_rows": "kv.expected_transport_rows is 0, expected >= 1",
        "kv_forbidden_transport_rows": "kv.forbidden_transport_rows is 4, expected == 0",
    }


def test_a_transport_name_covers_its_variants() -> None:
    assert carries("rc_verbs/ionic_0:1", "rc") and carries("rc_mlx5/mlx5_0:1", "rc") and carries("rc/x", "rc")
    assert carries("cuda_ipc/cuda", "cuda") and carries("tcp/eth0", "tcp")
    assert not carries("rocm_copy/memory", "rocm_ipc") and not carries("rcx/x", "rc")
    assert not carries("tcp/eth0", None)


def test_dmabuf_gates_apply_whenever_expected_even_with_no_helper_line(atom_run: Path) -> None:
    for role in ("prefill", "decode"):
        log = atom_run / "logs" / f"{role}.worker.log"
        log.write_text(
            "".join(line + "\n" for line in log.read_text().splitlines() if "dmabuf-shim" not in line)
        )
    short = [
        f"{role}: 0 dma-buf registration(s) for {HOST_VRAM_REGIONS} VRAM registration(s) classified as host"
        for role in ("decode", "prefill")
    ]
    assert _failed(atom_run, OBSERVED) == {
        "dmabuf_registrations_min_per_worker": "dmabuf.min_ok_per_worker is 0, expected >= 1",
        "dmabuf_short_of_host_vram_workers": f"dmabuf.short_of_host_vram_workers is {short!r}, expected == []",
    }
    results = {r.id: r for r in _results(atom_run, OBSERVED)}
    assert results["dmabuf_failures"].verdict == "pass"  # judged (value 0), not n/a
    unexpected = {r.id: r.verdict for r in _results(atom_run, replace(OBSERVED, dmabuf_registrations=False))}
    assert unexpected["dmabuf_failures"] == "n/a"
    assert not {"dmabuf_registrations_min_per_worker", "host_vram_registrations_min_per_worker",
                "dmabuf_short_of_host_vram_workers"} & set(unexpected)  # fmt: skip


def _worker_log(run: Path, role: str, host_vram: int, dmabuf: int) -> None:
    """``role``'s worker log with ``host_vram`` VRAM registrations classified as host and ``dmabuf`` dma-buf
    registrations of the helper, the other lines as they were."""
    log = run / "logs" / f"{role}.worker.log"
    kept = [
        line
        for line in log.read_text().splitlines()
        if "dmabuf-shim" not in line and "NIXL_COMPAT" not in line
    ]
    log.write_text("\n".join([*kept, *host_vram_lines(host_vram), *dmabuf_lines(dmabuf)]) + "\n")


def test_the_dmabuf_count_follows_what_the_worker_registered(atom_run: Path) -> None:
    """No fixed count: any model, tensor-parallel size, layout or number of NICs registers its own number of
    regions, and UCX one or more memory regions for each (a memory domain per NIC, relaxed ordering)."""
    _worker_log(atom_run, "prefill", host_vram=1, dmabuf=1)
    _worker_log(atom_run, "decode", host_vram=3, dmabuf=7)
    assert _failed(atom_run, OBSERVED) == {}


def test_one_worker_short_of_its_registrations_fails(atom_run: Path) -> None:
    _worker_log(atom_run, "prefill", host_vram=HOST_VRAM_REGIONS, dmabuf=HOST_VRAM_REGIONS - 1)
    short = [f"prefill: {HOST_VRAM_REGIONS - 1} dma-buf registration(s) for {HOST_VRAM_REGIONS} VRAM registration(s) "
             "classified as host"]  # fmt: skip
    assert _failed(atom_run, OBSERVED) == {
        "dmabuf_short_of_host_vram_workers": f"dmabuf.short_of_host_vram_workers is {short!r}, expected == []"
    }


def test_a_worker_without_vram_classified_as_host_fails_the_validated_path(atom_run: Path) -> None:
    """The helper serves VRAM that UCX classified as host: a worker that logged none did not take that path."""
    _worker_log(atom_run, "decode", host_vram=0, dmabuf=REGISTRATIONS)
    assert _failed(atom_run, OBSERVED) == {
        "host_vram_registrations_min_per_worker": "logs.host_vram_min_per_worker is 0, expected >= 1"
    }
    assert collect_signals(atom_run).get("logs.host_vram_by_role") == {
        "decode": 0,
        "prefill": HOST_VRAM_REGIONS,
    }


def test_the_rocm_path_expects_no_helper_lines() -> None:
    assert ATOM is not None and ATOM.dmabuf_registrations
    rocm = expectations_for("atom", {"ATOM_UCX_PATH": "rocm"})
    assert rocm is not None and not rocm.dmabuf_registrations
    assert {"dmabuf_registrations_min_per_worker", "host_vram_registrations_min_per_worker",
            "dmabuf_short_of_host_vram_workers"}.isdisjoint(g.id for g in gates_for("disagg", rocm))  # fmt: skip


def test_doctor_reports_are_required_and_their_selftest_must_pass(atom_run: Path) -> None:
    (atom_run / "doctor" / "prefill.json").unlink()
    report = json.loads((atom_run / "doctor" / "decode.json").read_text())
    report["selftest"]["ok"] = False
    (atom_run / "doctor" / "decode.json").write_text(json.dumps(report))
    assert _failed(atom_run, OBSERVED) == {
        "doctor_missing_roles": "doctor.missing_roles is 1, expected == 0",
        "doctor_failed_selftests": "doctor.failed_selftests is 1, expected == 0",
        "nixl_backend_missing_roles": "doctor.roles_without_backend is 2, expected == 0",
    }


def test_every_gate_reads_a_signal_the_collector_produces(atom_run: Path, mocker_run: Path) -> None:
    _append(atom_run / "logs" / "decode.worker.log", UCX_TCP.read_text().splitlines())
    produced: set[str] = set()
    for run, expectations in ((atom_run, ATOM), (mocker_run, None)):
        signals = collect_signals(run)
        evaluate(signals, expectations)
        produced |= set(signals.values)
    for gate in GATES:
        assert gate.signal in produced, gate
        if gate.when:
            assert gate.when in produced, gate
        if isinstance(gate.expect, str) and gate.expect.startswith("$"):
            assert gate.expect[1:] in produced, gate


def test_gate_table_per_kind_and_expectations() -> None:
    mocker, vllm = expectations_for("mocker"), expectations_for("vllm")
    assert "distinct_nodes" not in {g.id for g in gates_for("agg-single", mocker)}
    assert "distinct_nodes" in {g.id for g in gates_for("agg-two", vllm)}
    assert "nixl_backend_missing_roles" in {g.id for g in gates_for("disagg", ATOM)}
    assert "nixl_backend_missing_roles" not in {g.id for g in gates_for("disagg", vllm)}
    assert "nixl_backend_missing_roles" not in {g.id for g in gates_for("agg-single", ATOM)}  # no KV moves
    assert {g.signal for g in gates_for("disagg", mocker) if g.id == "pd_split_responses"} == {
        "requests.pd_split"
    }
    assert all(g.common for g in gates_for("disagg", None))


def test_unknown_engine_fails(mocker_run: Path) -> None:
    run = json.loads((mocker_run / "run.json").read_text())
    run["engine_profile"] = "trtllm"
    (mocker_run / "run.json").write_text(json.dumps(run))
    assert _failed(mocker_run)["engine_known"].startswith("no gate expectations for engine 'trtllm'")


def test_nixl_err_record_fails(atom_run: Path) -> None:
    _append(atom_run / "logs" / "decode.worker.log", real_lines(H200_BENCH_LOG, "NIXL_ERR")[:1])
    assert _failed(atom_run, OBSERVED) == {"nixl_err_records": "logs.nixl_err is 1, expected == 0"}


def test_dmabuf_registration_failure_fails_with_its_errno(atom_run: Path) -> None:
    _append(
        atom_run / "logs" / "prefill.worker.log",
        ["dmabuf-shim: reg fail backend=hsa path=dmabuf size=2359296 offset=4096 fd_closed=1 "
         "addr=0x7f3a20001000 iova=0x7f3a20001000 access=0xf errno=22"],
    )  # fmt: skip
    assert _failed(atom_run, OBSERVED) == {"dmabuf_failures": "dmabuf.fail is 1, expected == 0"}
    assert collect_signals(atom_run).get("dmabuf.fail_errnos") == {"EINVAL": 1}


def test_failed_kv_transfers_and_no_prefix_hit_fail(atom_run: Path) -> None:
    prom = atom_run / "metrics" / "decode.worker.prom"
    text = prom.read_text().replace("vllm:prefix_cache_hits_total{", "vllm:ignored{")
    prom.write_text(
        re.sub(r"^(vllm:nixl_num_failed_transfers_total\{.*\}) 0\.0$", r"\1 2.0", text, flags=re.M)
    )
    failed = _failed(atom_run, OBSERVED)
    assert failed["nixl_failed_transfers"] == "kv.failed_transfers is 2, expected == 0"
    assert failed["decode_prefix_hits"].startswith(
        "no data: no metrics/*.prom file has vllm:prefix_cache_hits"
    )


def test_zero_generated_tokens_is_a_failure_not_a_success(mocker_run: Path) -> None:
    records = [request(i, f"g{i}", completion_tokens=0, content_chars=0) for i in range(6)]
    write_jsonl(mocker_run / "requests.jsonl", records)
    failed = _failed(mocker_run)
    assert failed["completion_tokens"] == "requests.completion_tokens is 0, expected > 0"
    assert failed["empty_responses"] == "requests.empty is 6, expected == 0"


def test_lost_request_records_fail_against_run_json_and_timeline(mocker_run: Path) -> None:
    lines = (mocker_run / "requests.jsonl").read_text().splitlines(keepends=True)
    (mocker_run / "requests.jsonl").write_text("".join(lines[:3]))  # half the records lost
    failed = _failed(mocker_run)
    assert failed["requests_recorded"] == "requests.total is 3, expected == run.requests_total (6)"
    assert (
        failed["requests_recorded_vs_timeline"]
        == "requests.total is 3, expected == timeline.requests_total (6)"
    )
    assert failed["requests_ok_recorded"] == "requests.ok is 3, expected == run.requests_ok (6)"
    assert "requests_sent" not in failed  # 3 >= 1: alone it would have passed


def test_a_job_missing_from_run_json_fails_against_the_timeline(mocker_run: Path) -> None:
    run = json.loads((mocker_run / "run.json").read_text())
    run["jobs"] = run["jobs"][1:]  # the prefill job's record lost; the timeline saw it submitted
    (mocker_run / "run.json").write_text(json.dumps(run))
    failed = _failed(mocker_run)
    assert failed["jobs_recorded_vs_timeline"] == "jobs.count is 1, expected == timeline.submitted_roles (2)"


def test_run_json_without_its_counts_fails_the_cross_checks(mocker_run: Path) -> None:
    run = json.loads((mocker_run / "run.json").read_text())
    del run["requests_total"]
    (mocker_run / "run.json").write_text(json.dumps(run))
    assert _failed(mocker_run) == {"requests_recorded": "no data: run.json records no requests_total"}


def test_same_worker_for_prefill_and_decode_and_same_node_fail(mocker_run: Path) -> None:
    write_jsonl(
        mocker_run / "requests.jsonl", [request(i, "same", decode_worker_id=7587888281234) for i in range(6)]
    )
    run = json.loads((mocker_run / "run.json").read_text())
    for job in run["jobs"]:
        job["node_ran"] = job["node_requested"] = "n1"
    (mocker_run / "run.json").write_text(json.dumps(run))
    failed = _failed(mocker_run)
    assert failed["responses_not_pd_split"] == "requests.pd_not_split is 6, expected == 0"
    assert failed["pd_split_responses"] == "requests.pd_split is 0, expected >= 1"
    assert failed["distinct_nodes"] == "placement.distinct_nodes is 1, expected >= 2"
    assert failed["repeat_kv_hit_rate_max"] == "no data: repeated prompts carry no kv_hit_rate"


def test_failed_request_and_failed_job_fail(mocker_run: Path) -> None:
    _append(
        mocker_run / "requests.jsonl",
        [json.dumps(request(6, "x", status=503, ok=False, error="Model not ready"))],
    )
    run = json.loads((mocker_run / "run.json").read_text())
    run["jobs"][0].update(state="FAILED", exit_code="1:0")
    (mocker_run / "run.json").write_text(json.dumps(run))
    failed = _failed(mocker_run)
    assert failed["requests_failed"] == "requests.failed is 1, expected == 0"
    assert failed["jobs_clean"] == "jobs.clean is False, expected == True"
    assert failed["requests_recorded"] == "requests.total is 7, expected == run.requests_total (6)"


def test_missing_metrics_fail_the_gates_they_feed(mocker_run: Path, atom_run: Path) -> None:
    shutil.rmtree(mocker_run / "metrics")
    assert _failed(mocker_run) == {"frontend_successes": "no data: no metrics/*.prom file"}
    (atom_run / "metrics" / "decode.worker.prom").unlink()
    failed = _failed(atom_run, OBSERVED)
    assert set(failed) == {"nixl_transfers", "nixl_bytes", "nixl_failed_transfers", "decode_external_prefix_hits",
                           "decode_prefix_hits"}  # fmt: skip
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
    failed = _failed(mocker_run)
    assert failed["timeline_complete"] == "timeline.complete is False, expected == True"
    assert failed["frontend_successes"].startswith(
        "no data: no metrics/*.prom file has dynamo_frontend_requests"
    )
    assert failed["requests_recorded"] == "requests.total is 5, expected == run.requests_total (6)"


def test_aborted_run_fails_naming_the_missing_data(tmp_path: Path) -> None:
    run = tmp_path / "20261130T010203Z-disagg-atom"
    run.mkdir()
    write_jsonl(run / "timeline.jsonl", [{"t": 1.0, "event": "submitted", "role": "prefill"}])
    results = evaluate(collect_signals(run))
    assert overall(results) == "fail"
    reasons = {r.id: r.reason for r in results}
    assert reasons["launcher_result"] == "no data: run.json is missing (aborted run?)"
    assert reasons["requests_sent"] == "no data: requests.jsonl is missing"
    assert reasons["nixl_err_records"] == "no data: no logs/ files (aborted run?)"
    assert reasons["nixl_transfers"] == "no data: no metrics/*.prom file"
    assert reasons["doctor_missing_roles"] == "doctor.missing_roles is 2, expected == 0"
    assert (
        reasons["doctor_failed_selftests"] == "no data: no worker kept a doctor report (doctor/<role>.json)"
    )
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
        "placement_verified": "placement.ok is False, expected == True",
    }


def test_aggregated_atom_run_needs_a_prefix_hit_and_no_kv_path(atom_run: Path) -> None:
    run = json.loads((atom_run / "run.json").read_text())
    run.update(kind="agg-single", jobs=run["jobs"][:1])
    run["jobs"][0]["role"] = "agg"
    (atom_run / "run.json").write_text(json.dumps(run))
    (atom_run / "metrics" / "decode.worker.prom").unlink()
    results = {r.id: r for r in _results(atom_run)}
    assert "distinct_nodes" not in results and "nixl_transfers" not in results
    assert "dmabuf_registrations_min_per_worker" not in results  # the base image has no helper: not expected
    assert results["prefix_cache_hits"].verdict == "pass"  # the worker's own cache: 2560 hits
    prom = atom_run / "metrics" / "prefill.worker.prom"
    prom.write_text(
        re.sub(r"^(vllm:prefix_cache_hits_total\{.*\}) \S+$", r"\1 0.0", prom.read_text(), flags=re.M)
    )
    results = {r.id: r for r in _results(atom_run)}
    assert results["prefix_cache_hits"].reason == "prefix.hits is 0, expected > 0"


def test_xpyd_role_names_are_read_by_mode(vllm_cpu_run: Path) -> None:
    """An xPyD run numbers its workers (decode1, decode2): the KV and prefix counters are the decode roles',
    summed. The real 1P1D data with its decode role renamed decode1 judges exactly as before."""
    for path in sorted(vllm_cpu_run.rglob("decode.*")):
        path.rename(path.with_name("decode1" + path.name[len("decode") :]))
    for name in ("run.json", "timeline.jsonl"):
        path = vllm_cpu_run / name
        text = path.read_text(encoding="utf-8").replace('"role": "decode"', '"role": "decode1"')
        path.write_text(text.replace('"decode": {', '"decode1": {'), encoding="utf-8")
    signals = collect_signals(vllm_cpu_run)
    assert signals.get("kv.transfers") == 9 and signals.get("kv.bytes") == 1900544
    assert signals.get("prefix.decode_external_hits") == 2955
    assert signals.get("run.worker_roles") == ["decode1", "prefill"]
    results = evaluate(signals, REHEARSAL)
    assert {r.id: r.verdict for r in results if r.verdict != "pass"} == {"dmabuf_failures": "n/a"}


def test_router_overlap_is_judged_where_the_run_recorded_kv_event_publishers(vllm_cpu_run: Path) -> None:
    """The fixture's real P/D run predates the KV events (issue 23, item 9): every kv_hit_rate is 0. Where a run
    records publishers, that is a failure; a run that recorded none is not judged by it."""
    expects = replace(REHEARSAL, router_overlap=True)
    assert {r.id: r.verdict for r in _results(vllm_cpu_run, expects)}["repeat_router_overlap_max"] == "n/a"
    run_json = json.loads((vllm_cpu_run / "run.json").read_text())
    (vllm_cpu_run / "run.json").write_text(json.dumps({**run_json, "kv_event_roles": ["prefill"]}))
    assert _failed(vllm_cpu_run, expects)["repeat_router_overlap_max"] == (
        "requests.repeat_hit_max is 0.0, expected > 0"
    )
    assert "repeat_router_overlap_max" not in {r.id for r in _results(vllm_cpu_run, REHEARSAL)}
