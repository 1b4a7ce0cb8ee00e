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
    "benchmark",
)
