"""The validity gates: one table of data saying what a run must show to pass.

A gate reads one signal (set by a reader in evidence/readers/, or derived here with the engine's expectations:
``DERIVED``) and compares it with an expected value. Which gates apply comes from the run's kind and from the
engine's :class:`~atomdyn_launchers.contract.expectations.GateExpectations` (what the engine object says its runs
must prove), never from the engine's name. A gate is named after the quantity it checks, so a line reads as the
check itself: ``requests_failed 0 == 0``. A signal without data fails its gate with the reason it is missing; a
gate whose ``when`` signal is false does not apply (n/a), unless the engine requires it
(``GateExpectations.required``): then it is judged, and fails "no data" where its data is missing. Counts that the
run recorded in more than one place (requests.jsonl, run.json, the timeline) must agree. A title may name the
engine's metrics (``{kv_transfers}``: a field of its ``MetricNames``), filled in for the run's engine.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from atomdyn_launchers.contract.answers import differing_tokens, logprob_max_delta
from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.kinds import AGG_KINDS, DISAGG_KINDS, KINDS, TWO_NODE_KINDS
from atomdyn_launchers.contract.metrics import QUANTITIES
from atomdyn_launchers.evidence.accuracy_signal import SIGNALS as ACCURACY_SIGNALS
from atomdyn_launchers.evidence.accuracy_signal import read_accuracy
from atomdyn_launchers.evidence.expectations import expectations_for
from atomdyn_launchers.evidence.logscan import KV_MESSAGE_MIN
from atomdyn_launchers.evidence.reference_signal import read_reference_answers
from atomdyn_launchers.evidence.signals import Signals
from atomdyn_launchers.profiles.models import ProfileError, get_model

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
}
_EXPECTATION_FIELDS = frozenset(f.name for f in fields(GateExpectations))


def _always(_: GateExpectations) -> bool:
    return True


@dataclass(frozen=True)
class Gate:
    id: str  # the quantity checked: "<id> <value> <op> <expected>" reads as the check
    title: str
    kinds: tuple[str, ...]
    signal: str
    op: str
    expect: Any  # a value, "$name" for another signal's value, "@field" for the engine's expectation
    excerpt: tuple[str, ...]  # excerpt groups whose lines show it: the first that has lines is linked
    applies: Callable[[GateExpectations], bool] = _always  # by what the engine expects
    when: str | None = None  # a boolean signal that must be true for the gate to apply
    # Left out of the results, rather than n/a, where ``when`` is false: a gate of runs that carry data no run
    # before it had (the independent reference), so that committed evidence of other runs verifies unchanged.
    unlisted_when_waived: bool = False

    @property
    def common(self) -> bool:
        """A gate every engine's runs must pass."""
        return self.applies is _always

    def title_for(self, expectations: GateExpectations | None) -> str:
        """The title with the engine's metric names filled in (``{kv_transfers}``: its ``metrics.kv_transfers``)."""
        if "{" not in self.title:
            return self.title
        names = (expectations or GateExpectations()).metrics
        return self.title.format_map({q: names.named(q) or f"<no {q} metric named>" for q in QUANTITIES})


GATES: tuple[Gate, ...] = (
    Gate("launcher_result", "the launcher judged the run a pass", KINDS,
         "run.result", "==", "pass", ("run",)),
    Gate("jobs_clean", "every job started and ended without a failed step", KINDS,
         "jobs.clean", "==", True, ("jobs",)),
    Gate("provenance", "the run names its platform and the lock digest it ran from", KINDS,
         "run.provenance", "==", True, ("run",)),
    Gate("placement_verified", "every role ran on the node it requested (Slurm and the launcher agree)", KINDS,
         "placement.ok", "==", True, ("jobs",)),
    Gate("distinct_nodes", "the roles ran on two different nodes", TWO_NODE_KINDS,
         "placement.distinct_nodes", ">=", 2, ("jobs",)),
    Gate("jobs_recorded_vs_timeline", "run.json lists a job for every role the timeline saw submitted", KINDS,
         "jobs.count", "==", "$timeline.submitted_roles", ("jobs", "timeline")),
    Gate("timeline_complete", "submission, first good response and end of requests recorded", KINDS,
         "timeline.complete", "==", True, ("timeline",)),
    Gate("requests_sent", "smoke requests were sent", KINDS,
         "requests.total", ">=", 1, ("requests",)),
    # Data that makes sense (issue 36, item 5). Listed where the data has such a fault, its count then failing
    # the gate; a run without one carries no line for them, so evidence collected before them verifies
    # unchanged (a count of 0 is what the gate would judge anyway).
    Gate("request_indexes_unique", "every request row has its own index: none recorded twice or missing",
         KINDS, "requests.bad_indexes", "==", 0, ("requests.nonsense",), when="requests.bad_indexes",
         unlisted_when_waived=True),
    Gate("request_latencies_sane", "every latency is seconds, non-negative and finite (below a week)", KINDS,
         "requests.bad_latencies", "==", 0, ("requests.nonsense",), when="requests.bad_latencies",
         unlisted_when_waived=True),
    Gate("request_tokens_plausible", "every token count is a non-negative integer below 2**24", KINDS,
         "requests.implausible_tokens", "==", 0, ("requests.nonsense",), when="requests.implausible_tokens",
         unlisted_when_waived=True),
    Gate("requests_corrupt_lines", "every complete line of requests.jsonl is a record (strict JSON)", KINDS,
         "requests.corrupt_lines", "==", 0, ("requests.nonsense",), when="requests.corrupt_lines",
         unlisted_when_waived=True),
    Gate("timeline_monotonic", "the timeline's events never go back in time", KINDS,
         "timeline.backwards", "==", 0, ("timeline.nonsense",), when="timeline.backwards",
         unlisted_when_waived=True),
    Gate("timeline_corrupt_lines", "every complete line of timeline.jsonl is an event (strict JSON)", KINDS,
         "timeline.corrupt_lines", "==", 0, ("timeline.nonsense",), when="timeline.corrupt_lines",
         unlisted_when_waived=True),
    Gate("requests_recorded", "requests.jsonl holds as many requests as run.json counts", KINDS,
         "requests.total", "==", "$run.requests_total", ("requests", "run")),
    Gate("requests_recorded_vs_timeline", "requests.jsonl holds as many requests as the timeline counts",
         KINDS, "requests.total", "==", "$timeline.requests_total", ("requests", "timeline")),
    Gate("requests_ok_recorded", "requests.jsonl holds as many good answers as run.json counts", KINDS,
         "requests.ok", "==", "$run.requests_ok", ("requests", "run")),
    Gate("requests_ok_recorded_vs_timeline", "requests.jsonl holds as many good answers as the timeline counts",
         KINDS, "requests.ok", "==", "$timeline.requests_ok", ("requests", "timeline")),
    Gate("requests_failed", "every smoke request succeeded (HTTP 200)", KINDS,
         "requests.failed", "==", 0, ("requests.failed", "requests")),
    Gate("empty_responses", "every successful response carried content and tokens", KINDS,
         "requests.empty", "==", 0, ("requests.empty", "requests")),
    Gate("completion_tokens", "tokens were generated (zero is a failure)", KINDS,
         "requests.completion_tokens", ">", 0, ("requests",)),
    Gate("frontend_successes", "the frontend's own metrics count at least the successful requests", KINDS,
         "frontend.requests_success", ">=", "$requests.ok", ("metrics.frontend",)),
    Gate("responses_not_pd_split", "every response was prefilled and decoded by different workers",
         DISAGG_KINDS, "requests.pd_not_split", "==", 0, ("requests.pd", "requests.split")),
    Gate("pd_split_responses", "prefill-to-decode handoffs (distinct worker ids)", DISAGG_KINDS,
         "requests.pd_split", ">=", 1, ("requests.split",), applies=lambda e: e.pd_worker_split),
    Gate("nixl_transfers", "KV transfers through NIXL (decode's {kv_transfers})",
         DISAGG_KINDS, "kv.transfers", ">=", 1, ("metrics.kv", "logs.kv_transfer"),
         applies=lambda e: e.nixl_transfers),
    Gate("nixl_bytes", "KV bytes moved through NIXL (decode's {kv_bytes})",
         DISAGG_KINDS, "kv.bytes", ">", 0, ("metrics.kv",), applies=lambda e: e.nixl_transfers),
    Gate("nixl_failed_transfers", "no failed NIXL KV transfer after the first verified response", DISAGG_KINDS,
         "kv.failed_transfers", "==", 0, ("metrics.kv",), applies=lambda e: e.nixl_transfers),
    Gate("kv_answer_equals_aggregated",
         "at temperature 0 the fixed prompt's P/D answer equals the aggregated run's, token for token",
         DISAGG_KINDS, "kv.answer_differing_tokens", "==", 0, ("answers",),
         applies=lambda e: e.aggregated_answer, when="run.fixed_prompt"),
    Gate("kv_answer_logprob_max_delta",
         "where the P/D and aggregated answers chose the same token, their log probabilities agree",
         DISAGG_KINDS, "kv.answer_logprob_max_delta", "<=", "@answer_logprob_tolerance", ("answers",),
         applies=lambda e: e.answer_logprob_tolerance is not None, when="run.fixed_prompt"),
    Gate("reference_differing_tokens",
         "at temperature 0 the reference prompts' answers equal transformers' greedy decode of them, token for token",
         KINDS, "reference.differing_tokens", "==", 0, ("answers",),
         when="reference.recorded", unlisted_when_waived=True),  # any engine serving a model with a reference
    Gate("accuracy_unanswered", "every accuracy question got an answer", KINDS,
         "accuracy.unanswered", "==", 0, ("accuracy",), when="accuracy.recorded", unlisted_when_waived=True),
    Gate("accuracy_threshold", "the accuracy (the task's gated filter, greedy) reaches the threshold",
         KINDS, "accuracy.score", ">=", "$accuracy.threshold", ("accuracy",), when="accuracy.recorded",
         unlisted_when_waived=True),
    Gate("accuracy_pd_difference",
         "on the same items, the P/D accuracy is within the allowed difference of the aggregated run's",
         DISAGG_KINDS, "accuracy.pd_difference", "<=", "$accuracy.max_pd_difference", ("accuracy",),
         when="accuracy.recorded", unlisted_when_waived=True),
    Gate("accuracy_pd_differing_items",
         "at most the allowed number of items answered differently from the aggregated run", DISAGG_KINDS, "accuracy.pd_differing_items", "<=", "$accuracy.max_differing_items", ("accuracy",),
         when="accuracy.items_gated", unlisted_when_waived=True),
    Gate("nixl_err_records", "no NIXL_ERR record in the logs", DISAGG_KINDS,
         "logs.nixl_err", "==", 0, ("logs.nixl_err",), applies=lambda e: e.nixl_transfers),
    Gate("decode_external_prefix_hits", "decode reused tokens it did not compute (they came over NIXL)",
         DISAGG_KINDS, "prefix.decode_external_hits", ">", 0, ("metrics.prefix",),
         applies=lambda e: e.external_prefix_hits),
    Gate("kv_transport_rows", "UCX chose the expected transport for the KV reads and writes", DISAGG_KINDS,
         "kv.expected_transport_rows", ">=", 1, ("logs.ucx_kv_row",),
         applies=lambda e: e.kv_transport is not None),
    Gate("kv_forbidden_transport_rows", "no KV read or write fell back to a forbidden transport",
         DISAGG_KINDS, "kv.forbidden_transport_rows", "==", 0, ("logs.ucx_kv_row",),
         applies=lambda e: bool(e.forbidden_kv_transports)),
    Gate("kv_rows_not_zero_copy",
         "every KV-sized read and write over the expected transport is zero-copy (no emulation, no copy)",
         DISAGG_KINDS, "kv.rows_not_zero_copy", "==", [], ("kv.rows_not_zero_copy", "logs.ucx_kv_row"),
         applies=lambda e: e.kv_zero_copy),
    Gate("dmabuf_registrations_min_per_worker", "every worker registered KV memory through dma-buf", KINDS,
         "dmabuf.min_ok_per_worker", ">=", 1, ("logs.dmabuf_ok", "logs.dmabuf_fail"),
         applies=lambda e: e.dmabuf_registrations),
    Gate("host_vram_registrations_min_per_worker",
         "every worker registered VRAM that UCX classified as host (NIXL_COMPAT_HOST_VRAM): the helper's path",
         KINDS, "logs.host_vram_min_per_worker", ">=", 1, ("logs.host_vram",),
         applies=lambda e: e.dmabuf_registrations),
    Gate("dmabuf_short_of_host_vram_workers",
         "every worker has a dma-buf registration for each VRAM registration classified as host", KINDS,
         "dmabuf.short_of_host_vram_workers", "==", [], ("logs.dmabuf_ok", "logs.host_vram"),
         applies=lambda e: e.dmabuf_registrations),
    Gate("dmabuf_failures", "no dma-buf registration failed", KINDS,
         "dmabuf.fail", "==", 0, ("logs.dmabuf_fail", "logs.dmabuf_ok"), when="dmabuf.judged"),
    Gate("doctor_missing_roles", "every worker kept nixl-compat doctor's report (doctor/<role>.json)",
         KINDS, "doctor.missing_roles", "==", 0, ("doctor",), applies=lambda e: e.doctor_required),
    Gate("doctor_failed_selftests", "every worker's doctor moved and verified bytes through NIXL", KINDS,
         "doctor.failed_selftests", "==", 0, ("doctor",), applies=lambda e: e.doctor_required),
    Gate("nixl_backend_missing_roles", "every worker's NIXL backend is the expected one and passed its self-test",
         KINDS, "doctor.roles_without_backend", "==", 0, ("doctor",),
         applies=lambda e: e.nixl_backend is not None),
    Gate("repeat_kv_hit_rate_max", "a repeated prompt hit the KV cache (router kv_hit_rate > 0)", KINDS,
         "requests.repeat_hit_max", ">", 0, ("requests.repeats",), applies=lambda e: e.router_prefix_hits),
    Gate("repeat_router_overlap_max",
         "a repeated prompt's KV overlap reached the router (kv_hit_rate > 0: the workers' KV events arrived)",
         KINDS, "requests.repeat_hit_max", ">", 0, ("requests.repeats",), applies=lambda e: e.router_overlap,
         when="run.kv_events"),
    Gate("prefix_cache_hits", "a repeated prompt hit the prefix cache", AGG_KINDS,
         "prefix.hits", ">", 0, ("metrics.prefix",), applies=lambda e: not e.router_prefix_hits),
    Gate("decode_prefix_hits", "a repeated prompt hit the prefix cache on decode", DISAGG_KINDS,
         "prefix.decode_hits", ">", 0, ("metrics.prefix",), applies=lambda e: not e.router_prefix_hits),
)  # fmt: skip

# The signals derive() sets from the readers' with the engine's expectations (a gate reads one of these or one a
# reader declares: evidence/readers/).
DERIVED: frozenset[str] = frozenset({
    "kv.answer_differing_tokens", "kv.answer_logprob_max_delta", "kv.expected_transport_rows",
    "kv.forbidden_transport_rows", "kv.message_min_bytes", "kv.message_min_source", "kv.rows_not_zero_copy",
    "doctor.roles_without_backend", "dmabuf.judged",
    "reference.recorded", "reference.differing_tokens",  # evidence/reference_signal.py, called by derive
    *ACCURACY_SIGNALS,  # evidence/accuracy_signal.py, called by derive
})  # fmt: skip


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

    def line(self) -> str:
        """The check as one line: ``requests_failed 0 == 0``."""
        value = "no data" if self.value is None else repr(self.value)
        return f"{self.id} {value} {self.expect}"


def gates_for(kind: str | None, expectations: GateExpectations | None) -> list[Gate]:
    """The gates of a run kind and engine expectations; an unknown kind or engine keeps the common gates."""
    if kind not in KINDS:
        return [g for g in GATES if g.kinds == KINDS and g.common]
    if expectations is None:
        return [g for g in GATES if kind in g.kinds and g.common]
    applied = expectations.for_kind(kind)
    return [g for g in GATES if kind in g.kinds and g.applies(applied)]


def carries(transport: str, named: str | None) -> bool:
    """Whether a UCX ``transport/device`` is the transport ``named``: the name itself or one of its variants
    (``rc`` is ``rc_verbs`` and ``rc_mlx5``; ``cuda`` is ``cuda_ipc``; ``rocm_ipc`` is only ``rocm_ipc``)."""
    name = transport.split("/", 1)[0]
    return named is not None and (name == named or name.startswith(named + "_"))


def _derive_answer(signals: Signals, expected: GateExpectations) -> None:
    """The fixed prompt's comparison by the engine's rule: a token prefix, and the log probabilities' largest
    difference at the positions where both answers chose the same token."""
    if signals.answers is None:
        why = signals.missing.get("kv.answer_differing_tokens", "no answers were compared")
        signals.absent("kv.answer_logprob_max_delta", why)
        return
    answer, reference = signals.answers
    prefix = expected.answer_prefix_tokens
    tolerance = expected.answer_logprob_tolerance
    if prefix is not None or tolerance is not None:
        rule = f"the first {prefix} tokens" if prefix is not None else "every token"
        if tolerance is not None:
            rule += f", log probabilities within {tolerance:g} where the tokens agree"
        signals.excerpt("answers", f"compared by the engine's rule: {rule}")
    signals.set("kv.answer_differing_tokens", differing_tokens(answer.tokens, reference.tokens, prefix))
    delta = logprob_max_delta(answer, reference, prefix)
    if delta is None:
        signals.absent(
            "kv.answer_logprob_max_delta", "an answer kept no log probabilities (recorded before they were)"
        )
    else:
        signals.set("kv.answer_logprob_max_delta", round(delta, 6))


def kv_message_min(model: object) -> tuple[int, str]:
    """The smallest message that carries KV in a run of ``model`` (run.json's model profile), and where the figure
    comes from. vLLM's NixlConnector registers each layer's K and V and reads a block of a layer as one
    descriptor of each (adjacent blocks merged into one longer descriptor), so no KV message is smaller than one
    block of one layer's K on one rank: block tokens x KV heads per rank x head size x element bytes, from the
    profile's ``kv_shape`` (32 KiB for Qwen3-8B in BF16). A profile without a shape, or a name no profile has:
    logscan.KV_MESSAGE_MIN (4 KiB), a floor below any KV block of the profiles here.

    Why not a fixed floor for every model: UCX's rc_verbs copies messages up to its bounce buffers' size
    (UCX_IB_SEG_SIZE, 8 KiB at the pinned UCX) through them, so a correct run's table has copy rows reaching 8 KiB,
    which a 4 KiB floor would count although no KV block of such a model is that small. A decode that reads part
    of each block (a prefill with another tensor-parallel size) sends smaller messages: not a layout run here."""
    try:
        shape = get_model(model).kv_shape if isinstance(model, str) else None
    except ProfileError:
        shape = None
    if shape is None:
        return KV_MESSAGE_MIN, f"no KV shape for model profile {model!r}: the {KV_MESSAGE_MIN}-byte floor"
    size = shape.block_tokens * shape.kv_heads * shape.head_dim * shape.dtype_bytes
    return size, (
        f"one block of one layer of model profile {model}: {shape.block_tokens} tokens x {shape.kv_heads} KV "
        f"heads x {shape.head_dim} x {shape.dtype_bytes} B"
    )


def derive(signals: Signals, expectations: GateExpectations | None) -> None:
    """Signals that depend on what the engine expects: the KV transport rows of the expected and forbidden
    transports, the KV-sized rows of the expected transport that are not zero-copy, the workers whose doctor
    does not report the expected backend, whether dma-buf is judged."""
    expected = expectations or GateExpectations()
    _derive_answer(signals, expected)
    read_reference_answers(signals)  # the independent reference: a file of the run directory, read here
    read_accuracy(signals)  # the accuracy check's answers: accuracy/, read here
    rows = signals.get("kv.transport_rows")
    signals.excerpts.pop("kv.rows_not_zero_copy", None)  # drawn again for these expectations
    if isinstance(rows, dict):
        signals.set(
            "kv.expected_transport_rows",
            sum(n for t, n in rows.items() if carries(t, expected.kv_transport)),
        )
        forbidden = expected.forbidden_kv_transports
        signals.set(
            "kv.forbidden_transport_rows",
            sum(n for t, n in rows.items() if any(carries(t, f) for f in forbidden)),
        )
        # Judged: the rows UCX takes for messages of a KV block's size or more, not the small ones below it.
        message_min, source = kv_message_min(signals.get("run.model_profile"))
        signals.set("kv.message_min_bytes", message_min)
        signals.set("kv.message_min_source", source)
        copied = [
            row
            for row in signals.kv_rows
            if row.carries(message_min) and not row.zero_copy
            and any(carries(t, expected.kv_transport) for t in row.transports)
        ]  # fmt: skip
        signals.set("kv.rows_not_zero_copy", [row.shown() for row in copied])
        for row in copied:
            signals.excerpt("kv.rows_not_zero_copy", signals.kv_rows[row])
    else:
        why = signals.missing.get("kv.transport_rows", "kv.transport_rows was not collected")
        for name in ("kv.expected_transport_rows", "kv.forbidden_transport_rows", "kv.rows_not_zero_copy"):
            signals.absent(name, why)
    backends = signals.get("doctor.backends")
    selftests = signals.get("doctor.selftest_ok")
    if isinstance(backends, dict) and isinstance(selftests, dict):
        workers = signals.get("run.worker_roles") or sorted(backends)
        without = [r for r in workers if backends.get(r) != expected.nixl_backend or not selftests.get(r)]
        signals.set("doctor.roles_without_backend", len(without))
    signals.set(
        "dmabuf.judged",
        expected.dmabuf_registrations or bool(signals.get("dmabuf.seen")),
    )


def _judge(gate: Gate, signals: Signals, expectations: GateExpectations | None) -> GateResult:
    result = _compare(gate, signals, expectations)
    group = next((g for g in gate.excerpt if signals.excerpts.get(g)), None)
    return GateResult(result.id, gate.title_for(expectations), result.signal, result.expect, result.value,
                      result.verdict, result.reason, group)  # fmt: skip


def _compare(gate: Gate, signals: Signals, expectations: GateExpectations | None) -> GateResult:
    value = signals.get(gate.signal)
    required = expectations is not None and gate.id in expectations.required
    waived = gate.when is not None and not signals.get(gate.when)  # n/a, unless the engine requires it
    expect, shown = gate.expect, f"{gate.op} {gate.expect}"
    if isinstance(expect, str) and expect.startswith("@") and expect[1:] in _EXPECTATION_FIELDS:
        expect = getattr(expectations or GateExpectations(), expect[1:])
        shown = f"{gate.op} {expect} (expected by the engine)"
    elif isinstance(expect, str) and expect.startswith("$"):
        expect = signals.get(expect[1:])
        shown = f"{gate.op} {gate.expect[1:]} ({expect})"
        if expect is None:
            why = signals.missing.get(gate.expect[1:], "no value")
            return GateResult(gate.id, gate.title, gate.signal, shown, value, "fail", f"no data: {why}", None)
    if waived and not required:
        return GateResult(
            gate.id, gate.title, gate.signal, shown, value, "n/a", f"{gate.when} is false", None
        )
    if value is None:
        why = signals.missing.get(gate.signal, f"{gate.signal} was not collected")
        if waived:
            why += f" ({gate.when} is false, and the engine requires this gate)"
        return GateResult(gate.id, gate.title, gate.signal, shown, None, "fail", f"no data: {why}", None)
    try:
        passed = _OPS[gate.op](value, expect)
    except TypeError:
        passed = False
    reason = "" if passed else f"{gate.signal} is {value!r}, expected {shown}"
    return GateResult(
        gate.id, gate.title, gate.signal, shown, value, "pass" if passed else "fail", reason, None
    )


def evaluate(signals: Signals, expectations: GateExpectations | None = None) -> list[GateResult]:
    """Judge every gate of the run's kind and of what its engine expects (looked up by the engine run.json
    names unless given)."""
    kind, engine = signals.get("run.kind"), signals.get("run.engine")
    expectations = expectations or expectations_for(engine, signals.run.get("config"))
    derive(signals, expectations)
    results = [
        _judge(g, signals, expectations)
        for g in gates_for(kind, expectations)
        if not (g.unlisted_when_waived and g.when is not None and not signals.get(g.when))
    ]
    if expectations is None:
        why = f"no gate expectations for engine {engine!r}: the engine registry does not know it"
        results.insert(
            0,
            GateResult(
                "engine_known",
                "the engine's expectations are known",
                "run.engine",
                "is known",
                engine,
                "fail",
                why,
                "run",
            ),
        )
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


def failed_count(results: list[GateResult]) -> tuple[int, int]:
    """(gates failed, gates judged)."""
    judged = [r for r in results if r.verdict != "n/a"]
    return sum(1 for r in judged if r.verdict == "fail"), len(judged)
