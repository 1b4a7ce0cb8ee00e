"""Parsing bench: generate a large realistic log, scan it, print MB/s and peak memory.

A bench, not a test: it prints figures and asserts nothing. Memory is reported as the peak resident size
before and after the scan; a scan whose memory does not depend on the log's size leaves it unchanged.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import time
from pathlib import Path

from atomdyn_launchers.evidence import logscan

_LINES = (
    "2026-11-30T00:12:{s:02d}.{us:06d}Z  INFO dynamo_llm::http::service::openai: "
    "http response sent status=200 "
    "prefill_worker_id=7587888281{n:03d} decode_worker_id=7587888282{n:03d} elapsed_ms={n}",
    "(EngineCore_DP0 pid=4242) INFO 11-30 00:12:{s:02d} [core.py:211] Scheduler step took 0.00{n:02d} s "
    "with {n} running and 0 waiting requests",
    "(APIServer pid=4100) INFO 11-30 00:12:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: "
    "3712.{n} tokens/s, Avg generation throughput: 412.{n} tokens/s, Running: {n} reqs, "
    "GPU KV cache usage: 3.1%",
    "2026-11-30T00:12:{s:02d}.{us:06d}Z DEBUG dynamo_runtime::pipeline::network::tcp::client: "
    "connected to 10.77.0.{n} request plane stream_id={us}",
)
_RARE = (
    "dmabuf-shim: reg ok backend=hsa path=dmabuf size=2359296 offset={us} fd_closed=1 addr=0x7f3a42000000 "
    "iova=0x7f3a42000000 access=0xf",
    "(EngineCore_DP0 pid=4242) INFO 11-30 00:12:{s:02d} [metrics.py:103] KVConnectorType: NIXL, KV Transfer "
    "metrics: Num successful transfers={n}, Avg xfer time (ms)=1.5{n}, P90 xfer time (ms)=2.0, Avg post time "
    "(ms)=0.1, P90 post time (ms)=0.2, Avg MB per transfer=2.25, Throughput (MB/s)=1400.0, Avg number of "
    "descriptors=72.0",
    "[1764461554.123] NIXL_ERR: ucx backend: transfer failed (status {n})",
)


def generate(path: Path, size_mb: int, seed: int = 5) -> int:
    """Write about ``size_mb`` MiB of log lines to ``path`` (mostly common lines); the bytes written."""
    rng = random.Random(seed)
    lines = []
    for i in range(4000):
        pool = _RARE if i % 500 == 0 else _LINES
        lines.append(rng.choice(pool).format(s=i % 60, us=rng.randrange(10**6), n=i % 100))
    block = ("\n".join(lines) + "\n").encode()
    target = size_mb << 20
    written = 0
    with open(path, "wb") as handle:
        while written < target:
            handle.write(block)
            written += len(block)
    return written


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atomdyn_launchers.evidence.bench", description=__doc__)
    parser.add_argument("--size-mb", type=int, default=512, help="log size to generate (default 512)")
    parser.add_argument("--repeat", type=int, default=3, help="scans to time; the best is reported")
    parser.add_argument("--dir", type=Path, default=None, help="where to write the log (default: a temp dir)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="atomdyn-bench-", dir=args.dir) as tmp:
        log = Path(tmp) / "decode.worker.log"
        size = generate(log, args.size_mb)
        before = _peak_mib()
        best = float("inf")
        scan = None
        for _ in range(max(1, args.repeat)):
            start = time.perf_counter()
            scan = logscan.scan_file(log)
            best = min(best, time.perf_counter() - start)
        after = _peak_mib()
        assert scan is not None
        print(f"log: {size / 1e6:.0f} MB, {scan.lines} lines (page cache warm after the first scan)")
        print(f"scan: best of {args.repeat}: {best:.3f} s = {size / 1e6 / best:.0f} MB/s")
        print(
            f"peak RSS: {before:.0f} MiB before the scans, {after:.0f} MiB after "
            f"(block {logscan.BLOCK >> 20} MiB)"
        )
        print(f"found: {dict(sorted(scan.counts.items()))}")
        print(f"cpu: {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
