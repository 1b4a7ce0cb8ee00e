"""The readers of a run directory, one module each, in the order they run (``evidence/signals.py``).

Each declares the signals it sets (:class:`~atomdyn_launchers.evidence.readers.base.Reader`); later readers may
read what earlier ones set (the run kind, the engine, the worker roles), so ``run.json`` comes first. A gate reads a
signal some reader declares, or one ``evidence/gates.py`` derives from them with the engine's expectations
(``DERIVED``): the evidence tests check both.
"""

from __future__ import annotations

from atomdyn_launchers.evidence.readers import answers, doctor, logs, metrics, requests, run, timeline
from atomdyn_launchers.evidence.readers.base import Reader

READERS: tuple[Reader, ...] = (
    run.READER,
    timeline.READER,
    requests.READER,
    metrics.READER,
    logs.READER,
    doctor.READER,
    answers.READER,
)

__all__ = ["READERS", "Reader"]
