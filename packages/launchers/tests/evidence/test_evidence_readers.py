"""The signals' readers and the engines' metric names: every gate reads a signal some reader sets, each reader sets
only what it declares, and the metrics are read by the names the run's engine declares (issue 35, item 3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from evidence_helpers import MOCKER_RUN, REPO, VLLM_CPU_RUN

from atomdyn_launchers import engines
from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.kinds import KINDS
from atomdyn_launchers.contract.metrics import QUANTITIES, MetricNames
from atomdyn_launchers.engines import ENGINE_NAMES, get_engine
from atomdyn_launchers.engines.mocker import MockerEngine
from atomdyn_launchers.evidence import expectations as evidence_expectations
from atomdyn_launchers.evidence.data import reduce_run
from atomdyn_launchers.evidence.gates import DERIVED, GATES, evaluate, gates_for
from atomdyn_launchers.evidence.readers import READERS
from atomdyn_launchers.evidence.readers.base import Signals
from atomdyn_launchers.evidence.readers.metrics import SIGNAL_QUANTITIES
from atomdyn_launchers.evidence.signals import collect_signals

SOURCE = Path(__file__).resolve().parents[2] / "src" / "atomdyn_launchers"
PRODUCED = frozenset().union(*(reader.sets for reader in READERS))


def _referenced(gate: Any) -> set[str]:
    """The signals a gate reads: its own, its ``when``, a ``$signal`` it is compared with."""
    names = {gate.signal}
    if gate.when is not None:
        names.add(gate.when)
    if isinstance(gate.expect, str) and gate.expect.startswith("$"):
        names.add(gate.expect[1:])
    return names


def test_every_gate_reads_a_signal_some_reader_or_the_derivation_sets() -> None:
    unproduced = {
        gate.id: sorted(name for name in _referenced(gate) if name not in PRODUCED | DERIVED)
        for gate in GATES
    }
    assert {gate: names for gate, names in unproduced.items() if names} == {}


def test_readers_declare_disjoint_signals_and_run_in_a_fixed_order() -> None:
    seen: dict[str, str] = {}
    for reader in READERS:
        for name in reader.sets:
            assert name not in seen, f"{name} is declared by {seen[name]} and {reader.name}"
            seen[name] = reader.name
    assert not (PRODUCED & DERIVED) - {"kv.answer_differing_tokens"}  # derive() judges it again by the rule
    assert READERS[0].name == "run.json"  # the others read its kind, engine and jobs


def _touched_by_each_reader(run_dir: Path) -> dict[str, set[str]]:
    signals = Signals(run_dir, run_dir.name)
    touched: dict[str, set[str]] = {}
    for reader in READERS:
        before = dict(signals.values)
        reader.read(signals)
        touched[reader.name] = {k for k, v in signals.values.items() if k not in before or before[k] != v}
    return touched


def _committed_data() -> list[Path]:
    return sorted(p.parent for p in (REPO / "evidence").glob("*/data/run.json"))


@pytest.mark.parametrize(
    "source",
    [MOCKER_RUN, VLLM_CPU_RUN, *_committed_data(), None],
    ids=lambda p: "empty" if p is None else (p.parent.name if p.name == "data" else p.name),
)
def test_each_reader_sets_only_the_signals_it_declares(source: Path | None, tmp_path: Path) -> None:
    run_dir = tmp_path / "20261201T000000Z-disagg-vllm-cpu"
    if source is None:
        run_dir.mkdir()
    else:
        shutil.copytree(source, run_dir)
    declared = {reader.name: reader.sets for reader in READERS}
    for name, touched in _touched_by_each_reader(run_dir).items():
        assert touched <= declared[name], f"{name} sets undeclared {sorted(touched - declared[name])}"


def test_each_engine_names_the_metrics_its_gates_read() -> None:
    for engine in ENGINE_NAMES:
        expected = get_engine(engine).expectations
        for kind in KINDS:
            for gate in gates_for(kind, expected):
                for quantity in SIGNAL_QUANTITIES.get(gate.signal, ()):
                    assert expected.metrics.named(quantity), f"{engine} {kind}: {gate.id} reads {quantity}"
                assert "<no " not in gate.title_for(expected), (engine, gate.id)


def test_the_dynamo_vllm_family_shares_one_metric_vocabulary_and_the_mocker_names_none() -> None:
    family = {get_engine(e).expectations.metrics for e in ("vllm", "vllm-cpu", "atom")}
    assert len(family) == 1 and next(iter(family)).named("kv_transfers")
    assert get_engine("mocker").expectations.metrics == MetricNames()


def test_no_metric_name_of_an_engine_outside_engines() -> None:
    literal = "vllm" + ":"
    found = [
        f"{path.relative_to(SOURCE)}:{number}"
        for path in sorted(SOURCE.rglob("*.py"))
        if path.relative_to(SOURCE).parts[0] != "engines"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal in line
    ]
    assert found == []


def test_metric_names_are_names() -> None:
    assert MetricNames(kv_failed_transfers="x_failed").samples("kv_failed_transfers") == (
        "x_failed_total",
        "x_failed",
    )
    assert MetricNames(kv_failed_transfers="x_total").samples("kv_failed_transfers") == ("x_total",)
    for bad in ("", " x", 3):
        with pytest.raises(ValueError):
            MetricNames(kv_bytes=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MetricNames().named("kv_tokens")
    assert set(QUANTITIES) >= {q for qs in SIGNAL_QUANTITIES.values() for q in qs}


# --- a new engine declares its own metric names; nothing in evidence/ changes (the SGLang engine next) ---

SGL = MetricNames(
    kv_transfers="sglang:kv_transfer_total",
    kv_seconds="sglang:kv_transfer_seconds_sum",
    kv_bytes="sglang:kv_transfer_bytes_total",
    kv_failed_transfers="sglang:kv_transfer_failed",
    prefix_queries="sglang:cache_queries_total",
    prefix_hits="sglang:cache_hits_total",
    external_prefix_queries="sglang:remote_cache_queries_total",
    external_prefix_hits="sglang:remote_cache_hits_total",
)


class _SglEngine(MockerEngine):
    name = "sgl-test"
    expectations = GateExpectations(
        pd_worker_split=True,
        router_prefix_hits=True,
        nixl_transfers=True,
        external_prefix_hits=True,
        metrics=SGL,
    )


@pytest.fixture
def sgl_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = {**engines._ENGINES, "sgl-test": _SglEngine()}
    monkeypatch.setattr(engines, "_ENGINES", registry)
    monkeypatch.setattr(evidence_expectations, "ENGINE_NAMES", tuple(registry))


def _as_sgl_run(mocker_run: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / mocker_run.name.replace("mocker", "sgl-test")
    shutil.copytree(mocker_run, run_dir)
    run = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(
        json.dumps({**run, "run_id": run_dir.name, "engine_profile": "sgl-test"})
    )
    (run_dir / "metrics" / "decode.decode.prom").write_text(
        'sglang:kv_transfer_total{worker="d"} 6.0\n'
        'sglang:kv_transfer_seconds_sum{worker="d"} 0.25\n'
        'sglang:kv_transfer_bytes_total{worker="d"} 393216.0\n'
        'sglang:kv_transfer_failed_total{worker="d"} 0.0\n'
        'sglang:remote_cache_hits_total{worker="d"} 96.0\n'
        'vllm:nixl_xfer_time_seconds_count{worker="d"} 99.0\n'  # another engine's name: not this run's
    )
    (run_dir / "metrics" / "prefill.prefill.prom").write_text('sglang:kv_transfer_total{worker="p"} 6.0\n')
    return run_dir


@pytest.mark.usefixtures("sgl_registered")
def test_a_new_engine_is_read_through_the_metric_names_it_declares(mocker_run: Path, tmp_path: Path) -> None:
    run_dir = _as_sgl_run(mocker_run, tmp_path)
    signals = collect_signals(run_dir)
    assert (signals.get("kv.transfers"), signals.get("kv.bytes"), signals.get("kv.failed_transfers")) == (
        6,
        393216,
        0,
    )
    assert signals.get("prefix.decode_external_hits") == 96  # decode's only; prefill's transfers not counted
    results = {r.id: r for r in evaluate(signals)}
    assert results["nixl_transfers"].verdict == "pass"
    assert results["nixl_transfers"].title == "KV transfers through NIXL (decode's sglang:kv_transfer_total)"
    assert results["decode_external_prefix_hits"].verdict == "pass"
    # The collected data keeps the new engine's samples: its gates are judged again from data/.
    out = tmp_path / "data"
    reduce_run(run_dir, out, lambda text: text)
    kept = (out / "metrics" / "decode.decode.prom").read_text()
    assert "sglang:kv_transfer_total" in kept and "sglang:remote_cache_hits_total" in kept


def test_a_metric_the_engine_does_not_name_is_absent_saying_so(vllm_cpu_run: Path) -> None:
    run = json.loads((vllm_cpu_run / "run.json").read_text())
    (vllm_cpu_run / "run.json").write_text(json.dumps({**run, "engine_profile": "mocker"}))
    signals = collect_signals(vllm_cpu_run)  # vLLM's metrics in the scrapes, but the mocker names none
    assert signals.get("kv.transfers") is None and signals.get("prefix.decode_hits") is None
    assert (
        signals.missing["kv.transfers"]
        == "engine 'mocker' names no metric for kv_transfers (its MetricNames)"
    )
    assert signals.get("frontend.requests_total") is not None  # Dynamo's frontend, whatever the engine
