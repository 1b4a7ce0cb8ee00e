"""The two bench processes: a target that owns the destination cache, an initiator that WRITEs into it.

Both import NIXL through the shim (`rixl._api`), so the bench exercises the same objects vLLM would get.
Metadata and buffer addresses travel over a pipe, as vLLM's side channel carries them over ZMQ.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from nixl_compat.bench import layout as L
from nixl_compat.bench.device_put import device_put_lib, device_put_times
from nixl_compat.bench.memory import Buffer, init_device, make_buffer, raw_copy_times
from nixl_compat.bench.spec import BenchSpec, UcxConfig
from nixl_compat.bench.stats import summarize

Series = dict[str, Any]


def _recv(conn: Connection, what: str, timeout_s: float) -> Any:
    if not conn.poll(timeout_s):
        raise TimeoutError(f"bench: no {what} within {timeout_s:.0f} s")
    return conn.recv()


def _buffers(spec: BenchSpec, gpu: int) -> dict[str, Buffer]:
    cache = L.cache_bytes(spec.shape, spec.num_blocks)
    out: dict[str, Buffer] = {lay: make_buffer(spec.device, cache, gpu) for lay in L.LAYOUTS}
    out["flat"] = make_buffer(spec.device, max(spec.sizes), gpu)
    return out


def _regions(spec: BenchSpec, name: str, buf: Buffer) -> L.Descs:
    if name == "flat":
        return np.array([[0, buf.nbytes]], dtype=np.int64)
    return L.regions(spec.shape, name, spec.num_blocks)  # type: ignore[arg-type]


def _register(agent: Any, spec: BenchSpec, bufs: dict[str, Buffer]) -> list[Any]:
    regs = []
    for name, buf in bufs.items():
        rows = [
            (buf.addr + off, length, buf.dev_id, "") for off, length in _regions(spec, name, buf).tolist()
        ]
        regs.append(agent.register_memory(rows, buf.mem_type))
    return regs


def _start_agent(role: str, ucx: UcxConfig) -> Any:
    for var, value in ucx.env:
        os.environ[var] = value  # before the agent exists: UCX reads its environment at context creation
    api: Any = importlib.import_module("rixl._api")  # the shim: vLLM's own import path
    nixl_agent, nixl_agent_config = api.nixl_agent, api.nixl_agent_config

    config = nixl_agent_config(enable_prog_thread=ucx.progress_thread, backends=[])
    agent = nixl_agent(f"{role}-{os.getpid()}", config)
    agent.create_backend("UCX", ucx.backend_params())  # the config's num_threads cannot pass split_batch_size
    return agent


def target_main(conn: Connection, spec: BenchSpec, ucx: UcxConfig) -> None:
    init_device(spec.device, spec.dst_gpu)
    agent = _start_agent("target", ucx)
    bufs = _buffers(spec, spec.dst_gpu)
    regs = _register(agent, spec, bufs)
    conn.send(
        {
            "metadata": agent.get_agent_metadata(),
            "buffers": {n: (b.addr, b.nbytes, b.dev_id) for n, b in bufs.items()},
        }
    )
    while True:
        if not ucx.progress_thread:
            # Nobody else drives this agent's UCX worker (connection wire-up needs it): poll it meanwhile.
            deadline = time.monotonic() + spec.timeout_s
            while not conn.poll(0.0005):
                agent.get_new_notifs()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"bench: no command from the initiator within {spec.timeout_s:.0f} s")
        msg = _recv(conn, "command from the initiator", spec.timeout_s)
        if msg[0] == "zero":
            bufs[msg[1]].zero()
            conn.send("ok")
        elif msg[0] == "digest":
            conn.send(bufs[msg[1]].digest(msg[2]))
        elif msg[0] == "stop":
            break
        else:
            raise ValueError(f"bench target: unknown command {msg[0]!r}")
    for reg in regs:
        agent.deregister_memory(reg)
    conn.send("stopped")


class Initiator:
    def __init__(self, conn: Connection, spec: BenchSpec, ucx: UcxConfig) -> None:
        self.conn, self.spec = conn, spec
        init_device(spec.device, spec.src_gpu)
        self.agent = _start_agent("initiator", ucx)
        self.bufs = _buffers(spec, spec.src_gpu)
        for seed, buf in enumerate(self.bufs.values(), start=1):
            buf.fill(seed)
        self.regs = _register(self.agent, spec, self.bufs)
        hello = _recv(conn, "metadata from the target", spec.timeout_s)
        self.peer: str = self.agent.add_remote_agent(hello["metadata"])
        self.remote: dict[str, tuple[int, int, int]] = hello["buffers"]
        self.prepared: dict[str, tuple[Any, Any, float]] = {}
        self.device_lib = device_put_lib() if spec.device == "cuda" else None

    # descriptor plumbing ------------------------------------------------------------------------------
    def _rows(self, name: str, descs: L.Descs, remote: bool) -> Any:
        base, _, dev = self.remote[name] if remote else (self.bufs[name].addr, 0, self.bufs[name].dev_id)
        arr = np.empty((len(descs), 3), dtype=np.uint64)
        arr[:, 0] = descs[:, 0] + base
        arr[:, 1] = descs[:, 1]
        arr[:, 2] = dev
        return arr

    def _wait(self, handle: Any, state: str) -> None:
        deadline = time.monotonic() + self.spec.timeout_s
        while state == "PROC":
            state = self.agent.check_xfer_state(handle)
            if state == "PROC" and time.monotonic() > deadline:
                raise TimeoutError(f"bench: transfer not complete within {self.spec.timeout_s:.0f} s")
        if state != "DONE":
            raise RuntimeError(f"bench: NIXL transfer ended in state {state}")

    def _prep(self, name: str, descs: L.Descs, dst: L.Descs) -> tuple[Any, Any]:
        mem = self.bufs[name].mem_type
        local = self.agent.prep_xfer_dlist("NIXL_INIT_AGENT", self._rows(name, descs, False), mem)
        remote = self.agent.prep_xfer_dlist(self.peer, self._rows(name, dst, True), mem)
        return local, remote

    # the three ways to move the same bytes ------------------------------------------------------------
    def naive(self, name: str, src: L.Descs, dst: L.Descs, n: int) -> list[float]:
        """What most examples do: build lists, initialize_xfer, post, poll, release, every time."""
        mem, times = self.bufs[name].mem_type, []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            lo = self.agent.get_xfer_descs(self._rows(name, src, False), mem)
            re = self.agent.get_xfer_descs(self._rows(name, dst, True), mem)
            h = self.agent.initialize_xfer("WRITE", lo, re, self.peer)
            self._wait(h, self.agent.transfer(h))
            times.append((time.perf_counter_ns() - t0) / 1e9)
            self.agent.release_xfer_handle(h)
        return times

    def best(self, name: str, src: L.Descs, dst: L.Descs, n: int) -> list[float]:
        """Fewest descriptors (adjacent pairs coalesced), prepared once, one handle re-posted."""
        t0 = time.perf_counter_ns()
        local, remote = self._prep(name, src, dst)
        ids = np.arange(len(src), dtype=np.int32)
        h = self.agent.make_prepped_xfer("WRITE", local, ids, remote, ids)
        times = []
        for _ in range(n):
            self._wait(h, self.agent.transfer(h))
            times.append((time.perf_counter_ns() - t0) / 1e9)
            t0 = time.perf_counter_ns()
        self.agent.release_xfer_handle(h)
        self.agent.release_dlist_handle(local)
        self.agent.release_dlist_handle(remote)
        return times

    def device(self, name: str, src: L.Descs, dst: L.Descs, n: int) -> list[float]:
        """GPU-initiated: one kernel, a warp's nixlPut per 32 KiB slice (NIXL's device API)."""
        assert self.device_lib is not None
        remote = [(int(a), int(b), int(c), self.peer) for a, b, c in self._rows(name, dst, True).tolist()]
        rows = self._rows(name, src, False)
        return device_put_times(
            self.agent, self.device_lib, rows, remote, self.spec.src_gpu, n, self.spec.timeout_s
        )

    # one measured, verified series ----------------------------------------------------------------------
    def _target(self, *msg: Any) -> Any:
        self.conn.send(msg)
        return _recv(self.conn, f"target's answer to {msg[0]}", self.spec.timeout_s)

    def series(self, name: str, src: L.Descs, dst: L.Descs, run: Callable[[int], list[float]]) -> Series:
        nbytes = int(src[:, 1].sum())
        n = self.spec.iters_for(nbytes)
        self._target("zero", name)
        try:
            times = run(n + self.spec.warmup)
        except Exception as exc:  # one failed series is reported in the document; the others still run
            return {
                "buffer": name,
                "bytes": nbytes,
                "verified": False,
                "error": f"{type(exc).__name__}: {exc}",
            }
        expected = self.bufs[name].digest(src)
        verified = self._target("digest", name, dst) == expected
        if not verified:
            raise RuntimeError(f"bench: target content differs from the source after {name} transfers")
        out = summarize(times[:1], times[1 + self.spec.warmup :], nbytes)
        out.update(buffer=name, bytes=nbytes, verified=verified)
        return out

    def prepare_cache(self, lay: L.Layout) -> None:
        allb = list(range(self.spec.num_blocks))
        descs = L.block_descs(self.spec.shape, lay, self.spec.num_blocks, allb)
        t0 = time.perf_counter_ns()
        local, remote = self._prep(lay, descs, descs)
        self.prepared[lay] = (local, remote, (time.perf_counter_ns() - t0) / 1e3)

    def run(self) -> list[Series]:
        spec, shape, out = self.spec, self.spec.shape, []
        per_block = shape.chunks_per_block
        for lay in L.LAYOUTS:
            self.prepare_cache(lay)
            for nb in spec.block_counts:
                src_ids = list(range(nb))
                dst_ids = [spec.num_blocks - nb + i for i in range(nb)]
                src = L.block_descs(shape, lay, spec.num_blocks, src_ids)
                dst = L.block_descs(shape, lay, spec.num_blocks, dst_ids)
                idx_s = [b * per_block + r for b in src_ids for r in range(per_block)]
                idx_d = [b * per_block + r for b in dst_ids for r in range(per_block)]
                cs, cd = L.coalesce(src, dst, L.regions(shape, lay, spec.num_blocks))
                runs: list[tuple[str, int, Callable[[int], list[float]]]] = [
                    ("naive", len(src), partial(self.naive, lay, src, dst)),
                    ("prepped", len(src), partial(self.prepped, lay, idx_s, idx_d)),
                    ("best", len(cs), partial(self.best, lay, cs, cd)),
                ]
                if self.device_lib is not None:
                    runs.append(("device", len(cs), partial(self.device, lay, cs, cd)))
                for path, ndesc, fn in runs:
                    row: Series = {
                        "case": "kv-blocks",
                        "layout": lay,
                        "blocks": nb,
                        "path": path,
                        "descriptors": ndesc,
                    }
                    if path == "prepped":
                        row["prep_whole_cache_us"] = round(self.prepared[lay][2], 1)
                    out.append({**row, **self.series(lay, src, dst, fn)})
        for size in spec.sizes:
            src = np.array([[0, size]], dtype=np.int64)
            dst = np.array([[self.remote["flat"][1] - size, size]], dtype=np.int64)
            case: Series = {"case": "contiguous", "layout": "flat", "blocks": 0}
            naive = partial(self.naive, "flat", src, dst)
            out.append({**case, "path": "naive", "descriptors": 1, **self.series("flat", src, dst, naive)})
            for lanes in spec.lanes:
                best = partial(
                    self.best, "flat", L.split(0, size, lanes), L.split(int(dst[0, 0]), size, lanes)
                )
                row = {**case, "path": "best", "lanes": lanes, "descriptors": lanes}
                out.append({**row, **self.series("flat", src, dst, best)})
        return out

    def prepped(self, name: str, src_idx: list[int], dst_idx: list[int], n: int) -> list[float]:
        """vLLM's path: lists prepared once for the whole cache; make_prepped_xfer per transfer."""
        local, remote, _ = self.prepared[name]
        si, di = np.asarray(src_idx, dtype=np.int32), np.asarray(dst_idx, dtype=np.int32)
        times = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            h = self.agent.make_prepped_xfer("WRITE", local, si, remote, di)
            self._wait(h, self.agent.transfer(h))
            times.append((time.perf_counter_ns() - t0) / 1e9)
            self.agent.release_xfer_handle(h)
        return times

    def close(self) -> None:
        for local, remote, _ in self.prepared.values():
            self.agent.release_dlist_handle(local)
            self.agent.release_dlist_handle(remote)
        self._target("stop")
        self.agent.remove_remote_agent(self.peer)
        for reg in self.regs:
            self.agent.deregister_memory(reg)


def raw_series(spec: BenchSpec) -> list[Series]:
    """Plain copies of the same byte counts, the reference every NIXL figure is compared with."""
    counts = sorted({spec.shape.block_bytes * n for n in spec.block_counts} | set(spec.sizes))
    out = []
    for nbytes in counts:
        n = spec.iters_for(nbytes)
        times, wall = raw_copy_times(spec.device, nbytes, spec.src_gpu, spec.dst_gpu, n + spec.warmup)
        stats = summarize(times[:1], times[1 + spec.warmup :], nbytes)
        stats["wall_p50_us"] = summarize(wall[:1], wall[1 + spec.warmup :], nbytes)["p50_us"]
        out.append(
            {"case": "raw", "layout": "flat", "path": "raw", "descriptors": 1, "bytes": nbytes, **stats}
        )
    return out


def initiator_main(
    conn: Connection, result: Connection, spec: BenchSpec, ucx: UcxConfig, with_raw: bool
) -> None:
    try:
        init = Initiator(conn, spec, ucx)
        try:
            series = init.run()
        finally:
            init.close()
        result.send(("ok", {"series": series, "raw": raw_series(spec) if with_raw else []}))
    except Exception as exc:  # reported to the parent, which raises with the message
        result.send(("error", f"{type(exc).__name__}: {exc}"))
