"""``python -m nixl_compat.crossnode``: one side of the cross-node probe (see :mod:`.probe`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from nixl_compat.bench.layout import KVShape
from nixl_compat.crossnode.probe import ProbeSpec, run


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not positive")
    return value


def _blocks(text: str) -> tuple[int, ...]:
    return tuple(_positive(part) for part in text.split(",") if part)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m nixl_compat.crossnode",
        description="One side of the cross-node NIXL probe: the target owns the KV buffers, the initiator "
        "READs them as vLLM's decode worker does; metadata through the run's etcd (ETCD_ENDPOINTS).",
    )
    p.add_argument("--role", choices=("target", "initiator"), required=True)
    p.add_argument("--key-prefix", required=True, help="the etcd prefix of this pair's keys")
    p.add_argument("--layers", type=_positive, required=True)
    p.add_argument("--kv-heads", type=_positive, required=True, help="KV heads on this rank")
    p.add_argument("--head-dim", type=_positive, required=True)
    p.add_argument("--block-tokens", type=_positive, default=16)
    p.add_argument("--dtype-bytes", type=int, choices=(1, 2, 4), default=2)
    p.add_argument("--blocks", type=_positive, default=64, help="blocks in each side's cache (default 64)")
    p.add_argument(
        "--transfer-blocks", type=_blocks, default=(1, 4, 16), help="blocks per READ (default 1,4,16)"
    )
    p.add_argument("--iterations", type=_positive, default=20, help="timed READs per series (default 20)")
    p.add_argument("--large-mib", type=_positive, default=64, help="the large transfer, MiB (default 64)")
    p.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="cpu: DRAM; cuda: VRAM (ROCm too)"
    )
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--timeout", type=_seconds, default=120.0, help="seconds for each wait (default 120)")
    p.add_argument("--json", type=Path, help="write the report here (atomically)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    shape = KVShape(args.layers, args.kv_heads, args.head_dim, args.block_tokens, args.dtype_bytes)
    try:
        spec = ProbeSpec(
            role=args.role,
            key_prefix=args.key_prefix,
            shape=shape,
            blocks=args.blocks,
            transfer_blocks=args.transfer_blocks,
            iterations=args.iterations,
            large_bytes=args.large_mib << 20,
            device=args.device,
            gpu=args.gpu,
            timeout_s=args.timeout,
        )
    except ValueError as exc:
        parser().error(str(exc))
    return run(spec, args.json)


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown: after READs, NIXL 1.5.1's UCX crashes while the process exits (SIGSEGV
    # once every handle, registration and the agent were released, seen on the CPU rehearsal), which would
    # turn a verified probe into a failed job. The bench's processes end the same way (multiprocessing).
    os._exit(status)
