"""Two NIXL agents in two processes, through `rixl._api`: WRITE a pattern, READ it back, compare.

Each process runs with UCX_PROTO_INFO=y and its output captured to a file, so the doctor can say which
transports and devices UCX really used for the bulk data, not which ones it might use.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from nixl_compat.bench.memory import Buffer, init_device, make_buffer

SIZE = 1 << 20


def _redirect(log: Path) -> None:
    """UCX writes its tables to the process's stdout: point fds 1 and 2 at a file."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _agent(role: str) -> Any:
    os.environ["UCX_PROTO_INFO"] = "y"
    api: Any = importlib.import_module("rixl._api")  # the shim: vLLM's own import path
    nixl_agent, nixl_agent_config = api.nixl_agent, api.nixl_agent_config

    return nixl_agent(f"selftest-{role}-{os.getpid()}", nixl_agent_config(backends=["UCX"]))


def _recv(conn: Connection, what: str, timeout_s: float) -> Any:
    if not conn.poll(timeout_s):
        raise TimeoutError(f"self-test: no {what} within {timeout_s:.0f} s")
    return conn.recv()


def _digest(buf: Buffer) -> str:
    import numpy as np

    return buf.digest(np.array([[0, buf.nbytes]], dtype=np.int64))


def target(conn: Connection, device: str, gpu: int, log: Path, timeout_s: float) -> None:
    _redirect(log)
    init_device(device, gpu)
    agent = _agent("target")
    buf = make_buffer(device, SIZE, gpu)
    reg = agent.register_memory([(buf.addr, buf.nbytes, buf.dev_id, "")], buf.mem_type)
    conn.send((agent.get_agent_metadata(), buf.addr, buf.dev_id))
    _recv(conn, "request for the target's digest", timeout_s)
    conn.send(_digest(buf))
    _recv(conn, "stop", timeout_s)
    agent.deregister_memory(reg)
    conn.send("stopped")


def _move(agent: Any, op: str, local: Any, remote: Any, peer: str, timeout_s: float) -> float:
    t0 = time.perf_counter()
    handle = agent.initialize_xfer(op, local, remote, peer)
    state = agent.transfer(handle)
    deadline = time.monotonic() + timeout_s
    while state == "PROC":
        if time.monotonic() > deadline:
            raise TimeoutError(f"self-test: {op} not complete within {timeout_s:.0f} s")
        state = agent.check_xfer_state(handle)
    agent.release_xfer_handle(handle)
    if state != "DONE":
        raise RuntimeError(f"self-test: {op} ended in state {state}")
    return (time.perf_counter() - t0) * 1e6


def initiator(
    conn: Connection, result: Connection, device: str, gpu: int, log: Path, timeout_s: float
) -> None:
    _redirect(log)
    try:
        from nixl_compat.ucxinfo import transport_modules, ucx_version

        init_device(device, gpu)
        agent = _agent("initiator")
        src, back = make_buffer(device, SIZE, gpu), make_buffer(device, SIZE, gpu)
        src.fill(7)
        regs = [agent.register_memory([(b.addr, b.nbytes, b.dev_id, "")], b.mem_type) for b in (src, back)]
        metadata, addr, dev = _recv(conn, "metadata from the target", timeout_s)
        peer = agent.add_remote_agent(metadata)
        remote = agent.get_xfer_descs([(addr, SIZE, dev)], src.mem_type)
        write_us = _move(
            agent,
            "WRITE",
            agent.get_xfer_descs([(src.addr, SIZE, src.dev_id)], src.mem_type),
            remote,
            peer,
            timeout_s,
        )
        conn.send("digest")
        written = _recv(conn, "target's digest", timeout_s) == _digest(src)
        read_us = _move(
            agent,
            "READ",
            agent.get_xfer_descs([(back.addr, SIZE, back.dev_id)], back.mem_type),
            remote,
            peer,
            timeout_s,
        )
        read_back = _digest(back) == _digest(src)
        version, lib = ucx_version()
        info = {
            "ok": written and read_back,
            "memory": src.mem_type,
            "bytes": SIZE,
            "write_verified": written,
            "read_verified": read_back,
            "write_cold_us": round(write_us, 1),
            "read_cold_us": round(read_us, 1),
            "plugins": list(agent.get_plugin_list()),
            "ucx_mem_types": list(agent.get_backend_mem_types("UCX")),
            "ucx_version": version,
            "ucx_library": lib,
            "ucx_transport_modules": transport_modules(lib),
        }
        conn.send("stop")
        _recv(conn, "target's exit", timeout_s)
        agent.remove_remote_agent(peer)
        for reg in regs:
            agent.deregister_memory(reg)
        result.send(("ok", info))
    except Exception as exc:  # reported to the parent with the message
        result.send(("error", f"{type(exc).__name__}: {exc}"))


def run_selftest(device: str, gpu: int = 0, peer_gpu: int = 0, timeout_s: float = 60.0) -> dict[str, Any]:
    """Returns the initiator's findings plus the raw UCX protocol text of both processes."""
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    res_r, res_w = ctx.Pipe(duplex=False)
    with tempfile.TemporaryDirectory(prefix="nixl-compat-selftest-") as tmp:
        tlog, ilog = Path(tmp, "target.log"), Path(tmp, "initiator.log")
        procs = [
            ctx.Process(target=target, args=(b, device, peer_gpu, tlog, timeout_s)),
            ctx.Process(target=initiator, args=(a, res_w, device, gpu, ilog, timeout_s)),
        ]
        for p in procs:
            p.start()
        try:
            payload: Any
            if not res_r.poll(timeout_s * 2):
                status, payload = "error", f"TimeoutError: no self-test result within {timeout_s * 2:.0f} s"
            else:
                status, payload = res_r.recv()
            for p in procs:
                p.join(timeout_s)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join(10)
        logs = "\n".join(f.read_text(errors="replace") for f in (ilog, tlog) if f.exists())
    if status != "ok" or not isinstance(payload, dict):
        return {"ok": False, "error": str(payload), "log_tail": logs[-4000:]}
    return {**payload, "proto_text": logs}
