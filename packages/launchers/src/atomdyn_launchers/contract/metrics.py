"""The metrics an engine's workers publish, named by what they count: data the engine declares and the evidence
reads its scrapes through.

Each engine's metric vocabulary is its own (vLLM's workers publish its NIXL and prefix-cache counters, another
engine its own), so no metric name of an engine is written outside ``engines/``: the engine sets a
:class:`MetricNames` in its :class:`~atomdyn_launchers.contract.expectations.GateExpectations`, and the
evidence's metrics reader (``evidence/readers/metrics.py``) maps each named metric to the signal it feeds. A
quantity the engine names no metric for is absent in its runs' signals, with that as the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class MetricNames:
    """The Prometheus sample names a worker's ``/metrics`` carries for each quantity the gates read; None: the
    engine publishes no such metric. Counts are summed over the files and label sets of the roles that count them
    (a P/D run's decode workers for the KV transfers)."""

    # KV transfers between workers: how many (a histogram's ``_count``), the time they took (its ``_sum``),
    # the bytes they moved, and the family of that time histogram (its buckets: the bench's spread).
    kv_transfers: str | None = None
    kv_seconds: str | None = None
    kv_bytes: str | None = None
    kv_time_histogram: str | None = None
    # The counter of failed KV transfers, as its family is named: the reader takes the name and ``<name>_total``
    # (Prometheus's counter sample), whichever the scrape carries.
    kv_failed_transfers: str | None = None
    # The prefix cache: queries and hits in tokens; the external ones are tokens the worker did not compute (on
    # a P/D decode, those read from the prefill worker).
    prefix_queries: str | None = None
    prefix_hits: str | None = None
    external_prefix_queries: str | None = None
    external_prefix_hits: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (not isinstance(value, str) or not value or value != value.strip()):
                raise ValueError(f"metric name {f.name} must be a non-empty name, not {value!r}")

    def named(self, quantity: str) -> str | None:
        """The metric named for ``quantity`` (a field of this class)."""
        if quantity not in QUANTITIES:
            raise ValueError(f"unknown metric quantity {quantity!r}; known: {', '.join(QUANTITIES)}")
        value = getattr(self, quantity)
        return value if isinstance(value, str) else None

    def samples(self, quantity: str) -> tuple[str, ...]:
        """The sample names that carry ``quantity`` in a scrape (a counter's family also as ``<name>_total``)."""
        name = self.named(quantity)
        if name is None:
            return ()
        if quantity == "kv_failed_transfers" and not name.endswith("_total"):
            return (name + "_total", name)
        return (name,)

    def wanted(self) -> frozenset[str]:
        """Every sample name the evidence reads of these metrics (the time histogram's buckets are the bench's,
        not the gates')."""
        return frozenset(s for q in QUANTITIES if q != "kv_time_histogram" for s in self.samples(q))


QUANTITIES: tuple[str, ...] = tuple(f.name for f in fields(MetricNames))
