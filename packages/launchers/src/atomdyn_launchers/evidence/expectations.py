"""What the engine a run names (run.json's ``engine_profile``) says about the run's evidence.

The engine object owns it: ``engine.expectations`` (a :class:`~atomdyn_launchers.contract.expectations.GateExpectations`)
decides which gates apply, which of them are required and the metric names the workers publish (``metrics``),
and ``engine.platform_label(fingerprint)`` names the platform from what a node
reported. Both are found through the engine registry; an engine it does not know has no expectations, and
the evidence judges it by the common gates and fails ``engine_known``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.metrics import MetricNames
from atomdyn_launchers.engines import ENGINE_NAMES, get_engine
from atomdyn_launchers.engines.hardware import WorkerProbe, model_claim


def _engine(name: object) -> Any | None:
    """The registered engine object called ``name``, or None."""
    if not isinstance(name, str):
        return None
    try:
        return get_engine(name)
    except (LookupError, ValueError):
        return None


def expectations_for(engine: object, config: object = None) -> GateExpectations | None:
    """The engine's expectations for a run recorded with ``config`` (run.json's), or None for an engine nobody
    knows."""
    found = _engine(engine)
    if found is None:
        return None
    recorded = {str(k): str(v) for k, v in config.items()} if isinstance(config, Mapping) else {}
    declared = found.run_expectations(recorded)
    return declared if isinstance(declared, GateExpectations) else None


def platform_label(
    engine: object,
    fingerprints: Mapping[str, Any],
    workers: object = None,
    model_profile: object = None,
    model_path: object = None,
) -> str | None:
    """The platform the jobs' fingerprints show, as the engine object labels it (from what the nodes
    reported, never from the engine's name), where each worker's log agrees (``workers``: the logs reader's
    ``workers.engine_probes``, role -> the vLLM platform and model it logged; ``model_profile`` and
    ``model_path``: run.json's); with no fingerprint, what the engine alone says (the label the launcher wrote
    into run.json: a mock or CPU engine's rehearsal, else unknown). None for an engine nobody knows."""
    found = _engine(engine)
    if found is None:
        return None
    usable = {role: fp for role, fp in fingerprints.items() if isinstance(fp, Mapping)}
    probes = (
        {str(role): WorkerProbe.from_json(raw) for role, raw in workers.items()}
        if isinstance(workers, Mapping)
        else {}
    )
    label = found.platform_of(usable, probes, model_claim(model_profile, model_path))
    return label if isinstance(label, str) and label else None


def metric_names(engine: object, config: object = None) -> MetricNames:
    """The metrics the engine's workers publish, as it names them (``GateExpectations.metrics``); an engine
    nobody knows names none."""
    expected = expectations_for(engine, config)
    return expected.metrics if expected is not None else MetricNames()


def declared_metrics() -> frozenset[str]:
    """Every sample name a registered engine's metrics name: what the collected data keeps of a scrape."""
    return frozenset(
        name for engine in ENGINE_NAMES for name in get_engine(engine).expectations.metrics.wanted()
    )
