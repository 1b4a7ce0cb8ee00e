"""One side of the cross-node NIXL probe: KV blocks read between two nodes before any model is loaded.

The target (on the prefill node) owns a KV cache in vLLM's layer-major layout (one registered region per
layer's K and V tensor, as vLLM's NixlConnector registers them) and one large flat buffer, filled with seeded
bytes; it publishes its NIXL agent metadata, the buffers' addresses and the SHA-256 of what will be read
through the run's etcd, then keeps its agent alive until the initiator reports. The initiator (on the decode
node) READs from it, as vLLM's decode worker pulls KV from the prefill: the whole cache's descriptor lists
prepared once (vLLM's path), one prepped transfer per request of 1, 4, ... blocks, then the large buffer in
one descriptor. Every series is checked byte for byte against the target's digests. Both write a JSON report;
the process exits 0 only when every byte arrived.

Everything the probe needs comes from its environment and arguments: it runs in the worker's runtime with the
worker's environment (UCX_TLS, UCX_NET_DEVICES, the GID index, the dma-buf helper's preload, the NIXL opt-in).
"""

from __future__ import annotations

import base64
import importlib
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nixl_compat.bench import layout as L
from nixl_compat.bench.memory import Buffer, init_device, make_buffer
from nixl_compat.bench.stats import summarize
from nixl_compat.crossnode.etcd import Etcd
from nixl_compat.crossnode.linerate import line_rate

LAYOUT: L.Layout = "layer-major"  # vLLM's NixlConnector registers one region per layer's K and V
TARGET_KEY = "target"
RESULT_KEY = "initiator"


@dataclass(frozen=True)
class ProbeSpec:
    role: str  # "target" | "initiator"
    key_prefix: str  # the etcd prefix of this pair's keys
    shape: L.KVShape
    blocks: int = 64  # blocks in each side's cache
    transfer_blocks: tuple[int, ...] = (1, 4, 16)  # blocks per READ, one series each
    iterations: int = 20  # timed READs per series (after one warm-up)
    large_bytes: int = 64 << 20
    device: str = "cpu"  # "cpu" (DRAM) or "cuda" (VRAM; ROCm's torch answers to cuda too)
    gpu: int = 0
    timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if self.role not in ("target", "initiator"):
            raise ValueError(f"role must be target or initiator, got {self.role!r}")
        if (
            not self.transfer_blocks
            or min(self.transfer_blocks) < 1
            or max(self.transfer_blocks) > self.blocks
        ):
            raise ValueError(
                f"transfer blocks {self.transfer_blocks} must lie in 1..{self.blocks} (the cache)"
            )
        if self.iterations < 1 or self.large_bytes < 1 or self.timeout_s <= 0:
            raise ValueError("iterations, large bytes and the timeout must be positive")


@dataclass
class Report:
    role: str
    host: str
    ok: bool = False
    stage: str = "start"  # how far it got: start, metadata, agent, connect, transfer, large, done
    error: str | None = None
    agent: str = ""
    environment: dict[str, str] = field(default_factory=dict)
    series: list[dict[str, Any]] = field(default_factory=list)
    large: dict[str, Any] | None = None
    line_rate: dict[str, Any] | None = None
    verified: bool = False
    elapsed_s: float = 0.0


def _environment() -> dict[str, str]:
    """The variables that decide the KV path, as this process got them (the helper's preload included)."""
    keep = ("UCX_", "NIXL_", "LD_PRELOAD", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "VLLM_NIXL_")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(keep)}


def _start_agent(name: str) -> Any:
    api: Any = importlib.import_module("rixl._api")  # the shim: vLLM's own import path
    return api.nixl_agent(name, api.nixl_agent_config(backends=["UCX"]))


def _cache_regions(spec: ProbeSpec) -> L.Descs:
    return L.regions(spec.shape, LAYOUT, spec.blocks)


def _register(agent: Any, buf: Buffer, regions: L.Descs) -> Any:
    rows = [(buf.addr + off, length, buf.dev_id, "") for off, length in regions.tolist()]
    return agent.register_memory(rows, buf.mem_type)


def _rows(base: int, dev: int, descs: L.Descs) -> Any:
    arr = np.empty((len(descs), 3), dtype=np.uint64)
    arr[:, 0] = descs[:, 0] + base
    arr[:, 1] = descs[:, 1]
    arr[:, 2] = dev
    return arr


def _block_ids(n: int) -> list[int]:
    return list(range(n))


def _flat(nbytes: int) -> L.Descs:
    return np.array([[0, nbytes]], dtype=np.int64)


class _Side:
    def __init__(self, spec: ProbeSpec, report: Report) -> None:
        self.spec, self.report = spec, report
        self.etcd = Etcd.from_env()
        init_device(spec.device, spec.gpu)
        self.cache = make_buffer(spec.device, L.cache_bytes(spec.shape, spec.blocks), spec.gpu)
        self.large = make_buffer(spec.device, spec.large_bytes, spec.gpu)
        report.stage = "agent"
        report.agent = f"nixl-probe-{spec.role}-{report.host}-{os.getpid()}"
        self.agent = _start_agent(report.agent)
        self.regs = [
            _register(self.agent, self.cache, _cache_regions(spec)),
            _register(self.agent, self.large, _flat(spec.large_bytes)),
        ]

    def key(self, name: str) -> str:
        return self.spec.key_prefix + name

    def close(self) -> None:
        for reg in self.regs:
            self.agent.deregister_memory(reg)


def run_target(spec: ProbeSpec, report: Report) -> None:
    side = _Side(spec, report)
    side.cache.fill(1)
    side.large.fill(2)
    digests = {
        str(n): side.cache.digest(L.block_descs(spec.shape, LAYOUT, spec.blocks, _block_ids(n)))
        for n in spec.transfer_blocks
    }
    digests["large"] = side.large.digest(_flat(spec.large_bytes))
    hello = {
        "agent": report.agent,
        "host": report.host,
        "metadata": base64.b64encode(side.agent.get_agent_metadata()).decode(),
        "mem_type": side.cache.mem_type,
        "cache": [side.cache.addr, side.cache.nbytes, side.cache.dev_id],
        "large": [side.large.addr, side.large.nbytes, side.large.dev_id],
        "digests": digests,
    }
    report.stage = "metadata"
    side.etcd.put(side.key(TARGET_KEY), json.dumps(hello))
    # The initiator's READs need this agent alive (over TCP its worker answers them): wait for its report.
    answer = json.loads(side.etcd.wait_for(side.key(RESULT_KEY), "report from the initiator", spec.timeout_s))
    report.stage = "done"
    report.verified = bool(answer.get("verified"))
    report.ok = bool(answer.get("ok"))
    if not report.ok:
        report.error = f"the initiator failed: {answer.get('error')}"
    side.close()


class _Initiator:
    def __init__(self, spec: ProbeSpec, report: Report) -> None:
        self.spec, self.report = spec, report
        self.side = _Side(spec, report)
        report.stage = "metadata"
        hello = json.loads(
            self.side.etcd.wait_for(self.side.key(TARGET_KEY), "target's metadata", spec.timeout_s)
        )
        self.hello = hello
        report.stage = "connect"
        self.peer: str = self.side.agent.add_remote_agent(base64.b64decode(hello["metadata"]))

    def wait(self, handle: Any) -> None:
        state = self.side.agent.transfer(handle)
        deadline = time.monotonic() + self.spec.timeout_s
        while state == "PROC":
            if time.monotonic() > deadline:
                raise TimeoutError(f"a READ did not complete within {self.spec.timeout_s:.0f} s")
            state = self.side.agent.check_xfer_state(handle)
        if state != "DONE":
            raise RuntimeError(f"NIXL transfer ended in state {state}")

    def read_series(self, local: Any, remote: Any, ids: Any, runs: int) -> list[float]:
        times = []
        for _ in range(runs):
            start = time.perf_counter_ns()
            handle = self.side.agent.make_prepped_xfer("READ", local, ids, remote, ids)
            self.wait(handle)
            times.append((time.perf_counter_ns() - start) / 1e9)
            self.side.agent.release_xfer_handle(handle)
        return times

    def blocks(self) -> None:
        spec, side = self.spec, self.side
        every = L.block_descs(spec.shape, LAYOUT, spec.blocks, _block_ids(spec.blocks))
        mem = side.cache.mem_type
        base, _, dev = self.hello["cache"]
        local = side.agent.prep_xfer_dlist(
            "NIXL_INIT_AGENT", _rows(side.cache.addr, side.cache.dev_id, every), mem
        )
        remote = side.agent.prep_xfer_dlist(self.peer, _rows(int(base), int(dev), every), mem)
        self.report.stage = "transfer"
        per_block = spec.shape.chunks_per_block
        for n in spec.transfer_blocks:
            side.cache.zero()
            ids = np.arange(n * per_block, dtype=np.int32)  # vLLM's order: block by block, layer by layer
            times = self.read_series(local, remote, ids, spec.iterations + 1)
            nbytes = n * spec.shape.block_bytes
            row = summarize(times[:1], times[1:], nbytes)
            got = side.cache.digest(L.block_descs(spec.shape, LAYOUT, spec.blocks, _block_ids(n)))
            row.update(
                blocks=n,
                bytes=nbytes,
                descriptors=n * per_block,
                verified=got == self.hello["digests"][str(n)],
            )
            row["p50_us_per_block"] = round(row["p50_us"] / n, 2)
            self.report.series.append(row)
            if not row["verified"]:
                raise RuntimeError(f"the {n}-block READ delivered bytes that differ from the target's")
        side.agent.release_dlist_handle(local)
        side.agent.release_dlist_handle(remote)

    def large(self) -> None:
        spec, side = self.spec, self.side
        self.report.stage = "large"
        base, nbytes, dev = self.hello["large"]
        size = min(int(nbytes), spec.large_bytes)
        mem = side.large.mem_type
        local = side.agent.prep_xfer_dlist(
            "NIXL_INIT_AGENT", _rows(side.large.addr, side.large.dev_id, _flat(size)), mem
        )
        remote = side.agent.prep_xfer_dlist(self.peer, _rows(int(base), int(dev), _flat(size)), mem)
        side.large.zero()
        runs = max(2, min(spec.iterations, 5) + 1)
        times = self.read_series(local, remote, np.arange(1, dtype=np.int32), runs)
        row = summarize(times[:1], times[1:], size)
        row.update(bytes=size, verified=side.large.digest(_flat(size)) == self.hello["digests"]["large"])
        self.report.large = row
        side.agent.release_dlist_handle(local)
        side.agent.release_dlist_handle(remote)
        if not row["verified"]:
            raise RuntimeError("the large READ delivered bytes that differ from the target's")

    def close(self) -> None:
        self.side.agent.remove_remote_agent(self.peer)
        self.side.close()


def run_initiator(spec: ProbeSpec, report: Report) -> None:
    initiator: _Initiator | None = None
    try:
        initiator = _Initiator(spec, report)
        initiator.blocks()
        initiator.large()
        report.verified = True
        report.ok = True
        report.stage = "done"
        peer = str(initiator.hello.get("host") or "") or None
        report.line_rate = line_rate(
            os.environ.get("UCX_NET_DEVICES", ""), peer, tls=os.environ.get("UCX_TLS", "")
        )
        gbit = report.line_rate.get("gbit")
        if gbit and report.large:
            report.line_rate["large_fraction"] = round(report.large["gbps_p50"] * 8 / gbit, 4)
    except Exception as exc:  # named in the report the target waits for, then in this side's own
        report.error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        summary = {"ok": report.ok, "verified": report.verified, "error": report.error, "stage": report.stage}
        if report.error is None and not report.ok:
            summary["error"] = f"stopped at {report.stage} (see its report)"
        if initiator is not None or report.stage != "start":
            try:
                Etcd.from_env().put(spec.key_prefix + RESULT_KEY, json.dumps(summary))
            except Exception as exc:  # the target then times out, naming the missing report
                print(f"nixl-probe: could not publish the report: {exc}", file=sys.stderr)
        if initiator is not None:
            initiator.close()


def run(spec: ProbeSpec, out: Path | None) -> int:
    """Run one side; write its report (atomically) to ``out`` and stdout's last line; 0 when verified."""
    host = os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST") or socket.gethostname()
    report = Report(role=spec.role, host=host, environment=_environment())
    start = time.monotonic()
    try:
        (run_target if spec.role == "target" else run_initiator)(spec, report)
    except Exception as exc:  # every failure is the report's, named with the stage it stopped at
        report.ok = False
        report.error = report.error or f"{type(exc).__name__}: {exc}"
    report.elapsed_s = round(time.monotonic() - start, 3)
    text = json.dumps(asdict(report), indent=2) + "\n"
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out)
    verdict = "verified" if report.ok else f"FAILED at {report.stage}: {report.error}"
    print(f"nixl-probe {spec.role}: {verdict}", flush=True)
    return 0 if report.ok else 1
