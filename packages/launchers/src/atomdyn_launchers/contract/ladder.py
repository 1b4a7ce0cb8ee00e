"""The bring-up ladder's rungs by name, in climbing order: what `invoke certify` climbs (certify/rungs.py holds
what each does) and what the evidence requires of a certify report before it calls it certified."""

from __future__ import annotations

RUNG_NAMES: tuple[str, ...] = (
    "preflight",
    "images",
    "validate",
    "nixl",
    "agg-single",
    "agg-two",
    "disagg",
    "accuracy",
    "benchmark",
)
# Ladders a report of its day was certified by: climbs committed before the accuracy rung (issue 38) name these
# rungs and stay certified by them; a climb today runs RUNG_NAMES.
EARLIER_LADDERS: tuple[tuple[str, ...], ...] = (tuple(name for name in RUNG_NAMES if name != "accuracy"),)
