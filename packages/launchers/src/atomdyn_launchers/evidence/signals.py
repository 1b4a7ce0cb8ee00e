"""Read a run directory (docs/run-directory.md) into named signals: the facts the gates judge.

The readers live in ``evidence/readers/``, one module per part of the run directory (run.json, the timeline,
the requests, the metrics, the logs, the doctor reports, the answers), each declaring the signals it sets;
this module runs them in order. Every signal is either a value or absent with the reason it is absent; nothing
raises on bad content (a missing file, a truncated line, binary garbage, an aborted run): the problem is
recorded instead.
"""

from __future__ import annotations

from pathlib import Path

from atomdyn_launchers.evidence.expectations import declared_metrics
from atomdyn_launchers.evidence.readers import READERS
from atomdyn_launchers.evidence.readers.base import SAFE_RUN_ID, Reader, Signals, record_lines
from atomdyn_launchers.evidence.readers.metrics import FRONTEND_REQUESTS

__all__ = ["READERS", "SAFE_RUN_ID", "Reader", "Signals", "collect_signals", "record_lines", "wanted_metrics"]


def wanted_metrics() -> frozenset[str]:
    """The samples the collected data keeps of each scrape (evidence/data.py): Dynamo's frontend's, and every metric
    a registered engine names (its GateExpectations.metrics)."""
    return frozenset({FRONTEND_REQUESTS, *declared_metrics()})


def collect_signals(run_dir: Path, name: str | None = None) -> Signals:
    """Everything the gates need from ``run_dir``; never raises on what the run left behind. ``name``: the
    run directory's name when ``run_dir`` is a copy under another name (evidence's ``data/``)."""
    signals = Signals(Path(run_dir), name or Path(run_dir).name)
    if not signals.run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    for reader in READERS:
        reader.read(signals)
    return signals
