"""The kinds of run: one node aggregated, two nodes aggregated, disaggregated prefill/decode."""

from __future__ import annotations

KINDS = ("agg-single", "agg-two", "disagg")
AGG_KINDS = ("agg-single", "agg-two")
DISAGG_KINDS = ("disagg",)
TWO_NODE_KINDS = ("agg-two", "disagg")
