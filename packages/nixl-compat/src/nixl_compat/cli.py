"""`nixl-compat doctor` and `nixl-compat bench`."""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

from nixl_compat._torch import import_torch
from nixl_compat.bench.layout import KVShape
from nixl_compat.bench.spec import BenchSpec, MiB, UcxConfig, default_configs, expand_presets, quick_spec
from nixl_compat.evidence import sanitized_json


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return values


def _sizes(text: str) -> tuple[int, ...]:
    """Comma-separated sizes in MiB (fractions allowed), each at least a byte."""
    try:
        mib = [float(v) for v in text.split(",") if v]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated MiB sizes, got {text!r}") from exc
    if not mib or not all(math.isfinite(v) and v * MiB >= 1 for v in mib):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated MiB sizes > 0 (at least a byte), got {text!r}"
        )
    return tuple(int(v * MiB) for v in mib)


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def _check_output(parser: argparse.ArgumentParser, option: str, path: Path | None) -> None:
    """Refuse an output path that cannot be written before a run that takes minutes makes its figures."""
    if path is None:
        return
    problem = ""
    if path.is_dir():
        problem = "it is a directory"
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
                pass
        except OSError as exc:
            problem = exc.strerror or str(exc)
    if problem:
        parser.error(f"argument {option}: cannot write {path}: {problem}")


def _ucx(text: str) -> UcxConfig:
    try:
        return UcxConfig.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench", help="KV-transfer benchmark: naive vs best NIXL path vs raw copy, two processes"
    )
    p.add_argument("--quick", action="store_true", help="correctness run: few iterations, small sweep")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    index, count = _at_least(0), _at_least(1)
    p.add_argument("--src-gpu", type=index, default=0)
    p.add_argument("--dst-gpu", type=index, default=None, help="default: 1 when two GPUs are visible, else 0")
    p.add_argument("--layers", type=count, default=36)
    p.add_argument("--kv-heads", type=count, default=8)
    p.add_argument("--head-dim", type=count, default=128)
    p.add_argument("--block-tokens", type=count, default=16)
    p.add_argument(
        "--dtype-bytes", type=int, choices=(1, 2, 4), default=2, help="1 for fp8, 2 for bf16/fp16, 4 for fp32"
    )
    p.add_argument("--num-blocks", type=count, default=64)
    p.add_argument("--blocks", type=_ints, default=(1, 4, 16, 64), help="block counts per transfer")
    p.add_argument("--sizes-mib", type=_sizes, default=(1 * MiB, 16 * MiB, 256 * MiB))
    p.add_argument("--lanes", type=_ints, default=(1, 4), help="descriptors a contiguous range is split into")
    p.add_argument("--iters", type=count, default=200)
    p.add_argument(
        "--ucx",
        type=_ucx,
        action="append",
        help="NAME[:VAR=VALUE,...] with UCX_*/NIXL_* variables, progress_thread=on|off, threads=N, split=N; "
        "a bare 'tuned' is the device's tuned settings; repeat to compare (default: default and tuned)",
    )
    p.add_argument("--platform", help="label for the evidence (default derived from the device)")
    p.add_argument("--json", type=Path, help="write the result document here")
    p.add_argument("--plot", type=Path, help="write a PNG plot here (needs matplotlib)")


def _bench(args: argparse.Namespace) -> int:
    from nixl_compat.bench.plot import plot_available, write_plot
    from nixl_compat.bench.run import format_table, run_bench, write_json

    dst = args.dst_gpu
    if args.device == "cuda" and dst is None:
        torch = import_torch()

        dst = 1 if torch.cuda.device_count() > 1 else 0
    if args.quick:
        spec = quick_spec(args.device)
        spec = BenchSpec(**{**spec.__dict__, "src_gpu": args.src_gpu, "dst_gpu": dst or 0})
    else:
        shape = KVShape(args.layers, args.kv_heads, args.head_dim, args.block_tokens, args.dtype_bytes)
        spec = BenchSpec(
            device=args.device,
            src_gpu=args.src_gpu,
            dst_gpu=dst or 0,
            shape=shape,
            num_blocks=args.num_blocks,
            block_counts=args.blocks,
            sizes=args.sizes_mib,
            lanes=args.lanes,
            iters=args.iters,
            ucx=default_configs(args.device),
        )
    if args.ucx:
        spec = BenchSpec(**{**spec.__dict__, "ucx": expand_presets(tuple(args.ucx), args.device)})
    json_path: Path | None = args.json
    doc = run_bench(spec, args.platform, (lambda d: write_json(d, json_path)) if json_path else None)
    print(format_table(doc))
    if json_path:
        print(f"wrote {json_path}")
    if args.plot:
        if plot_available():
            write_plot(doc, args.plot)
            print(f"wrote {args.plot}")
        else:
            print(f"no plot: matplotlib is not installed ({args.plot} not written)", file=sys.stderr)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from nixl_compat.doctor import format_report, run_doctor

    report = run_doctor(
        device=args.device,
        expect_net_devices=tuple(args.expect_net_device or ()),
        timeout_s=args.timeout,
        platform=args.platform,
    )
    if args.json:
        print(sanitized_json(report))
    else:
        print(format_report(report))
    return 1 if report["selftest"].get("ok") is False or "error" in report["backend"] else 0


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nixl-compat", description=__doc__)
    parser.add_argument(
        "--version", action="version", version=f"nixl-compat {metadata.version('nixl-compat')}"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="which NIXL backend, which UCX, which transports; a loopback self-test")
    d.add_argument("--json", action="store_true", help="machine-readable report for evidence")
    d.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="self-test memory")
    d.add_argument("--expect-net-device", action="append", help="interface UCX should use (repeatable)")
    d.add_argument("--timeout", type=_seconds, default=60.0, help="self-test deadline, seconds (default: 60)")
    d.add_argument("--platform", help="label for the evidence (default derived from the GPUs seen)")
    _bench_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "bench":
        _check_output(parser, "--json", args.json)
        _check_output(parser, "--plot", args.plot)
    try:
        return _doctor(args) if args.command == "doctor" else _bench(args)
    except (ValueError, TimeoutError, RuntimeError, ImportError) as exc:
        print(f"nixl-compat {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # our reader went away: main() ends the command
    except OSError as exc:  # an output file that could not be written after all (written atomically: no part)
        print(
            f"nixl-compat {args.command}: cannot write {exc.filename}: {exc.strerror or exc}", file=sys.stderr
        )
        return 2


def _quiet_broken_pipe(run: Callable[[Sequence[str] | None], int]) -> Callable[[Sequence[str] | None], int]:
    """What atomdyn_core.console.quiet_broken_pipe does, for the base install (atomdyn-core comes with the
    evidence extra only): a reader gone away or a closed stdout ends with status 1 and no traceback."""

    @functools.wraps(run)
    def wrapper(argv: Sequence[str] | None = None) -> int:
        closed = sys.stdout is None
        if closed:  # `>&-`: fd 1 gets /dev/null, so no file the command opens and no child inherits it
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != 1:
                os.dup2(devnull, 1)
                os.close(devnull)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        try:
            try:
                code = run(argv)
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return 1
        except SystemExit as exc:
            if not closed or exc.code not in (0, None):
                raise
            code = 0
        if closed:
            print("nixl-compat: stdout is closed: the output went nowhere", file=sys.stderr)
            return code or 1
        return code

    return wrapper


def _guarded() -> Callable[[Sequence[str] | None], int]:
    try:
        from atomdyn_core.console import quiet_broken_pipe
    except ImportError:
        return _quiet_broken_pipe(_main)
    return quiet_broken_pipe(_main)


_guarded_main = _guarded()


def main(argv: Sequence[str] | None = None) -> int:
    """A reader gone away (`| head`) or a closed stdout ends the command with status 1, no traceback."""
    return _guarded_main(argv)


if __name__ == "__main__":
    sys.exit(main())
