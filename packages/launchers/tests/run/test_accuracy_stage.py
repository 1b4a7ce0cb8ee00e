"""The accuracy check against a fake OpenAI-compatible frontend (http.server): what it sends (lm-eval's prompt with
its few-shot examples, greedy, lm-eval's stop sequences), what it records per item, the aggregated answers a P/D
run is compared with, and the evidence's accuracy gates over those files."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.config.recipes import Accuracy, parse_recipe
from atomdyn_launchers.contract.accuracy import ACCURACY_DIR, ITEMS_FILE, STOP, parse_items
from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.evidence.gates import evaluate
from atomdyn_launchers.evidence.signals import Signals
from atomdyn_launchers.profiles.datasets import load_gsm8k
from atomdyn_launchers.run import accuracy as check

ITEMS = 12
QUESTION = re.compile(r"Question: What is (\d+) plus 2\?\nAnswer:$")
ServeChat = Callable[[Callable[[dict[str, Any]], "str | None"]], str]  # conftest.py's serve_chat


class Frontend:
    """Answers "What is N plus 2?" with N + 2, except: ``wrong`` indexes get 0, ``failing`` an HTTP 500."""

    def __init__(self, serve_chat: ServeChat) -> None:
        self.wrong: set[int] = set()
        self.failing: set[int] = set()
        self.bodies: list[dict[str, Any]] = []
        self.url = serve_chat(self.reply)

    def reply(self, body: dict[str, Any]) -> str | None:
        self.bodies.append(body)
        n = int(QUESTION.search(body["messages"][0]["content"]).group(1))  # type: ignore[union-attr]
        if n in self.failing:
            return None
        answer = 0 if n in self.wrong else n + 2
        return f" {n} + 2 = {answer}.\n#### {answer}"


@pytest.fixture
def frontend(serve_chat: ServeChat) -> Frontend:
    return Frontend(serve_chat)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "own-gsm8k.jsonl"
    lines = [json.dumps({"question": f"What is {n} plus 2?", "answer": f"{n} + 2 = {n + 2}\n#### {n + 2}"})
             for n in range(ITEMS)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


SETTINGS = Accuracy(task="gsm8k", items=8, threshold=0.75, max_pd_difference=0.125, few_shot=2, concurrency=3,
                    max_differing_items=1)  # fmt: skip


def _run(frontend: Frontend, data: Path, run_dir: Path, kind: str) -> dict[str, Any]:
    dataset = load_gsm8k(data)
    results = check.ask_all(SETTINGS, dataset, frontend.url, "m", timeout_s=10, poll=lambda: None)
    record = check.summary(SETTINGS, dataset, results, kind=kind, reference_key="k", seconds=1.0)
    check.write(run_dir, results, record)
    return record


def _gates(run_dir: Path, kind: str) -> dict[str, Any]:
    signals = Signals(run_dir=run_dir, name=run_dir.name)
    signals.set("run.kind", kind)
    return {r.id: r for r in evaluate(signals, GateExpectations()) if r.id.startswith("accuracy_")}


def test_the_check_sends_lm_evals_prompt_greedy_and_scores_each_item(
    frontend: Frontend, data: Path, tmp_path: Path
) -> None:
    frontend.wrong = {3}
    record = _run(frontend, data, tmp_path / "agg", "agg-single")
    assert len(frontend.bodies) == 8
    body = frontend.bodies[0]
    assert (body["temperature"], body["stop"], body["max_tokens"]) == (0.0, list(STOP), 256)
    content = body["messages"][0]["content"]
    # the two examples are the data's last items (10 and 11), never among the scored ones (0..7)
    assert content.startswith(
        "Question: What is 10 plus 2?\nAnswer: 10 + 2 = 12\n#### 12\n\nQuestion: What is 11"
    )
    assert record["scores"] == {"strict-match": 0.875, "flexible-extract": 0.875}
    assert (record["unanswered"], record["data"]["pinned"]) == (0, False)
    items = parse_items((tmp_path / "agg" / ACCURACY_DIR / ITEMS_FILE).read_text())
    assert [i.index for i in items] == list(range(8)) and items[3].extracted["flexible-extract"] == "0"
    gates = _gates(tmp_path / "agg", "agg-single")
    assert {k: v.verdict for k, v in gates.items()} == {
        "accuracy_unanswered": "pass",
        "accuracy_threshold": "pass",
    }


def test_pd_is_compared_with_the_aggregated_answers_on_the_same_items(
    frontend: Frontend, data: Path, tmp_path: Path
) -> None:
    record = _run(frontend, data, tmp_path / "agg", "agg-single")  # every answer right: 1.0
    reference = tmp_path / "references" / "k.json"
    results = parse_items((tmp_path / "agg" / ACCURACY_DIR / ITEMS_FILE).read_text())
    document = check.reference_document("agg-run", "k", record, results)
    # the data's hash on a "sha256" line, which the evidence's second secret scan keeps (evidence/secondscan.py)
    assert f'"sha256": "{record["data"]["sha256"]}"' in document
    check.record_reference(reference, document)
    frontend.wrong, frontend.failing = {1, 2}, {5}  # P/D: two wrong, one unanswered
    pd = tmp_path / "pd"
    _run(frontend, data, pd, "disagg")
    assert check.take_reference(reference, pd)
    gates = _gates(pd, "disagg")
    assert {k: (v.verdict, v.value) for k, v in gates.items()} == {
        "accuracy_unanswered": ("fail", 1),
        "accuracy_threshold": ("fail", 0.625),
        "accuracy_pd_difference": ("fail", 0.375),
        "accuracy_pd_differing_items": ("fail", 3),
    }


def test_a_pd_run_without_aggregated_answers_fails_its_comparison_for_want_of_data(
    frontend: Frontend, data: Path, tmp_path: Path
) -> None:
    _run(frontend, data, tmp_path / "pd", "disagg")
    gates = _gates(tmp_path / "pd", "disagg")
    assert gates["accuracy_threshold"].verdict == "pass"
    assert gates["accuracy_pd_difference"].verdict == "fail"
    assert "an aggregated run of the same recipe" in gates["accuracy_pd_difference"].reason


def test_a_run_without_the_check_lists_no_accuracy_gate(tmp_path: Path) -> None:
    assert _gates(tmp_path, "disagg") == {}


def test_the_recipe_section_parses_and_too_many_items_are_refused() -> None:
    base = "schema_version: 1\nname: r\nengine: vllm-cpu\nkind: agg\nlayout: {agg: {workers: 1}}\n"
    recipe = parse_recipe(
        base + "accuracy: {task: gsm8k, items: 200, threshold: 0.8, max_pd_difference: 0.02}\n"
    )
    assert recipe.accuracy == Accuracy("gsm8k", 200, 0.8, 0.02)
    with pytest.raises(ValueError, match="more than GSM8K's 1319 test items"):
        parse_recipe(base + "accuracy: {task: gsm8k, items: 1315, threshold: 0.8, max_pd_difference: 0.02}\n")
    with pytest.raises(ValueError, match=r"accuracy\.threshold"):
        parse_recipe(base + "accuracy: {task: gsm8k, items: 2, threshold: 1.5, max_pd_difference: 0.02}\n")


def test_a_stopped_check_returns_at_once_leaving_the_questions_in_flight(data: Path) -> None:
    """A run that fails (or is interrupted) while questions wait for their answers stops asking at once: it does
    not wait out the questions in flight (each up to the request timeout) before the jobs are stopped."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:

        def failing_poll() -> None:
            raise KeyboardInterrupt  # Ctrl-C while the questions are in flight

        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            check.ask_all(SETTINGS, load_gsm8k(data), f"http://127.0.0.1:{server.getsockname()[1]}", "m",
                          timeout_s=60, poll=failing_poll)  # fmt: skip
        assert time.monotonic() - started < 10
    finally:
        server.close()
