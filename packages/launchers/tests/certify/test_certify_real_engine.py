"""The real engine's climb of the whole ladder on the local cluster, with the real model (SmolLM2-135M-Instruct)
and its P/D recipe: the NIXL rung in vLLM's CPU venv, then real vLLM workers aggregated on one and two nodes, P/D
with every evidence gate (the fixed prompt's P/D answer against rung 5's, token for token, and every run's
answers against the transformers reference), the accuracy rung (the recipe's capitals items answered aggregated,
then P/D, each score at least the recipe's floor and the answers item by item alike), and a report that
evidence.verify recomputes. The climb runs once per session (tests/realclimb.py,
the ``real_climb`` fixture); the other real-engine tests assert on its runs. Part of the real-engine tests
(`nox -s real_engine`, and so of `nox -s tests`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from realclimb import ACCURACY, CLIMB_ITEMS, RealClimb

from atomdyn_launchers.certify.report import publish
from atomdyn_launchers.contract.accuracy import ACCURACY_DIR, SUMMARY_FILE
from atomdyn_launchers.engines.vllm_cpu import LABEL
from atomdyn_launchers.evidence import cli as evidence_cli
from atomdyn_launchers.evidence.gates import evaluate
from atomdyn_launchers.evidence.signals import collect_signals

pytestmark = [pytest.mark.integration, pytest.mark.real_engine]
SERVING = ("agg-single", "agg-two", "disagg", "accuracy")


def test_the_real_engines_climb_is_certified(real_climb: RealClimb, tmp_path: Path) -> None:
    cert = real_climb.cert
    assert cert.certified, cert.to_json()
    assert cert.model == "smollm2-135m-instruct"
    rows = {r["name"]: r for r in cert.rungs}
    assert all(rows[n]["verdict"] == "pass" for n in ("preflight", "nixl", *SERVING)), rows
    assert all(rows[n]["platform"] == LABEL for n in ("nixl", *SERVING))
    assert rows["benchmark"]["verdict"] == "not needed"  # the recipe asks for no sweep
    assert cert.verdict_line().startswith(f"certified on {LABEL}")
    assert evidence_cli.verify([publish(cert, tmp_path / "evidence")]) == 0


def test_the_accuracy_rung_judges_rung_5s_and_rung_7s_answers_item_by_item(real_climb: RealClimb) -> None:
    """Rung 8 ran for real (not "not needed"): rung 5's aggregated run asked the recipe's capitals items and
    recorded its answers as the reference, rung 7's P/D run answered the same items against them, and rung 8 found
    every accuracy gate passing on both: each score at least the recipe's floor (an absolute one, measured for
    these items on the local cluster), each item's extracted answer equal; it started no deployment of its own."""
    row = real_climb.row("accuracy")
    assert row["verdict"] == "pass" and row["detail"].startswith("capitals aggregated"), row
    aggregated, pd = real_climb.run_dirs("accuracy")
    assert [aggregated] == real_climb.run_dirs("agg-single") and [pd] == real_climb.run_dirs("disagg")
    summaries = [json.loads((d / ACCURACY_DIR / SUMMARY_FILE).read_text()) for d in (aggregated, pd)]
    assert [s["kind"] for s in summaries] == ["agg-single", "disagg"]
    assert all(s["items"] == CLIMB_ITEMS and s["unanswered"] == 0 and s["data"]["pinned"] for s in summaries)
    assert summaries[0]["reference_key"] == summaries[1]["reference_key"]
    # The floor is what is gated: the recipe's threshold, above 0, on the capitals task's gated filter.
    assert ACCURACY is not None and ACCURACY.threshold > 0
    assert all((s["task"], s["gated_filter"], s["threshold"]) == ("capitals", "first-line", ACCURACY.threshold)
               for s in summaries)  # fmt: skip
    for run_dir in (aggregated, pd):
        gates = {r.id: r for r in evaluate(collect_signals(run_dir))}
        floor = gates["accuracy_threshold"]
        assert floor.verdict == "pass" and isinstance(floor.value, float), (run_dir, floor)
        assert floor.value >= ACCURACY.threshold, (run_dir, floor)
        assert gates["accuracy_unanswered"].verdict == "pass", (run_dir, gates["accuracy_unanswered"])
    for gate in ("accuracy_pd_difference", "accuracy_pd_differing_items"):
        assert gates[gate].verdict == "pass", (gate, gates[gate])
    assert gates["accuracy_pd_differing_items"].value == 0
    assert summaries[0]["scores"] == summaries[1]["scores"]
    # Rung 7's own verdict left the check to rung 8 (a KV failure is named by the KV gates first): it counted
    # fewer gates than rung 8 did on the same run.
    judged = int(real_climb.row("disagg")["detail"].split()[0])
    assert row["detail"].endswith(f"{judged + 4} evidence gates pass"), (row["detail"], judged)
    # Rung 6 ran without the check.
    (agg_two,) = real_climb.run_dirs("agg-two")
    assert not (agg_two / ACCURACY_DIR).exists(), agg_two
