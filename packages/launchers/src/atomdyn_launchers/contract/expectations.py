"""Which evidence gates an engine's runs must pass, as data the engines declare and the evidence reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from atomdyn_launchers.contract.kinds import DISAGG_KINDS, KINDS
from atomdyn_launchers.contract.metrics import MetricNames


@dataclass(frozen=True)
class GateExpectations:
    """Which evidence gates an engine's runs must pass: each engine object holds one (``engine.expectations``).

    The evidence code reads it for the engine a run.json names, so what an engine must prove lives with the
    engine. Fields about the KV path (everything but ``router_prefix_hits``, ``router_overlap``, ``metrics`` and
    ``required``) concern prefill/decode runs only: :meth:`for_kind` clears them for aggregated runs, where no KV
    cache moves between workers.
    """

    # The metrics the engine's workers publish (MetricNames): the evidence reads the KV transfers and the prefix
    # cache through these names, so an engine's metric vocabulary stays in engines/.
    metrics: MetricNames = field(default_factory=MetricNames)
    # Gates (by id, evidence/gates.py) that apply whatever the run recorded: where a gate would be n/a because its
    # ``when`` signal is false (e.g. run.json names no fixed prompt), a required one is judged, and with no data
    # it fails "no data". n/a stays only where the engine lets it (a gate it does not require, or one it does
    # not expect at all).
    required: frozenset[str] = frozenset()

    # The P/D handoff is proven by different prefill and decode worker ids in every response (the mock engine,
    # which moves no KV cache).
    pd_worker_split: bool = False
    # A repeated prompt's cache hit is read from the router's kv_hit_rate (the mock engine) rather than from
    # the engine's own prefix-cache counters (``metrics.prefix_hits``).
    router_prefix_hits: bool = False
    # The workers publish KV events (vLLM's --kv-events-config, relayed by Dynamo): the router's kv_hit_rate for
    # a repeated prompt is above 0 wherever the run recorded publishers (run.json kv_event_roles).
    router_overlap: bool = False
    # The decode worker's metrics count NIXL transfers (``metrics.kv_transfers``) >= 1, no failed transfer
    # (``metrics.kv_failed_transfers``) == 0, and the bytes moved (``metrics.kv_bytes``).
    nixl_transfers: bool = False
    # The decode worker's external prefix-cache hits (``metrics.external_prefix_hits``) > 0: tokens it did not
    # compute came over NIXL.
    external_prefix_hits: bool = False
    # The UCX transport family that must carry the KV reads (UCX_PROTO_INFO tables in the workers' logs):
    # "tcp" on the CPU rehearsal, "rc" (rc_verbs, rc_mlx5, ...) on RoCE.
    kv_transport: str | None = None
    # Transport families that must not carry KV: a silent fallback to them fails the run.
    forbidden_kv_transports: tuple[str, ...] = ()
    # Every row of those tables that can carry a KV block over ``kv_transport`` is a zero-copy protocol: no
    # software emulation, no copy through bounce buffers (the engines whose KV must move by RDMA).
    kv_zero_copy: bool = False
    # The dma-buf helper registers the workers' VRAM that UCX classified as host: each worker logs at least one
    # such VRAM registration (NIXL_COMPAT_HOST_VRAM) and one dma-buf registration, at least as many dma-buf
    # registrations as VRAM registrations classified as host, and none failed. No fixed count: it follows the
    # model, the tensor-parallel size, the KV layout and the memory domains UCX registers with (the PoC's
    # P/D run logged 720 a worker).
    dmabuf_registrations: bool = False
    # The NIXL backend module each worker's doctor must report and self-test (e.g. "nixl_rocm").
    nixl_backend: str | None = None
    # ``doctor/<role>.json`` (nixl-compat doctor --json from inside each worker's container) must be present,
    # and its self-test must have passed.
    doctor_required: bool = False
    # At temperature 0 the P/D answer to a fixed prompt equals, token for token, the one an aggregated run of the
    # same engine, model and build recorded (``answers.py``): KV read over NIXL continues as KV computed in place.
    aggregated_answer: bool = False
    # Where bitwise equality is too strict (a GPU: other kernels, other reduction orders between a prefill and a
    # decode worker): only the first ``answer_prefix_tokens`` tokens must be equal, and at the positions where
    # both chose the same token their log probabilities must agree within ``answer_logprob_tolerance`` (nats).
    answer_prefix_tokens: int | None = None
    answer_logprob_tolerance: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.required, frozenset) or not all(isinstance(g, str) for g in self.required):
            raise ValueError("required is a frozenset of gate ids")
        if self.kv_transport is not None and self.kv_transport in self.forbidden_kv_transports:
            raise ValueError(f"KV transport {self.kv_transport!r} is both expected and forbidden")
        if (self.answer_prefix_tokens is not None or self.answer_logprob_tolerance is not None) and not (
            self.aggregated_answer
        ):
            raise ValueError("answer_prefix_tokens and answer_logprob_tolerance refine aggregated_answer")
        if self.kv_zero_copy and self.kv_transport is None:
            raise ValueError("kv_zero_copy needs kv_transport: the transport whose KV rows must be zero-copy")

    def for_kind(self, kind: str) -> GateExpectations:
        """The expectations that apply to a run of ``kind``: aggregated runs move no KV between workers."""
        if kind not in KINDS:
            raise ValueError(f"unknown run kind {kind!r}; known: {', '.join(KINDS)}")
        if kind in DISAGG_KINDS:
            return self
        return GateExpectations(
            router_prefix_hits=self.router_prefix_hits,
            router_overlap=self.router_overlap,
            metrics=self.metrics,
            required=self.required,
        )
