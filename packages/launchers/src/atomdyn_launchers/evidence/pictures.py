"""PNG pictures for summary.md: the run timeline, and KV-transfer size against time where the logs have it.

matplotlib is an optional extra (``atomdyn-launchers[pictures]``): without it no picture is drawn and the
summary says so in its collection notes, rather than failing the collection.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_bytes
from atomdyn_launchers.evidence.signals import Signals

NAMES = ("timeline.png", "kv_transfers.png")  # every picture draw() can make, in its order

_EVENT_MARKERS = {
    "submitted": "o",
    "pending": ".",
    "running": ">",
    "registered": "s",
    "healthy": "P",
    "first_good_response": "*",
    "requests_done": "D",
    "cancelled": "x",
    "failed": "X",
    "done": "|",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede the pyplot import
    import matplotlib.pyplot as plt

    return plt


# Drawing is most of what collecting and verifying a bundle costs, and the same data draws the same bytes: a
# process draws each picture once (verify after collect, a report over many bundles). Bounded: the last few.
_DRAWN: OrderedDict[str, bytes] = OrderedDict()
_DRAWN_KEPT = 8


def _save(fig: Any) -> bytes:
    import io

    buffer = io.BytesIO()
    # No date or software version in the metadata: the same run draws the same bytes.
    fig.savefig(buffer, format="png", dpi=80, metadata={"Software": None})
    return buffer.getvalue()


def _drawn_once(path: Path, plotted: Any, render: Callable[[], bytes]) -> None:
    """Write the picture of ``plotted`` (everything the drawing reads) to ``path``, drawn by ``render`` unless
    this process drew it already."""
    key = json.dumps([path.name, plotted], sort_keys=True, default=str)
    png = _DRAWN.pop(key, None)
    if png is None:
        png = render()
    _DRAWN[key] = png
    while len(_DRAWN) > _DRAWN_KEPT:
        _DRAWN.popitem(last=False)
    atomic_write_bytes(path, png)


def _timeline(signals: Signals, out: Path) -> str | None:
    if not signals.events:
        return None
    plotted = [signals.get("run.id"), [[e["t"], e["role"], e["event"]] for e in signals.events]]
    _drawn_once(out / "timeline.png", plotted, lambda: _draw_timeline(signals))
    return "timeline.png"


def _draw_timeline(signals: Signals) -> bytes:
    plt = _pyplot()
    origin = min(e["t"] for e in signals.events)
    roles = sorted({e["role"] or "launcher" for e in signals.events}, key=lambda r: (r != "launcher", r))
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.5 * len(roles)))
    seen: set[str] = set()
    for event in signals.events:
        name = event["event"]
        row = roles.index(event["role"] or "launcher")
        label = name if name not in seen else None
        seen.add(name)
        ax.scatter(
            event["t"] - origin, row, marker=_EVENT_MARKERS.get(name, "o"), s=60, label=label, zorder=3
        )
    ax.set_yticks(range(len(roles)), roles)
    ax.set_xlabel("seconds since the first event")
    ax.set_title(f"timeline: {signals.get('run.id')}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout()
    png = _save(fig)
    plt.close(fig)
    return png


def _kv(signals: Signals, out: Path) -> str | None:
    if not signals.kv_points:
        return None
    _drawn_once(out / "kv_transfers.png", [list(p) for p in signals.kv_points], lambda: _draw_kv(signals))
    return "kv_transfers.png"


def _draw_kv(signals: Signals) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 3))
    xs = [p[0] for p in signals.kv_points]
    ys = [p[1] for p in signals.kv_points]
    sizes = [min(200, 10 + 4 * p[2]) for p in signals.kv_points]
    ax.scatter(xs, ys, s=sizes, alpha=0.7)
    ax.set_xlabel("seconds since the first KV-transfer summary")
    ax.set_ylabel("mean MiB per transfer")
    ax.set_ylim(bottom=0)
    ax.set_title("NIXL KV transfers (vLLM summaries; marker area ~ number of transfers)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = _save(fig)
    plt.close(fig)
    return png


def unavailable() -> str | None:
    """Why no picture can be drawn here, or None."""
    try:
        _pyplot()
    except ImportError:
        return "matplotlib is not installed (atomdyn-launchers[pictures])"
    return None


def version() -> str:
    import matplotlib

    return str(matplotlib.__version__)


def draw(signals: Signals, out: Path) -> list[str]:
    """Draw what the run has data for into ``out``; the file names drawn."""
    why = unavailable()
    if why is not None:
        signals.problems.append(f"pictures not drawn: {why}")
        return []
    return [name for name in (_timeline(signals, out), _kv(signals, out)) if name]
