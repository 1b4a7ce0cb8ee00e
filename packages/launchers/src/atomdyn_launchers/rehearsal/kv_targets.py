"""The rehearsal's KV-path targets as a table: what ``disagg.bench`` holds each real-engine P/D run to.

The targets are the link's: on the two-core rehearsal machine a KV transfer of the tiny model moves ~130 KiB,
which a raw TCP copy between the same namespaces does in well under a millisecond; a transfer that takes longer
than vLLM's smallest histogram bucket is waiting on something, not on the link. They are judged from what the
run measured (the decode workers' histogram, the smoke requests' latencies) and never fail the bench: they
say, run by run, how far the path is from its link.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from atomdyn_launchers.rehearsal.bench_figures import KvTransfers, RequestLatencies


@dataclass(frozen=True)
class RunFigures:
    """What one P/D run measured, beside the aggregated reference run of the same bench (if any)."""

    transfers: KvTransfers | None
    requests: RequestLatencies | None
    aggregated: RequestLatencies | None


# A target's verdict: True met, False missed, None not measured; and the measured figure that decided it.
Judged = tuple[bool | None, str]


def _half_within_5ms(f: RunFigures) -> Judged:
    within = f.transfers.within(0.005) if f.transfers else None
    if f.transfers is None or within is None:
        return None, "no transfer histogram"
    return 2 * within >= f.transfers.count, f"{within}/{f.transfers.count} within 5 ms"


def _none_over_100ms(f: RunFigures) -> Judged:
    over = f.transfers.over(0.1) if f.transfers else None
    if over is None:
        return None, "no transfer histogram"
    return over == 0, f"{over} over 100 ms"


def _mean_within_10ms(f: RunFigures) -> Judged:
    if f.transfers is None:
        return None, "no transfers"
    mean = f.transfers.seconds_per_transfer
    return mean <= 0.010, f"mean {mean * 1e3:.1f} ms"


def _pd_within_2x_aggregated(f: RunFigures) -> Judged:
    if f.requests is None or f.aggregated is None:
        return None, "no aggregated reference" if f.requests else "no answered request"
    ratio = f.requests.p50_s / f.aggregated.p50_s
    return ratio <= 2.0, (
        f"P/D p50 {f.requests.p50_s:.2f} s / aggregated p50 {f.aggregated.p50_s:.2f} s = {ratio:.1f}x"
    )


def _no_request_over_5s(f: RunFigures) -> Judged:
    if f.requests is None:
        return None, "no answered request"
    return f.requests.max_s <= 5.0, f"slowest request {f.requests.max_s:.2f} s"


@dataclass(frozen=True)
class Target:
    name: str
    judge: Callable[[RunFigures], Judged]


TARGETS: tuple[Target, ...] = (
    Target("at least half of the KV transfers in vLLM's smallest bucket (<= 5 ms)", _half_within_5ms),
    Target("no KV transfer over 100 ms", _none_over_100ms),
    Target("mean KV transfer <= 10 ms", _mean_within_10ms),
    Target("P/D request latency p50 <= 2x the aggregated run's", _pd_within_2x_aggregated),
    Target("no request over 5 s", _no_request_over_5s),
)


def judge(figures: RunFigures) -> list[dict[str, object]]:
    """Every target's verdict for one run: name, met (True, False, None: not measured) and the figure."""
    rows: list[dict[str, object]] = []
    for target in TARGETS:
        met, measured = target.judge(figures)
        rows.append({"target": target.name, "met": met, "measured": measured})
    return rows


def describe(row: dict[str, object]) -> str:
    met = row["met"]
    verdict = "met" if met is True else "MISSED" if met is False else "not measured"
    return f"{verdict:<12} {row['target']}: {row['measured']}"
