"""Run the bench: one pair of processes per UCX configuration, results gathered into one JSON document."""

from __future__ import annotations

import multiprocessing as mp
import platform
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nixl_compat._torch import import_torch
from nixl_compat.bench.spec import BenchSpec, MiB, UcxConfig
from nixl_compat.bench.worker import initiator_main, target_main
from nixl_compat.evidence import default_platform, evidence_labels, sanitized_json

SCHEMA = "nixl-compat-bench/1"


def _run_pair(spec: BenchSpec, ucx: UcxConfig, with_raw: bool) -> dict[str, Any]:
    ctx = mp.get_context("spawn")  # fresh interpreters: UCX and CUDA state never leak between configurations
    a, b = ctx.Pipe()
    result_r, result_w = ctx.Pipe(duplex=False)
    target = ctx.Process(target=target_main, args=(b, spec, ucx), name=f"nixl-bench-target-{ucx.name}")
    initiator = ctx.Process(
        target=initiator_main, args=(a, result_w, spec, ucx, with_raw), name=f"nixl-bench-init-{ucx.name}"
    )
    target.start()
    initiator.start()
    try:
        deadline = spec.timeout_s * 4
        if not result_r.poll(deadline):
            raise TimeoutError(f"bench [{ucx.name}]: no result from the initiator within {deadline:.0f} s")
        status, payload = result_r.recv()
        if status != "ok":
            raise RuntimeError(f"bench [{ucx.name}]: {payload}")
        for proc in (initiator, target):
            proc.join(spec.timeout_s)
            if proc.exitcode is None:
                raise TimeoutError(
                    f"bench [{ucx.name}]: {proc.name} did not exit within {spec.timeout_s:.0f} s"
                )
        return {"name": ucx.name, "env": dict(ucx.env), **payload}
    finally:
        for proc in (initiator, target):
            if proc.is_alive():
                proc.kill()
                proc.join(10)


def _context(spec: BenchSpec, label: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    try:
        from nixl_compat.resolve import resolve_backend

        res = resolve_backend()
        out["backend"] = {"module": res.module_name, "distribution": res.distribution, "version": res.version}
    except ImportError as exc:
        out["backend"] = {"error": str(exc)}
    names: list[str] = []
    if spec.device == "cuda":
        torch = import_torch()

        names = sorted({torch.cuda.get_device_name(i) for i in {spec.src_gpu, spec.dst_gpu}})
        out["gpus"] = names
        out["torch"] = torch.__version__
    return {**evidence_labels(label or default_platform(names)), **out}


def evaluate_goals(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Best path vs raw copy, per UCX configuration and layout, with the project's targets."""
    block = doc["spec"]["shape_block_bytes"]
    raw = {r["bytes"]: r for c in doc["configs"] for r in c["raw"]}
    goals = []
    for cfg in doc["configs"]:
        for s in cfg["series"]:
            if "error" in s:
                continue
            one_block = s["case"] == "kv-blocks" and s["blocks"] == 1 and block in raw
            if s["path"] in ("best", "device") and one_block:
                ratio = s["p50_us"] / raw[block]["p50_us"]
                goals.append(
                    {
                        "goal": f"one KV block, {s['path']} path p50 <= 2 x raw copy p50",
                        "config": cfg["name"],
                        "layout": s["layout"],
                        "best_p50_us": s["p50_us"],
                        "raw_p50_us": raw[block]["p50_us"],
                        "ratio": round(ratio, 2),
                        "met": ratio <= 2.0,
                    }
                )
            if (
                s["path"] == "best"
                and s["case"] == "contiguous"
                and s["bytes"] >= 256 * MiB
                and s["bytes"] in raw
            ):
                frac = s["gbps_p50"] / raw[s["bytes"]]["gbps_p50"]
                goals.append(
                    {
                        "goal": ">= 256 MiB single transfer, best path >= 90% of raw copy bandwidth",
                        "config": cfg["name"],
                        "layout": f"contiguous, {s['lanes']} lane(s)",
                        "best_gbps": s["gbps_p50"],
                        "raw_gbps": raw[s["bytes"]]["gbps_p50"],
                        "ratio": round(frac, 3),
                        "met": frac >= 0.9,
                    }
                )
    return goals


def run_bench(
    spec: BenchSpec, label: str | None = None, progress: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """`progress` gets the document after every configuration, so a run cut short still leaves figures."""
    started = time.time()
    spec_doc = asdict(spec)
    spec_doc["shape_block_bytes"] = spec.shape.block_bytes
    spec_doc["shape_chunk_bytes"] = spec.shape.chunk_bytes
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        **_context(spec, label),
        "spec": spec_doc,
        "notes": [
            "times: wall clock on the initiator, submission to completion; raw GPU copies: CUDA events",
            "every series zeroes the target first and compares a SHA-256 of the written ranges afterwards",
            "multi-block series use consecutive block ids on both sides: coalescing can merge across blocks",
            "raw copy: one contiguous copy of the same number of bytes; wall_p50_us adds launch and wait",
            "device path (when built): one CUDA kernel per transfer through NIXL's device API, "
            "timed from the launch to the end of a stream synchronize",
        ],
        "configs": [],
        "complete": False,
    }
    for i, ucx in enumerate(spec.ucx):
        doc["configs"].append(_run_pair(spec, ucx, with_raw=(i == 0)))
        doc["complete"] = i == len(spec.ucx) - 1
        doc["duration_s"] = round(time.time() - started, 1)
        doc["goals"] = evaluate_goals(doc)
        if progress is not None:
            progress(doc)
    return doc


def write_json(doc: dict[str, Any], path: Path) -> None:
    from atomdyn_core.atomic import atomic_write_text

    atomic_write_text(path, sanitized_json(doc))


def format_table(doc: dict[str, Any]) -> str:
    lines = [f"platform: {doc['platform']}   backend: {doc.get('backend')}"]
    head = f"{'config':<14}{'case':<11}{'layout':<17}{'blk':>4}{'path':>8}{'lane':>5}{'desc':>6}"
    head += f"{'bytes':>11}{'cold_us':>10}{'p50_us':>9}{'p99_us':>9}{'GB/s':>8} ok"
    lines.append(head)
    for cfg in doc["configs"]:
        for s in cfg["series"] + cfg["raw"]:
            if "error" in s:
                lines.append(
                    f"{cfg['name']:<14}{s['case']:<11}{s['layout']:<17}{s['path']:>8} ERROR {s['error']}"
                )
                continue
            ok = "y" if s.get("verified", True) else "N"
            lines.append(
                f"{cfg['name']:<14}{s['case']:<11}{s['layout']:<17}{s.get('blocks', 0):>4}{s['path']:>8}"
                f"{s.get('lanes', ''):>5}{s['descriptors']:>6}{s['bytes']:>11}{s['cold_us']:>10.1f}"
                f"{s['p50_us']:>9.1f}{s['p99_us']:>9.1f}{s['gbps_p50']:>8.2f} {ok}"
            )
    for g in doc["goals"]:
        verdict = "MET" if g["met"] else "NOT MET"
        lines.append(f"goal [{g['config']}, {g['layout']}]: {g['goal']}: ratio {g['ratio']} -> {verdict}")
    return "\n".join(lines)
