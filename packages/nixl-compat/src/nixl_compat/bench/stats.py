"""Cold and warm latency figures of one series."""

from __future__ import annotations

from typing import Any

import numpy as np


def summarize(cold: list[float], warm: list[float], nbytes: int) -> dict[str, Any]:
    """Times in seconds in; microseconds and GB/s (10^9 bytes per second) out."""
    if not cold or not warm:
        raise ValueError(f"need a cold and at least one warm sample, got {len(cold)} and {len(warm)}")
    w = np.asarray(warm, dtype=np.float64) * 1e6
    p50 = float(np.percentile(w, 50))
    return {
        "iterations": len(warm),
        "cold_us": round(cold[0] * 1e6, 2),
        "p50_us": round(p50, 2),
        "p99_us": round(float(np.percentile(w, 99)), 2),
        "min_us": round(float(w.min()), 2),
        "mean_us": round(float(w.mean()), 2),
        "gbps_p50": round(nbytes / (p50 * 1e-6) / 1e9, 3),
    }
