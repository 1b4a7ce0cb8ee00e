"""The Prometheus exposition format, as scraped from the frontend and the workers, read through
``prometheus_client``'s own parsers (the text format and OpenMetrics).

A maintained parser rather than our own expressions: it unescapes label values (``model_name="a\\"b,c"``),
reads ``# TYPE``/``# HELP``, OpenMetrics (``# EOF``, ``_created``, exemplars, timestamps in seconds) and groups
a histogram's ``_bucket``/``_count``/``_sum`` into one family. The evidence runs on the submit host, so the
dependency is allowed here; nothing on the node side (``job/``, ``contract/``, ``etcd/``) imports it.

Scrapes are streamed: each line is filtered by its metric name before anything is parsed, so a large scrape
costs one pass and only the wanted lines reach the parser. A malformed line is skipped, never raised.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as _openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as _text_families

_HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum", "_created")


@dataclass(frozen=True)
class Sample:
    name: str  # as written in the exposition
    labels: Mapping[str, str]  # unescaped
    value: float
    line: str  # the raw line, for excerpts


def _name_of(line: str) -> str:
    return line.split("{", 1)[0].split(" ", 1)[0].strip()


def parse_line(line: str) -> Sample | None:
    """One sample, or None for a comment, a blank, a NaN or a malformed line."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    try:
        families = list(_text_families(line + "\n"))
    except (ValueError, IndexError):
        return None
    if len(families) != 1 or len(families[0].samples) != 1:
        return None
    sample = families[0].samples[0]
    value = float(sample.value)
    if math.isnan(value):
        return None
    return Sample(sample.name, dict(sample.labels), value, line)


def read_samples(path: Path, wanted: frozenset[str]) -> Iterator[Sample]:
    """The samples of ``path`` whose metric name is in ``wanted``; streams, so file size does not matter."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for raw in handle:
            if _name_of(raw) not in wanted:
                continue
            sample = parse_line(raw)
            if sample is not None:
                yield sample


@dataclass(frozen=True)
class Histogram:
    """One histogram series: cumulative bucket counts by upper bound, its count and sum, as one object."""

    name: str  # the family, e.g. a KV transfer-time histogram named by the engine
    labels: Mapping[str, str] = field(default_factory=dict)  # without le
    buckets: tuple[tuple[float, float], ...] = ()  # (upper bound, cumulative count), ascending, +Inf last
    count: float = 0.0
    sum: float = 0.0
    documentation: str = ""

    def merged(self, other: Histogram) -> Histogram:
        """This histogram's counts added to ``other``'s, bound by bound (decode workers summed)."""
        bounds: dict[float, float] = dict(self.buckets)
        for upper, cumulative in other.buckets:
            bounds[upper] = bounds.get(upper, 0.0) + cumulative
        return Histogram(
            self.name, {}, tuple(sorted(bounds.items())), self.count + other.count, self.sum + other.sum
        )

    def bucket_of(self, q: float, total: float | None = None) -> tuple[float, float] | None:
        """(lower, upper] bounds of the bucket holding quantile ``q`` of ``total`` observations (default: the
        histogram's count); None without buckets or observations."""
        total = self.count if total is None else total
        if not self.buckets or total <= 0:
            return None
        lower = 0.0
        for upper, cumulative in self.buckets:
            if cumulative >= total * q:
                return lower, upper
            lower = upper
        return None

    def quantile(self, q: float) -> float | None:
        """Quantile ``q`` interpolated linearly inside its bucket, as Prometheus's ``histogram_quantile``
        does (the highest finite bound when it falls in the +Inf bucket); None without observations."""
        if not self.buckets:
            return None
        total = self.buckets[-1][1]
        if total <= 0:
            return None
        rank = q * total
        lower, below = 0.0, 0.0
        for upper, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(upper):
                    return lower
                if cumulative == below:
                    return upper
                return lower + (upper - lower) * (rank - below) / (cumulative - below)
            lower, below = upper, cumulative
        return None


def read_histograms(path: Path, family: str) -> list[Histogram]:
    """The series of histogram ``family`` in ``path`` (text format or OpenMetrics); streams, keeping only the
    family's lines, then parses them as one family. An unparseable family gives no series."""
    wanted = {family + suffix for suffix in _HISTOGRAM_SUFFIXES}
    kept: list[str] = []
    openmetrics = False
    with open(path, encoding="utf-8", errors="replace") as handle:
        for raw in handle:
            line = raw.strip()
            if line.startswith("#"):
                parts = line.split(None, 3)
                if parts[1:2] == ["EOF"]:
                    openmetrics = True
                elif len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2] == family:
                    kept.append(line)
            elif _name_of(line) in wanted:
                kept.append(line)
    if not kept:
        return []
    try:
        if openmetrics:
            parsed = list(_openmetrics_families("\n".join(kept) + "\n# EOF\n"))  # type: ignore[no-untyped-call]
        else:
            parsed = list(_text_families("\n".join(kept) + "\n"))
    except (ValueError, IndexError):
        return []
    series: dict[tuple[tuple[str, str], ...], dict[str, object]] = {}
    documentation = ""
    for metric in parsed:  # a scrape without its # TYPE line gives untyped singletons: read them too
        if metric.name == family:
            documentation = metric.documentation
        for sample in metric.samples:
            if sample.name not in (family + "_bucket", family + "_count", family + "_sum"):
                continue  # _created: when the series began, not an observation
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            entry = series.setdefault(
                tuple(sorted(labels.items())), {"buckets": {}, "count": 0.0, "sum": 0.0}
            )
            value = float(sample.value)
            if sample.name == family + "_bucket" and "le" in sample.labels:
                buckets = entry["buckets"]
                assert isinstance(buckets, dict)
                buckets[float(sample.labels["le"])] = value  # "+Inf" parses as inf
            elif sample.name == family + "_count":
                entry["count"] = value
            elif sample.name == family + "_sum":
                entry["sum"] = value
    found: list[Histogram] = []
    for key, entry in series.items():
        buckets, count, total = entry["buckets"], entry["count"], entry["sum"]
        assert isinstance(buckets, dict) and isinstance(count, float) and isinstance(total, float)
        found.append(
            Histogram(family, dict(key), tuple(sorted(buckets.items())), count, total, documentation)
        )
    return found
