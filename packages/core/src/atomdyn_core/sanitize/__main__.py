"""``python -m atomdyn_core.sanitize file SRC [DEST] | bench [--size-mb N]``.

``file`` sanitizes one file (to DEST by temporary file and rename, or to standard output); ``bench`` measures
the whole-file path on a generated log of realistic lines and prints its throughput beside the rate at which
Python merely reads the same file line by line (the parse rate). A figure, not a test: nothing fails if slow.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from atomdyn_core.sanitize.files import sanitize_file, sanitize_file_to
from atomdyn_core.sanitize.loggen import KNOWN, generate_text
from atomdyn_core.sanitize.sanitizer import Sanitizer

_GENERATED_BLOCK = 32 << 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atomdyn_core.sanitize", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("file", help="sanitize one file")
    p.add_argument("src", type=Path, help="the file to sanitize")
    p.add_argument("dest", type=Path, nargs="?", help="where to write (default: standard output)")
    p = sub.add_parser("bench", help="print the whole-file throughput on a generated log")
    p.add_argument(
        "--size-mb", type=int, default=1024, help="size of the generated log in MB (default: 1024)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the generated log (default: 0)")
    p.add_argument(
        "--no-colour", action="store_true", help="generate Dynamo's lines without terminal colour codes"
    )
    p.add_argument(
        "--slow-sample-mb",
        type=int,
        default=8,
        help="MB measured with the line-by-line path for comparison, 0 for none (default: 8)",
    )
    args = parser.parse_args(argv)
    if args.command == "file":
        return _file(args.src, args.dest)
    if args.size_mb < 1:
        parser.error("--size-mb must be at least 1")
    return _bench(args.size_mb, args.seed, args.slow_sample_mb, colour=not args.no_colour)


def _file(src: Path, dest: Path | None) -> int:
    if not src.is_file():
        print(f"sanitize: {src} is not a file", file=sys.stderr)
        return 2
    if dest is None:
        sanitize_file(src, sys.stdout)
    else:
        sanitize_file_to(src, dest)
    return 0


def _bench(size_mb: int, seed: int, slow_sample_mb: int, colour: bool) -> int:
    with tempfile.TemporaryDirectory(prefix="sanitize-bench-") as tmp:
        log = Path(tmp) / "raw.log"
        size = _write_log(log, size_mb << 20, seed, colour)
        mb = size / 1e6
        print(f"platform: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
        print(
            f"generated log: {mb:.0f} MB, {'with' if colour else 'without'} terminal colour codes, "
            "known hosts/users/paths/accounts as a run's config gives them"
        )
        wall, cpu = _timed(lambda: _parse(log))
        print(f"parse rate (read + split lines):  {mb / wall:8.1f} MB/s wall  {mb / cpu:8.1f} MB/s CPU")
        out = Path(tmp) / "sanitized.log"
        wall, cpu = _timed(lambda: sanitize_file_to(log, out, _run_sanitizer()))
        print(f"whole-file sanitize:              {mb / wall:8.1f} MB/s wall  {mb / cpu:8.1f} MB/s CPU")
        if slow_sample_mb > 0:
            sample = log.read_text(encoding="utf-8")[: slow_sample_mb << 20]
            wall, cpu = _timed(lambda: _line_by_line(_run_sanitizer(), sample))
            rate = len(sample.encode()) / 1e6
            print(
                f"line by line ({slow_sample_mb} MB sample):      {rate / wall:8.1f} MB/s wall  {rate / cpu:8.1f} MB/s CPU"
            )
    return 0


def _run_sanitizer() -> Sanitizer:
    """The sanitizer a run would build: it knows the run's hosts, user, shared path and account."""
    return Sanitizer(
        hosts=KNOWN["hosts"], users=KNOWN["users"], paths=KNOWN["paths"], accounts=KNOWN["accounts"]
    )


def _line_by_line(sanitizer: Sanitizer, text: str) -> str:
    sanitizer.learn(text)
    return sanitizer.sanitize(text)


def _write_log(path: Path, size: int, seed: int, colour: bool) -> int:
    written = 0
    with open(path, "w", encoding="utf-8", newline="") as handle:
        block = 0
        while written < size:
            text = generate_text(min(_GENERATED_BLOCK, size - written), seed * 1_000_003 + block, colour)
            handle.write(text)
            written += len(text.encode())
            block += 1
    return written


def _parse(path: Path) -> int:
    lines = 0
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        for _ in handle:
            lines += 1
    return lines


def _timed(work: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    work()
    return time.perf_counter() - wall, time.process_time() - cpu


if __name__ == "__main__":
    sys.exit(main())
