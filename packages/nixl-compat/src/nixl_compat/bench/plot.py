"""PNG of a bench document. matplotlib is imported only here, so JSON never depends on it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any


def plot_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from atomdyn_core.atomic import atomic_write_bytes

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    raw = sorted((r["bytes"], r["p50_us"], r["gbps_p50"]) for c in doc["configs"] for r in c["raw"])
    for cfg in doc["configs"]:
        groups: dict[str, list[tuple[int, float]]] = {}
        bw: dict[str, list[tuple[int, float]]] = {}
        for s in cfg["series"]:
            if "error" in s:
                continue
            if s["case"] == "kv-blocks":
                groups.setdefault(f"{cfg['name']} {s['layout']} {s['path']}", []).append(
                    (s["bytes"], s["p50_us"])
                )
            else:
                key = f"{cfg['name']} contiguous {s['path']}" + (f" x{s['lanes']}" if "lanes" in s else "")
                bw.setdefault(key, []).append((s["bytes"], s["gbps_p50"]))
        for key, pts in groups.items():
            pts.sort()
            ax1.plot([p[0] / 2**20 for p in pts], [p[1] for p in pts], marker="o", label=key)
        for key, pts in bw.items():
            pts.sort()
            ax2.plot([p[0] / 2**20 for p in pts], [p[1] for p in pts], marker="o", label=key)
    if raw:
        ax1.plot([r[0] / 2**20 for r in raw], [r[1] for r in raw], "k--", marker="x", label="raw copy")
        ax2.plot([r[0] / 2**20 for r in raw], [r[2] for r in raw], "k--", marker="x", label="raw copy")
    ax1.set(xscale="log", yscale="log", xlabel="MiB per transfer", ylabel="p50 latency (us)")
    ax1.set_title("KV blocks (Qwen3-8B shape unless set otherwise)")
    ax2.set(xscale="log", xlabel="MiB per transfer", ylabel="p50 GB/s")
    ax2.set_title("single contiguous transfers")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(f"nixl-compat bench, {doc['spec']['device']}: {doc['platform']}", fontsize=10)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, png.getvalue())
