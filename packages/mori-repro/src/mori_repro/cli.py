"""`mori-repro run` and `mori-repro report`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from mori_repro import __version__
from mori_repro.exitcodes import ExitCode
from mori_repro.native import BINARY_NAME, NativeError, UsageError, binary_path, run_loopback
from mori_repro.report import BUNDLE_FILES, write_bundle
from mori_repro.shared import JSONNestingError, loads_bounded, quiet_broken_pipe
from mori_repro.system import collect
from mori_repro.verdict import ResultError, check_result

EXIT_CODE_HELP = "\n".join(f"  {int(c):>2}  {c.verdict}" for c in ExitCode)
# The program's report nests four levels ($.modes[i].write.status); a result nested far deeper is not one.
MAX_RESULT_DEPTH = 16


class _ArgumentsRejected(Exception):
    """argparse rejected the command line; main() reports it as text or, for `run --json`, as JSON."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ArgumentsRejected(self, message)


def _add_loopback_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("loopback")
    g.add_argument(
        "--backend", choices=("auto", "hsa", "cuda"), default="auto", help="GPU runtime (default: auto)"
    )
    g.add_argument("--gpu", type=int, default=0, help="GPU index (default: 0)")
    g.add_argument("--device", default="", help="RDMA device name, e.g. ionic_0 (default: the first)")
    g.add_argument("--port", type=int, default=1, help="RDMA port (default: 1)")
    g.add_argument(
        "--gid-index",
        type=int,
        default=1,
        help="GID index: the port's IPv4 RoCE v2 GID (ibv_devinfo -v lists them; default: 1)",
    )
    g.add_argument("--alloc-size", default="64MiB", help="GPU allocation (default: 64MiB)")
    g.add_argument("--sub-offset", default="32MiB", help="sub-allocation offset in it (default: 32MiB)")
    g.add_argument("--sub-size", default="1MiB", help="sub-allocation size (default: 1MiB)")
    g.add_argument("--mode", choices=("both", "bug", "fix"), default="both", help="registrations to run")
    g.add_argument(
        "--cuda-export",
        choices=("allocation", "range"),
        default="allocation",
        help="CUDA: export the whole allocation (pool semantics, as HSA) or only the page range",
    )
    g.add_argument(
        "--timeout-ms", type=int, default=10000, help="deadline per RDMA completion (default: 10000)"
    )


def _native_args(ns: argparse.Namespace) -> list[str]:
    args = [
        f"--backend={ns.backend}",
        f"--gpu={ns.gpu}",
        f"--port={ns.port}",
        f"--gid-index={ns.gid_index}",
        f"--alloc-size={ns.alloc_size}",
        f"--sub-offset={ns.sub_offset}",
        f"--sub-size={ns.sub_size}",
        f"--mode={ns.mode}",
        f"--cuda-export={ns.cuda_export}",
        f"--timeout-ms={ns.timeout_ms}",
    ]
    if ns.device:
        args.append(f"--device={ns.device}")
    return args


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mori-repro",
        description="Loopback reproducer of the sub-allocated dma-buf offset bug (see docs/mori-path.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit codes:\n" + EXIT_CODE_HELP,
    )
    parser.add_argument("--version", action="version", version=f"mori-repro {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="register both ways, WRITE and READ over an RC loopback, check the bytes"
    )
    run.add_argument("--json", action="store_true", help="print the JSON report instead of text")
    _add_loopback_options(run)
    report = sub.add_parser("report", help="run (or reuse a --json result) and write a sanitized bundle")
    report.add_argument("--out", type=Path, help="bundle directory (default: ./mori-repro-report-<UTC time>)")
    report.add_argument(
        "--result", type=Path, help="reuse this `mori-repro run --json` output instead of running"
    )
    _add_loopback_options(report)
    return parser


def _cmd_run(ns: argparse.Namespace) -> int:
    cmd = [str(binary_path()), *(["--json"] if ns.json else []), *_native_args(ns)]
    if not ns.json:
        return subprocess.run(cmd, check=False).returncode
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == ExitCode.USAGE and not proc.stdout.strip():
        lines = proc.stderr.strip().splitlines()
        raise UsageError(lines[0].removeprefix(f"{BINARY_NAME}: ") if lines else "bad arguments")
    sys.stderr.write(proc.stderr)
    sys.stdout.write(proc.stdout)
    return proc.returncode


def usage_error_json(message: str) -> str:
    """What `run --json` prints for a usage error: the report's envelope, with the error in place of results."""
    code = ExitCode.USAGE
    return json.dumps(
        {
            "tool": "mori-repro",
            "schema": 1,
            "exit_code": int(code),
            "verdict": code.verdict,
            "summary": f"usage error: {message}",
            "error": message,
        }
    )


def _load_result(path: Path) -> dict[str, Any]:
    try:
        data = loads_bounded(path.read_text(encoding="utf-8"), limit=MAX_RESULT_DEPTH)
    except JSONNestingError as exc:
        raise NativeError(f"--result {path}: {exc}: not a `mori-repro run --json` output") from None
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise NativeError(f"--result {path}: not a readable `mori-repro run --json` output: {exc}") from exc
    if not isinstance(data, dict) or data.get("tool") != "mori-repro-loopback" or "exit_code" not in data:
        raise NativeError(f"--result {path}: not a `mori-repro run --json` output (no tool/exit_code fields)")
    try:
        check_result(data)  # the verdict is the observations', never the file's word
    except ResultError as exc:
        raise NativeError(f"--result {path}: {exc}; no bundle written") from None
    return data


def _usable_out(out: Path) -> None:
    """Refuse an --out that cannot hold the bundle before anything runs: nothing is written there then."""
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise UsageError(
                f"--out {out}: not a directory (the bundle is a directory of {len(BUNDLE_FILES)} files)"
            )
        return
    ancestor = out.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(f"--out {out}: cannot write the bundle there: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: cannot write the bundle there: {ancestor} is not writable")


def _cmd_report(ns: argparse.Namespace) -> int:
    out = ns.out or Path(f"mori-repro-report-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    _usable_out(out)
    if ns.result:
        result = _load_result(ns.result)
    else:
        result = run_loopback(_native_args(ns)).report
        try:
            check_result(result)
        except ResultError as exc:  # the program and verdict.py disagree: a bug here, not the user's
            raise NativeError(f"{BINARY_NAME}'s report does not hold together: {exc}") from None
    system = collect(os.environ, (result.get("rdma") or {}).get("device") or ns.device or None)
    try:
        written = write_bundle(out, result, system)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write the bundle there: {exc.strerror or exc}") from None
    print(f"mori-repro: {result.get('verdict')} (exit {result.get('exit_code')}); bundle written to {out}/")
    for path in written:
        print(f"  {path}")
    return 0


def _wants_json(args: Sequence[str]) -> bool:
    """`run ... --json`, read before parsing so that a command line argparse rejects still answers in JSON."""
    return bool(args) and args[0] == "run" and "--json" in args[1:]


def _main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        ns = _parser().parse_args(args)
    except _ArgumentsRejected as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        if _wants_json(args):
            print(usage_error_json(str(exc)))
        return int(ExitCode.USAGE)
    try:
        return _cmd_run(ns) if ns.command == "run" else _cmd_report(ns)
    except UsageError as exc:
        print(f"mori-repro: {exc}", file=sys.stderr)
        if ns.command == "run" and ns.json:
            print(usage_error_json(str(exc)))
        return int(ExitCode.USAGE)
    except NativeError as exc:
        print(f"mori-repro: {exc}", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)


@quiet_broken_pipe  # a reader gone away (`| head`): status 1, no traceback
def main(argv: Sequence[str] | None = None) -> int:
    return _main(argv)


if __name__ == "__main__":
    sys.exit(main())
