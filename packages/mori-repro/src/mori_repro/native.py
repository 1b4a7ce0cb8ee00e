"""Finding and running the native loopback program that ships inside this package."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mori_repro.exitcodes import ExitCode

BINARY_NAME = "mori-repro-loopback"
# Loopback runs allocate, copy and poll with their own deadline (--timeout-ms); this bounds a hung driver.
RUN_TIMEOUT_S = 600.0


class NativeError(RuntimeError):
    """The native program is missing or produced output that is not its JSON report."""


class UsageError(NativeError):
    """The native program rejected its arguments (its message names the problem)."""


def binary_path() -> Path:
    """The installed program: mori_repro/bin/mori-repro-loopback, put there by the CMake install step."""
    path = Path(__file__).resolve().parent / "bin" / BINARY_NAME
    if not path.is_file():
        raise NativeError(
            f"{path} is missing: this copy of mori-repro was installed without its native program "
            "(install the package with pip so that CMake builds it)"
        )
    return path


@dataclass(frozen=True)
class LoopbackRun:
    exit_code: int
    report: dict[str, Any]
    stderr: str

    @property
    def verdict(self) -> str:
        return str(self.report.get("verdict", ExitCode.INTERNAL_ERROR.verdict))


def run_loopback(
    args: Sequence[str], env: Mapping[str, str] | None = None, timeout_s: float = RUN_TIMEOUT_S
) -> LoopbackRun:
    """Run the program with --json and return its exit code and parsed report."""
    cmd = [str(binary_path()), "--json", *args]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=dict(os.environ if env is None else env),
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise NativeError(f"{BINARY_NAME} did not finish within {timeout_s:.0f} s") from exc
    if proc.returncode == ExitCode.USAGE:
        raise UsageError(proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else "bad arguments")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise NativeError(
            f"{BINARY_NAME} exited {proc.returncode} without a JSON report "
            f"(stdout {proc.stdout[:200]!r}, stderr {proc.stderr[-500:]!r})"
        ) from exc
    if not isinstance(report, dict) or report.get("exit_code") != proc.returncode:
        raise NativeError(f"{BINARY_NAME} exited {proc.returncode} but its report says {report!r:.200}")
    return LoopbackRun(exit_code=proc.returncode, report=report, stderr=proc.stderr)
