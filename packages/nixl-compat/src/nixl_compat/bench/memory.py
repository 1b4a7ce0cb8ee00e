"""Buffers the bench registers with NIXL: numpy in DRAM, torch CUDA tensors in VRAM."""

from __future__ import annotations

import hashlib
import mmap
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from nixl_compat._torch import import_torch
from nixl_compat.bench.layout import Descs


class Buffer(Protocol):
    mem_type: str  # "DRAM" or "VRAM", NIXL's names
    addr: int
    nbytes: int
    dev_id: int

    def fill(self, seed: int) -> None: ...
    def zero(self) -> None: ...
    def digest(self, descs: Descs) -> str: ...
    def sync(self) -> None: ...


HUGE_PAGE = 2 << 20


def huge_page_array(nbytes: int) -> tuple[mmap.mmap, npt.NDArray[np.uint8]]:
    """Anonymous memory aligned to 2 MiB and advised for transparent huge pages, every page touched.

    Cross-process copies (UCX's cma transport) pin the target's pages on every transfer; 2 MiB pages make that
    512 times fewer pages. The raw-copy reference uses the same memory, so the comparison stays fair.
    """
    size = -(-nbytes // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE)
    whole = np.frombuffer(region, dtype=np.uint8)
    start = (-int(whole.ctypes.data)) % HUGE_PAGE
    array = whole[start : start + nbytes]
    array.fill(0)  # fault every page in now, not during timing
    return region, array


class HostBuffer:
    mem_type = "DRAM"
    dev_id = 0

    def __init__(self, nbytes: int) -> None:
        self._region, self.array = huge_page_array(nbytes)
        self.addr = int(self.array.ctypes.data)
        self.nbytes = nbytes

    def fill(self, seed: int) -> None:
        self.array[:] = np.random.default_rng(seed).integers(0, 256, self.nbytes, dtype=np.uint8)

    def zero(self) -> None:
        self.array.fill(0)

    def digest(self, descs: Descs) -> str:
        h = hashlib.sha256()
        for off, length in descs.tolist():
            h.update(self.array[off : off + length].tobytes())
        return h.hexdigest()

    def sync(self) -> None:
        return None


class CudaBuffer:
    mem_type = "VRAM"

    def __init__(self, nbytes: int, device: int) -> None:
        torch = import_torch()

        self._torch: Any = torch
        self.tensor: Any = torch.zeros(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
        self.addr = int(self.tensor.data_ptr())
        self.nbytes = nbytes
        self.dev_id = device
        torch.cuda.synchronize(device)

    def fill(self, seed: int) -> None:
        gen = self._torch.Generator(device=self.tensor.device).manual_seed(seed)
        noise = self._torch.randint(
            0, 256, (self.nbytes,), generator=gen, dtype=self._torch.uint8, device=self.tensor.device
        )
        self.tensor.copy_(noise)
        self.sync()

    def zero(self) -> None:
        self.tensor.zero_()
        self.sync()

    def digest(self, descs: Descs) -> str:
        h = hashlib.sha256()
        for off, length in descs.tolist():
            h.update(self.tensor[off : off + length].cpu().numpy().tobytes())
        return h.hexdigest()

    def sync(self) -> None:
        self._torch.cuda.synchronize(self.dev_id)


def init_device(device: str, gpu: int) -> None:
    """Make `gpu` current and its CUDA context exist before a NIXL agent starts (UCX binds to it)."""
    if device == "cuda":
        torch = import_torch()

        torch.cuda.set_device(gpu)
        torch.zeros(1, device=f"cuda:{gpu}")
        torch.cuda.synchronize(gpu)


def make_buffer(device: str, nbytes: int, gpu: int) -> Buffer:
    if device == "cpu":
        return HostBuffer(nbytes)
    if device == "cuda":
        return CudaBuffer(nbytes, gpu)
    raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def raw_copy_times(
    device: str, nbytes: int, src_gpu: int, dst_gpu: int, iters: int
) -> tuple[list[float], list[float]]:
    """Seconds per plain copy of nbytes: numpy copy in DRAM; torch copy_ between devices.

    Returns (reference times, wall-clock times): on GPU the reference is CUDA-event time (device only),
    the wall clock adds the launch and the host's wait, which every NIXL figure includes.
    """
    if device == "cpu":
        src, dst = HostBuffer(nbytes), HostBuffer(nbytes)
        src.fill(1)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter_ns()
            np.copyto(dst.array, src.array)
            times.append((time.perf_counter_ns() - t0) / 1e9)
        if not np.array_equal(src.array, dst.array):
            raise RuntimeError("raw copy: destination differs from source")
        return times, times
    torch = import_torch()

    s, d = CudaBuffer(nbytes, src_gpu), CudaBuffer(nbytes, dst_gpu)
    s.fill(1)
    with torch.cuda.device(src_gpu):
        out, wall = cuda_event_times(
            lambda: d.tensor.copy_(s.tensor, non_blocking=True), iters, torch.cuda.current_stream(src_gpu)
        )
    d.sync()
    if not torch.equal(s.tensor.cpu(), d.tensor.cpu()):
        raise RuntimeError("raw copy: destination differs from source")
    return out, wall


def cuda_event_times(
    fn: Callable[[], object], iters: int, stream: Any = None
) -> tuple[list[float], list[float]]:
    """Seconds per call of `fn`: CUDA-event time on `stream` (the current one by default), and the wall
    clock from before the start event to the end event's completion (launch plus the host's wait)."""
    torch = import_torch()
    out, wall = [], []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter_ns()
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        wall.append((time.perf_counter_ns() - t0) / 1e9)
        out.append(start.elapsed_time(end) / 1e3)
    return out, wall
