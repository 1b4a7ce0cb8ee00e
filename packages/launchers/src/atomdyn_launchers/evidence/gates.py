"""The validity gates: one table of data saying, per run kind and engine, what a run must show to pass.

A gate reads one signal (evidence/signals.py) and compares it with an expected value. A signal without data
fails its gate with the reason it is missing; a gate whose ``when`` signal is false does not apply (n/a).
Zero generated tokens fails ``generated_tokens``: an empty success is not a success.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from atomdyn_launchers.evidence.signals import REAL_ENGINES, Signals
from atomdyn_launchers.rundir import AGG_KINDS, DISAGG_KINDS, KINDS, TWO_NODE_KINDS

ALL_KINDS = KINDS
TWO_NODE = TWO_NODE_KINDS
AGG = AGG_KINDS
DISAGG = DISAGG_KINDS
ANY_ENGINE = ("mocker", *REAL_ENGINES)
MOCKER = ("mocker",)

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
}


@dataclass(frozen=True)
class Gate:
    id: str
    title: str
    kinds: tuple[str, ...]
    engines: tuple[str, ...]
    signal: str
    op: str
    expect: Any  # a value, or "$name" for another signal's value
    excerpt: tuple[str, ...]  # excerpt groups whose lines show it: the first that has lines is linked
    when: str | None = None  # a boolean signal that must be true for the gate to apply


GATES: tuple[Gate, ...] = (
    Gate("launcher_result", "the launcher judged the run a pass", ALL_KINDS, ANY_ENGINE,
         "run.result", "==", "pass", ("run",)),
    Gate("jobs_clean", "every job started and ended without a failed step", ALL_KINDS, ANY_ENGINE,
         "jobs.clean", "==", True, ("jobs",)),
    Gate("provenance", "the run names its platform and the lock digest it ran from", ALL_KINDS, ANY_ENGINE,
         "run.provenance", "==", True, ("run",)),
    Gate("placement", "every role ran on the node it requested (Slurm and the launcher agree)", ALL_KINDS,
         ANY_ENGINE, "placement.ok", "==", True, ("jobs",)),
    Gate("distinct_nodes", "the roles ran on two different nodes", TWO_NODE, ANY_ENGINE,
         "placement.distinct_nodes", ">=", 2, ("jobs",)),
    Gate("timeline", "submission, first good response and end of requests recorded", ALL_KINDS, ANY_ENGINE,
         "timeline.complete", "==", True, ("timeline",)),
    Gate("requests_sent", "smoke requests were sent", ALL_KINDS, ANY_ENGINE,
         "requests.total", ">=", 1, ("requests",)),
    Gate("requests_ok", "every smoke request succeeded (HTTP 200)", ALL_KINDS, ANY_ENGINE,
         "requests.failed", "==", 0, ("requests.failed", "requests")),
    Gate("non_empty_output", "every successful response carried content and tokens", ALL_KINDS, ANY_ENGINE,
         "requests.empty", "==", 0, ("requests.empty", "requests")),
    Gate("generated_tokens", "tokens were generated (zero is a failure)", ALL_KINDS, ANY_ENGINE,
         "requests.completion_tokens", ">", 0, ("requests",)),
    Gate("frontend_counted", "the frontend's own metrics count at least the successful requests", ALL_KINDS,
         ANY_ENGINE, "frontend.requests_success", ">=", "$requests.ok", ("metrics.frontend",)),
    Gate("pd_split", "every response was prefilled and decoded by different workers", DISAGG, ANY_ENGINE,
         "requests.pd_not_split", "==", 0, ("requests.pd", "requests.split")),
    Gate("kv_handoff", "at least one prefill-to-decode handoff (distinct worker ids)", DISAGG, MOCKER,
         "requests.pd_split", ">=", 1, ("requests.split",)),
    Gate("kv_handoff", "at least one KV transfer through NIXL", DISAGG, REAL_ENGINES,
         "kv.transfers", ">=", 1, ("metrics.kv", "logs.kv_transfer")),
    Gate("kv_failures", "zero failed NIXL KV transfers", DISAGG, REAL_ENGINES,
         "kv.failed_transfers", "==", 0, ("metrics.kv",)),
    Gate("nixl_err", "zero NIXL_ERR records in the logs", DISAGG, REAL_ENGINES,
         "logs.nixl_err", "==", 0, ("logs.nixl_err", "logs.nixl_rocm")),
    Gate("nixl_rocm_init", "every worker initialized nixl_rocm", DISAGG, ("atom",),
         "nixl_rocm.uninitialized_roles", "==", 0, ("logs.nixl_rocm",)),
    Gate("dmabuf_registered", "the dma-buf helper registered memory", ALL_KINDS, REAL_ENGINES,
         "dmabuf.ok", ">=", 1, ("logs.dmabuf_ok",), when="dmabuf.active"),
    Gate("dmabuf_failures", "zero dma-buf registration failures", ALL_KINDS, REAL_ENGINES,
         "dmabuf.fail", "==", 0, ("logs.dmabuf_fail", "logs.dmabuf_ok"), when="dmabuf.active"),
    Gate("prefix_hit", "a repeated prompt hit the KV cache (router kv_hit_rate > 0)", AGG, MOCKER,
         "requests.repeat_hit_max", ">", 0, ("requests.repeats",)),
    Gate("prefix_hit", "a repeated prompt hit the prefix cache", AGG, REAL_ENGINES,
         "prefix.hits", ">", 0, ("metrics.prefix",)),
    Gate("prefix_hit_decode", "a repeated prompt hit the KV cache (router kv_hit_rate > 0)", DISAGG, MOCKER,
         "requests.repeat_hit_max", ">", 0, ("requests.repeats",)),
    Gate("prefix_hit_decode", "a repeated prompt hit the prefix cache on decode", DISAGG, REAL_ENGINES,
         "prefix.decode_hits", ">", 0, ("metrics.prefix",)),
)  # fmt: skip


@dataclass(frozen=True)
class GateResult:
    id: str
    title: str
    signal: str
    expect: str  # e.g. "== 0", ">= requests.ok (32)"
    value: Any
    verdict: str  # "pass" | "fail" | "n/a"
    reason: str
    excerpt: str | None  # the excerpt group linked, None when no group has lines


def gates_for(kind: str | None, engine: str | None) -> list[Gate]:
    """The gates of a run kind and engine profile; an unknown kind or engine keeps only the common gates."""
    return [
        g
        for g in GATES
        if (kind in g.kinds if kind in KINDS else g.kinds == ALL_KINDS)
        and (engine in g.engines if engine in ANY_ENGINE else g.engines == ANY_ENGINE)
    ]


def _judge(gate: Gate, signals: Signals) -> GateResult:
    result = _compare(gate, signals)
    group = next((g for g in gate.excerpt if signals.excerpts.get(g)), None)
    return GateResult(result.id, result.title, result.signal, result.expect, result.value, result.verdict,
                      result.reason, group)  # fmt: skip


def _compare(gate: Gate, signals: Signals) -> GateResult:
    value = signals.get(gate.signal)
    expect, shown = gate.expect, f"{gate.op} {gate.expect}"
    if isinstance(expect, str) and expect.startswith("$"):
        expect = signals.get(expect[1:])
        shown = f"{gate.op} {gate.expect[1:]} ({expect})"
        if expect is None:
            why = signals.missing.get(gate.expect[1:], "no value")
            return GateResult(gate.id, gate.title, gate.signal, shown, value, "fail", f"no data: {why}", None)
    if gate.when is not None and not signals.get(gate.when):
        return GateResult(
            gate.id, gate.title, gate.signal, shown, value, "n/a", f"{gate.when} is false", None
        )
    if value is None:
        why = signals.missing.get(gate.signal, f"{gate.signal} was not collected")
        return GateResult(gate.id, gate.title, gate.signal, shown, None, "fail", f"no data: {why}", None)
    try:
        passed = _OPS[gate.op](value, expect)
    except TypeError:
        passed = False
    reason = "" if passed else f"{gate.signal} is {value!r}, expected {shown}"
    return GateResult(
        gate.id, gate.title, gate.signal, shown, value, "pass" if passed else "fail", reason, None
    )


def evaluate(signals: Signals) -> list[GateResult]:
    """Judge every gate of the run's kind and engine."""
    kind, engine = signals.get("run.kind"), signals.get("run.engine")
    results = [_judge(g, signals) for g in gates_for(kind, engine)]
    if kind not in KINDS:
        why = signals.missing.get("run.kind") or f"run kind {kind!r} is not one of {', '.join(KINDS)}"
        results.insert(
            0,
            GateResult(
                "run_kind", "the run kind is known", "run.kind", f"in {KINDS}", kind, "fail", why, "run"
            ),
        )
    return results


def overall(results: list[GateResult]) -> str:
    """``pass`` only when at least one gate ran and none failed."""
    judged = [r for r in results if r.verdict != "n/a"]
    return "pass" if judged and all(r.verdict == "pass" for r in judged) else "fail"
