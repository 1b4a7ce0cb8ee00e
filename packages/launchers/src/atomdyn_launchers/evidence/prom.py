"""A small reader of the Prometheus text exposition format, as scraped from the frontend and the workers.

Only samples are read (``name{labels} value [timestamp]``); comments, blank and malformed lines are skipped
and counted. Labels are kept so callers can select by them (``status="success"``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float
    line: str  # the raw line, for excerpts


def parse_line(line: str) -> Sample | None:
    """One sample, or None for a comment, a blank or a malformed line."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    found = _SAMPLE.match(line)
    if not found:
        return None
    try:
        value = float(found.group(3))
    except ValueError:
        return None
    if math.isnan(value):
        return None
    labels = dict(_LABEL.findall(found.group(2) or ""))
    return Sample(found.group(1), labels, value, line)


def read_samples(path: Path, wanted: frozenset[str]) -> Iterator[Sample]:
    """The samples of ``path`` whose metric name is in ``wanted``; streams, so file size does not matter."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        for raw in handle:
            name = raw.split("{", 1)[0].split(" ", 1)[0]
            if name not in wanted:
                continue
            sample = parse_line(raw)
            if sample is not None:
                yield sample
