"""What one vLLM KV block costs to copy GPU0 -> GPU1 without NIXL: the floor under the bench's figures.

One process, both GPUs (peer access), the bench's Qwen3-8B layer-major layout (72 chunks of 32 KiB, one per
layer and K|V). Each way of moving the same 2.25 MiB is timed with CUDA events (GPU time) and with the wall
clock from the first call to the end of a stream synchronize, p50 over --iters after warm-ups:

- one contiguous copy (torch's copy_, the bench's raw reference, and one driver call);
- 72 copy-engine copies, one call each (what UCX cuda_ipc does per descriptor without SGL);
- one cuMemcpyBatchAsync of the 72 chunks (what NIXL's SGL WRITE asks UCX cuda_ipc to do);
- one strided copy kernel over NVLink (torch's cross-device copy of a non-contiguous view: a gather kernel).

Content is checked after each series. Usage (GPU machine, repository root):
    PYTHONPATH=packages/nixl-compat/src:packages/core/src python3 scripts/gpu/kv_copy_floor.py --json out.json
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

LAYERS, CHUNK, NUM_BLOCKS = 36, 32 * 1024, 64
CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CUmemcpyAttributes(ctypes.Structure):
    _fields_ = [
        ("srcAccessOrder", ctypes.c_int),
        ("srcLocHint", CUmemLocation),
        ("dstLocHint", CUmemLocation),
        ("flags", ctypes.c_uint),
    ]


def driver_copies(torch: Any, dsts: list[int], srcs: list[int], sizes: list[int]) -> tuple[Any, Any]:
    """Two callables on torch's current stream: one cuMemcpyDtoDAsync per chunk, and one cuMemcpyBatchAsync.

    CUDA 13 exports the batch call as cuMemcpyBatchAsync_v2 (12.8 had a failIdx argument); it refuses the
    legacy NULL stream, so the caller runs everything on a stream of its own, as UCX does.
    """
    cuda = ctypes.CDLL("libcuda.so.1")
    one, many = cuda.cuMemcpyDtoDAsync_v2, cuda.cuMemcpyBatchAsync_v2
    one.restype = many.restype = ctypes.c_int
    one.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    n = len(dsts)
    d = (ctypes.c_uint64 * n)(*dsts)
    s = (ctypes.c_uint64 * n)(*srcs)
    z = (ctypes.c_size_t * n)(*sizes)
    attr = CUmemcpyAttributes(srcAccessOrder=CU_MEMCPY_SRC_ACCESS_ORDER_STREAM)
    idx = (ctypes.c_size_t * 1)(0)

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUresult {rc}")

    def per_chunk() -> None:
        stream = torch.cuda.current_stream().cuda_stream
        for i in range(n):
            check(one(dsts[i], srcs[i], sizes[i], stream), "cuMemcpyDtoDAsync_v2")

    def batch() -> None:
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        check(many(d, s, z, ctypes.c_size_t(n), ctypes.byref(attr), idx, ctypes.c_size_t(1), stream), "batch")

    return per_chunk, batch


def timed(fn: Callable[[], None], iters: int, warmup: int) -> dict[str, float]:
    from nixl_compat.bench.memory import cuda_event_times

    events, walls = cuda_event_times(fn, iters + warmup)
    gpu = [t * 1e6 for t in events[warmup:]]
    wall = [t * 1e6 for t in walls[warmup:]]
    return {
        "gpu_p50_us": round(statistics.median(gpu), 2),
        "wall_p50_us": round(statistics.median(wall), 2),
        "wall_p99_us": round(sorted(wall)[int(0.99 * (len(wall) - 1))], 2),
    }


def main() -> int:
    import torch

    from nixl_compat.evidence import default_platform, evidence_labels, sanitized_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if torch.cuda.device_count() < 2:
        raise SystemExit("kv_copy_floor: needs two GPUs")
    src_dev, dst_dev = torch.device("cuda:0"), torch.device("cuda:1")
    elems = CHUNK // 2  # bf16
    rows = 2 * LAYERS
    src = torch.randn(rows, NUM_BLOCKS, elems, device=src_dev).to(torch.bfloat16)
    dst = torch.zeros(rows, NUM_BLOCKS, elems, device=dst_dev, dtype=torch.bfloat16)
    flat_src = src.view(-1)[: rows * elems]
    flat_dst = dst.view(-1)[: rows * elems]
    sb, db = 0, NUM_BLOCKS - 1  # source block 0 into target block 63, as the bench does
    src_view, dst_view = src[:, sb, :], dst[:, db, :]  # 72 chunks at a stride of NUM_BLOCKS chunks
    chunk_src = [src[r, sb] for r in range(rows)]
    chunk_dst = [dst[r, db] for r in range(rows)]
    torch.cuda.set_device(src_dev)
    dst_view.copy_(src_view)  # the first cross-device copy enables peer access
    per_chunk, batch = driver_copies(
        torch,
        [t.data_ptr() for t in chunk_dst],
        [t.data_ptr() for t in chunk_src],
        [CHUNK] * rows,
    )
    one_copy, _ = driver_copies(torch, [flat_dst.data_ptr()], [flat_src.data_ptr()], [rows * CHUNK])
    series: dict[str, Callable[[], None]] = {
        "contiguous copy, 2.25 MiB (raw reference)": lambda: flat_dst.copy_(flat_src, non_blocking=True),
        "contiguous copy, one cuMemcpyDtoDAsync": one_copy,
        "72 copy-engine copies, one call each": per_chunk,
        "one cuMemcpyBatchAsync of 72 chunks": batch,
        "one strided copy kernel (gather over NVLink)": lambda: dst_view.copy_(src_view, non_blocking=True),
    }
    results = []
    stream = torch.cuda.Stream(src_dev)  # not the legacy NULL stream: the batch call refuses it
    for name, fn in series.items():
        dst.zero_()
        torch.cuda.synchronize(dst_dev)
        with torch.cuda.stream(stream):
            stats = timed(fn, args.iters, args.warmup)
        torch.cuda.synchronize(dst_dev)
        if name.startswith("contiguous"):
            ok = torch.equal(flat_dst.cpu(), flat_src.cpu())
        else:
            ok = torch.equal(dst_view.cpu(), src_view.cpu())
        results.append({"series": name, "bytes": rows * CHUNK, "verified": ok, **stats})
        print(f"{name:<48} gpu {stats['gpu_p50_us']:>8.2f} us  wall {stats['wall_p50_us']:>8.2f} us  ok={ok}")
    names = sorted({torch.cuda.get_device_name(i) for i in (0, 1)})
    doc = {
        "schema": "kv-copy-floor/1",
        **evidence_labels(default_platform(names)),
        "torch": torch.__version__,
        "layout": {"layers": LAYERS, "chunk_bytes": CHUNK, "num_blocks": NUM_BLOCKS, "chunks": rows},
        "iters": args.iters,
        "results": results,
    }
    if args.json:
        args.json.write_text(sanitized_json(doc))
    return 0 if all(r["verified"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
