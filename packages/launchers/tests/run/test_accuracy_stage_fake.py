"""The accuracy stage inside a run over the fake Slurm (tests/fakeslurm.py), its fake frontend and a real etcd on
loopback: after the first verified response, a P/D run without aggregated answers fails naming them; with the
answers an aggregated run records, it passes, leaving accuracy/ and its timeline event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakeslurm import FakeCluster, FrontendBehaviour, fake_frontend, fake_run, loopback_etcd

from atomdyn_launchers.config.recipes import parse_recipe
from atomdyn_launchers.contract.accuracy import (
    ACCURACY_DIR,
    AGGREGATED_FILE,
    ITEMS_FILE,
    SUMMARY_FILE,
    parse_items,
)
from atomdyn_launchers.contract.answers import reference_path
from atomdyn_launchers.run import accuracy as check
from atomdyn_launchers.run.context import LaunchFailure
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.accuracy import accuracy
from atomdyn_launchers.run.stages.etcd import watch_etcd
from atomdyn_launchers.run.stages.smoke import first_good
from atomdyn_launchers.run.stages.stop import stop
from atomdyn_launchers.run.stages.submit import submit
from atomdyn_launchers.run.stages.watch import watch
from atomdyn_launchers.slurm import client as slurm_client


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_client, "POLL_SCHEDULE", ((0.0, 0.1),))


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "etcd").mkdir()
    with loopback_etcd(tmp_path / "etcd") as url:
        yield url


def test_the_stage_asks_every_item_and_compares_pd_with_the_aggregated_answers(
    etcd: str, tmp_path: Path
) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(
        "".join(json.dumps({"question": f"q{n}?", "answer": f"w\n#### {n}"}) + "\n" for n in range(6))
    )
    recipe = parse_recipe(
        "schema_version: 1\nname: acc\nengine: mocker\nkind: disagg\n"
        "layout: {prefill: {workers: 1}, decode: {workers: 1}}\n"
        f"accuracy: {{task: gsm8k, items: 4, few_shot: 1, threshold: 0.0, max_pd_difference: 0.0, data: '{data}'}}\n"
    )
    cluster = FakeCluster()
    behaviour = FrontendBehaviour()
    with fake_frontend(behaviour) as port:
        options = LaunchOptions(kind="disagg", requests=2, concurrency=1, recipe=recipe)
        run = fake_run(cluster, etcd, tmp_path / "shared" / "runs", port, options)
        try:
            watch_etcd(run.ctx, run.monitor)
            submit(run.ctx, run.monitor)
            watch(run.ctx, run.monitor)
            first_good(run.ctx, run.monitor)
            asked = behaviour.completions
            with pytest.raises(LaunchFailure, match="no aggregated answers for accuracy-"):
                accuracy(run.ctx, run.monitor)
            assert behaviour.completions == asked + 4
            out = run.path / ACCURACY_DIR
            summary = json.loads((out / SUMMARY_FILE).read_text())
            assert (summary["items"], summary["unanswered"], summary["data"]["pinned"]) == (4, 0, False)
            items = parse_items((out / ITEMS_FILE).read_text())
            assert [i.response for i in items] == ["ogu cougu tuli"] * 4  # the fake's answer: no number in it
            # what an aggregated run of the same recipe, engine, model and build records
            reference = reference_path(run.ctx.config.shared_dir, summary["reference_key"])
            check.record_reference(
                reference, check.reference_document("agg", summary["reference_key"], summary, items)
            )
            accuracy(run.ctx, run.monitor)
            assert (out / AGGREGATED_FILE).is_file()
            assert [d for e, _, d in run.events("accuracy_done")] == [
                "0.0000 (flexible-extract) over 4 items, 0 unanswered"
            ] * 2
        finally:
            stop(run.ctx, run.monitor)
            run.ctx.etcd.watcher.stop()
            run.ctx.etcd.presence.stop()
            cluster.close()
