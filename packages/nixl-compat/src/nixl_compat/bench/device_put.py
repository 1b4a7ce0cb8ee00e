"""The bench's GPU-initiated path: one kernel WRITEs a descriptor list through NIXL's device API.

NIXL 1.5.1 exposes memory views (`prep_mem_view`) that a CUDA kernel passes to `nixlPut`; over UCX's
cuda_ipc each put is a warp's copy into the peer GPU's memory, so a 72-descriptor KV block is one kernel
launch instead of 72 copy-engine operations. The kernel is ours (scripts/gpu/kv_device_put.cu), built on the
GPU machine against NIXL's and UCX's device headers (scripts/gpu/build_device_put.sh);
NIXL_COMPAT_DEVICE_PUT_LIB names the built library. Without it the bench has no "device" path.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import numpy as np

from nixl_compat._torch import import_torch

LIB_ENV = "NIXL_COMPAT_DEVICE_PUT_LIB"
SLICE_BYTES = 32 * 1024  # one warp's share: a 32 KiB KV chunk stays one put, a 2.25 MiB range gets 72 warps


def slice_plan(lengths: np.ndarray[Any, Any], slice_bytes: int = SLICE_BYTES) -> np.ndarray[Any, Any]:
    """Rows (view index, offset, length) cutting each descriptor into pieces of at most slice_bytes."""
    if slice_bytes <= 0:
        raise ValueError(f"slice size must be positive, got {slice_bytes}")
    rows = [
        (i, off, min(slice_bytes, int(n) - off))
        for i, n in enumerate(lengths.tolist())
        for off in range(0, int(n), slice_bytes)
    ]
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def device_put_lib() -> ctypes.CDLL | None:
    path = os.environ.get(LIB_ENV)
    if not path:
        return None
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{LIB_ENV}={path}: no such file (build it with scripts/gpu/build_device_put.sh)"
        )
    lib = ctypes.CDLL(path)
    fn = lib.kv_device_put
    fn.restype = ctypes.c_int
    fn.argtypes = [
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_uint,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    return lib


def device_put_times(
    agent: Any,
    lib: ctypes.CDLL,
    local_rows: np.ndarray[Any, Any],
    remote_rows: list[tuple[int, int, int, str]],
    gpu: int,
    n: int,
    timeout_s: float,
) -> list[float]:
    """Seconds per transfer, launch to stream synchronize; raises if any warp's put failed."""
    torch = import_torch()
    local = agent.get_xfer_descs(local_rows, "VRAM")
    remote = agent.get_remote_descs(remote_rows, "VRAM")
    local_view = agent.prep_mem_view(local)
    remote_view = agent.prep_mem_view(remote)
    try:
        device = torch.device(f"cuda:{gpu}")
        plan_rows = slice_plan(local_rows[:, 1].astype(np.int64))
        plan = torch.tensor(np.ascontiguousarray(plan_rows.T), dtype=torch.int64, device=device)
        errors = torch.zeros(1, dtype=torch.int32, device=device)
        stream = torch.cuda.Stream(device)
        count = len(plan_rows)
        times = []
        deadline = time.monotonic() + timeout_s
        for _ in range(n):
            t0 = time.perf_counter_ns()
            rc = lib.kv_device_put(
                local_view, remote_view, count, plan.data_ptr(), errors.data_ptr(), stream.cuda_stream
            )
            if rc != 0:
                raise RuntimeError(f"device put: kernel launch failed with CUDA error {rc}")
            stream.synchronize()
            times.append((time.perf_counter_ns() - t0) / 1e9)
            if time.monotonic() > deadline:
                raise TimeoutError(f"device put: {n} transfers not done within {timeout_s:.0f} s")
        failed = int(errors.item())
        if failed:
            raise RuntimeError(f"device put: {failed} of {count} warp puts reported an error")
        return times
    finally:
        agent.release_mem_view(local_view)
        agent.release_mem_view(remote_view)
