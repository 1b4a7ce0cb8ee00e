"""``python -m atomdyn_core.sanitize file SRC [DEST] [--jobs N] | bench [--size-mb N] [--jobs N]``.

``file`` sanitizes one file (to DEST by temporary file and rename, or to standard output); ``bench`` measures
the whole-file path on a generated log of realistic lines and prints its throughput beside the rate at which
Python merely reads the same file line by line (the parse rate), in one process and, with more than one job,
with worker processes (checking that both wrote the same bytes). A figure, not a test: nothing fails if slow.

A reader that goes away (``| head``) ends the command with status 1 and no traceback, as a closed standard
output (``>&-``) does where the command would write to it; a file that cannot be read is an error naming it
(status 2), and nothing is written then.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from atomdyn_core.console import stdout_gone
from atomdyn_core.sanitize.files import PARALLEL_MIN_BYTES, sanitize_file, sanitize_file_to
from atomdyn_core.sanitize.loggen import KNOWN, generate_text
from atomdyn_core.sanitize.parallel import default_jobs
from atomdyn_core.sanitize.sanitizer import Sanitizer

_GENERATED_BLOCK = 32 << 20
_MIN_CPUS_FOR_WORKERS = 4


def main(argv: list[str] | None = None) -> int:
    """The command; its status. A closed pipe (argparse's --help too, flushed here) ends it with 1."""
    try:
        try:
            return _main(argv)
        finally:
            if sys.stdout is not None:  # None: started with standard output closed
                sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()  # the interpreter's last flush must not fail again
        return 1


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atomdyn_core.sanitize", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("file", help="sanitize one file")
    p.add_argument("src", type=Path, help="the file to sanitize")
    p.add_argument("dest", type=Path, nargs="?", help="where to write (default: standard output)")
    _jobs_option(p)
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
    _jobs_option(p)
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error("--jobs must be at least 1")
    jobs = args.jobs or _default_jobs()
    if sys.stdout is None and (args.command == "bench" or args.dest is None):
        print("sanitize: standard output is closed", file=sys.stderr)
        return 1
    if args.command == "file":
        return _file(args.src, args.dest, jobs)
    if args.size_mb < 1:
        parser.error("--size-mb must be at least 1")
    return _bench(args.size_mb, args.seed, args.slow_sample_mb, colour=not args.no_colour, jobs=jobs)


def _default_jobs() -> int:
    """One worker per CPU where there are at least 4: with 2 (a shared VM), two workers and the process
    that numbers were slower than one process alone."""
    cpus = default_jobs()
    return cpus if cpus >= _MIN_CPUS_FOR_WORKERS else 1


def _jobs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs",
        type=int,
        help=f"worker processes for a file of {PARALLEL_MIN_BYTES >> 20} MiB or more, 1 for none "
        f"(default: one per CPU where there are {_MIN_CPUS_FOR_WORKERS} or more, else 1); the output is the same "
        "whatever their number",
    )


def _file(src: Path, dest: Path | None, jobs: int) -> int:
    if not src.is_file():
        print(f"sanitize: {src} is not a file", file=sys.stderr)
        return 2
    if dest is not None and dest.is_dir():
        print(f"sanitize: {dest} is a directory", file=sys.stderr)
        return 2
    try:
        if dest is None:
            sanitize_file(src, sys.stdout, jobs=jobs)  # staged whole before the first byte is written
        else:
            sanitize_file_to(src, dest, jobs=jobs)
    except BrokenPipeError:
        raise  # the reader went away: main ends quietly
    except OSError as exc:  # /proc/self/mem, a file not permitted, a destination that cannot be written
        print(f"sanitize: {exc.filename or src}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def _bench(size_mb: int, seed: int, slow_sample_mb: int, colour: bool, jobs: int) -> int:
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
        wall, cpu = _timed(lambda: sanitize_file_to(log, out, _run_sanitizer(), jobs=1))
        print(f"whole-file sanitize, 1 process:   {mb / wall:8.1f} MB/s wall  {mb / cpu:8.1f} MB/s CPU")
        if jobs > 1:
            parallel = Path(tmp) / "sanitized-parallel.log"
            wall, cpu, own = _timed_apart(
                lambda: sanitize_file_to(log, parallel, _run_sanitizer(), jobs=jobs)
            )
            print(
                f"whole-file sanitize, {jobs} workers:  {mb / wall:8.1f} MB/s wall  {mb / cpu:8.1f} MB/s CPU"
                f" (all processes; the numbering process alone {mb / own:.1f} MB/s CPU)"
            )
            if not _same_bytes(out, parallel):
                print("sanitize: the workers' output differs from the one-process output", file=sys.stderr)
                return 1
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


def _same_bytes(a: Path, b: Path) -> bool:
    with open(a, "rb") as one, open(b, "rb") as other:
        while True:
            x, y = one.read(1 << 20), other.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the workers, once joined)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _timed(work: Callable[[], object]) -> tuple[float, float]:
    return _timed_apart(work)[:2]


def _timed_apart(work: Callable[[], object]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds of all processes, CPU seconds of this one (the numbering process)."""
    wall, cpu, own = time.perf_counter(), _cpu(), time.process_time()
    work()
    done = (time.perf_counter() - wall, _cpu() - cpu, time.process_time() - own)
    return max(done[0], 1e-6), max(done[1], 1e-6), max(done[2], 1e-6)


if __name__ == "__main__":
    sys.exit(main())
