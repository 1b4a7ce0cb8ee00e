"""The capitals task through the accuracy check, against a fake OpenAI-compatible frontend that answers each
question with what the real model answered it on the local cluster (tests/contract/capitals_cases.json): what is
sent (the plain question, greedy, the task's stop sequences and token budget), what is scored, and a P/D run whose
answers equal the aggregated ones passing a zero difference however its score rounds."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.config.recipes import parse_recipe
from atomdyn_launchers.contract.accuracy import ACCURACY_DIR, ITEMS_FILE, parse_items
from atomdyn_launchers.contract.accuracy_capitals import STOP
from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.evidence.gates import evaluate
from atomdyn_launchers.evidence.signals import Signals
from atomdyn_launchers.profiles.datasets import load_capitals
from atomdyn_launchers.run import accuracy as check

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent.parent / "contract" / "capitals_cases.json").read_text()
)["cases"]
QUESTION = re.compile(r"^What is the capital of (.+)\?$")
RECIPE = (
    "schema_version: 1\nname: r\nengine: vllm-cpu\nkind: agg\nlayout: {agg: {workers: 1}}\n"
    "accuracy: {task: capitals, items: 9, threshold: 0.3, max_pd_difference: 0.0, max_differing_items: 0, "
    "concurrency: 2, data: DATA}\n"
)
ServeChat = Callable[[Callable[[dict[str, Any]], "str | None"]], str]  # conftest.py's serve_chat


class Frontend:
    """Answers each country's question with what the real model answered it (CASES)."""

    def __init__(self, serve_chat: ServeChat) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.answers: dict[str, str] = {c["country"]: c["response"] for c in CASES}
        self.url = serve_chat(self.reply)

    def reply(self, body: dict[str, Any]) -> str:
        self.bodies.append(body)
        country = QUESTION.match(body["messages"][0]["content"]).group(1)  # type: ignore[union-attr]
        return self.answers[country]


@pytest.fixture
def frontend(serve_chat: ServeChat) -> Frontend:
    return Frontend(serve_chat)


def _gates(run_dir: Path, kind: str) -> dict[str, Any]:
    signals = Signals(run_dir=run_dir, name=run_dir.name)
    signals.set("run.kind", kind)
    return {
        r.id: (r.verdict, r.value)
        for r in evaluate(signals, GateExpectations())
        if r.id.startswith("accuracy_")
    }


def test_capitals_asks_the_plain_question_and_scores_the_real_answers(
    frontend: Frontend, tmp_path: Path
) -> None:
    data = tmp_path / "capitals.jsonl"
    data.write_text(
        "".join(json.dumps({"country": c["country"], "capital": c["capital"]}) + "\n" for c in CASES)
    )
    recipe = parse_recipe(RECIPE.replace("DATA", str(data)))
    settings = recipe.accuracy
    assert settings is not None and (settings.few_shot, settings.max_tokens) == (0, 16)  # the task's defaults
    dataset = load_capitals(data)
    results = check.ask_all(settings, dataset, frontend.url, "m", timeout_s=10, poll=lambda: None)
    # Two requests are in flight at once, so the first to arrive may be either item's: find item 0's by its text.
    asked = [f"What is the capital of {c['country']}?" for c in CASES[:9]]
    assert sorted(b["messages"][0]["content"] for b in frontend.bodies) == sorted(asked)
    body = next(b for b in frontend.bodies if b["messages"][0]["content"] == asked[0])
    assert all(
        (b["temperature"], b["stop"], b["max_tokens"]) == (0.0, list(STOP), 16) for b in frontend.bodies
    )
    assert body["messages"] == [{"role": "user", "content": asked[0]}]
    right = [c["first-line"][1] for c in CASES[:9]]
    assert sum(right) == 3  # Afghanistan, Australia, Canada: 0.333333, above the threshold 0.3
    assert [r.correct["first-line"] for r in results] == right
    record = check.summary(settings, dataset, results, kind="agg-single", reference_key="k", seconds=1.0)
    assert (
        record["scores"] == {"first-line": round(sum(right) / 9, 6)}
        and record["gated_filter"] == "first-line"
    )
    assert record["scorer"].startswith("contract/accuracy_capitals.py")
    agg = tmp_path / "agg"
    check.write(agg, results, record)
    assert {k: v[0] for k, v in _gates(agg, "agg-single").items()} == {
        "accuracy_unanswered": "pass",
        "accuracy_threshold": "pass",
    }

    # P/D with the same answers: a score of k/9 (no exact binary fraction) equals the aggregated one.
    reference = tmp_path / "references" / "k.json"
    check.record_reference(reference, check.reference_document("agg-run", "k", record, results))
    pd = tmp_path / "pd"
    check.write(pd, results, {**record, "kind": "disagg"})
    assert check.take_reference(reference, pd)
    assert check.aggregated_score(pd, "first-line") == record["scores"]["first-line"]
    gates = _gates(pd, "disagg")
    assert gates["accuracy_pd_difference"] == ("pass", 0.0) and gates["accuracy_pd_differing_items"] == (
        "pass",
        0,
    )
    items = parse_items((pd / ACCURACY_DIR / ITEMS_FILE).read_text())
    assert items[0].extracted == {"first-line": CASES[0]["response"]}
