"""The environment-missing path, on this machine as it is: no GPU runtime, libibverbs without devices."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env, run_program

from mori_repro.exitcodes import ExitCode
from mori_repro.native import binary_path

NO_SUCH_FILE = "cannot open shared object file: No such file or directory"
HSA_MISSING = f"libhsa-runtime64.so.1: {NO_SUCH_FILE}"
CUDA_MISSING = f"libcuda.so.1: {NO_SUCH_FILE}"


def _loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


@pytest.fixture(autouse=True, scope="module")
def this_machine() -> None:
    """The expectations below describe this machine; say so plainly if it is not that machine."""
    assert not _loadable("libhsa-runtime64.so.1"), "this machine has an HSA runtime: the premise is wrong"
    assert not _loadable("libcuda.so.1"), "this machine has a CUDA driver: the premise is wrong"
    assert _loadable("libibverbs.so.1"), (
        "libibverbs.so.1 is missing: install libibverbs-dev (requirements/apt.txt)"
    )
    assert not Path("/sys/class/infiniband").exists() or not any(Path("/sys/class/infiniband").iterdir())


def test_cli_reports_exactly_what_is_missing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mori_repro.cli", "run"],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert proc.returncode == ExitCode.ENVIRONMENT == 20
    assert proc.stdout == (
        "mori-repro: environment cannot run this reproducer: missing gpu-runtime, rdma\n"
        f"  missing gpu-runtime: no GPU runtime could be loaded: {HSA_MISSING}; {CUDA_MISSING}\n"
        "  missing rdma: libibverbs found no RDMA device\n"
        "exit 20 (environment-cannot-run)\n"
    )


def test_json_lists_each_missing_component() -> None:
    result = run_program(["--json"], clean_env())
    assert result.returncode == 20
    report = result.report()
    assert report["exit_code"] == 20
    assert report["verdict"] == "environment-cannot-run"
    assert report["environment"] == {
        "ok": False,
        "missing": [
            {
                "component": "gpu-runtime",
                "detail": f"no GPU runtime could be loaded: {HSA_MISSING}; {CUDA_MISSING}",
            },
            {"component": "rdma", "detail": "libibverbs found no RDMA device"},
        ],
    }
    assert report["modes"] == []
    assert report["gpu"] is None and report["rdma"] is None


def test_explicit_backend_names_only_that_runtime() -> None:
    result = run_program(["--json", "--backend", "cuda"], clean_env())
    assert result.returncode == 20
    missing = result.report()["environment"]["missing"]
    assert missing[0] == {
        "component": "gpu-runtime",
        "detail": f"CUDA driver could not be loaded: {CUDA_MISSING}",
    }


def test_missing_libibverbs_is_named(tmp_path: Path) -> None:
    absent = tmp_path / "libibverbs.so.1"
    result = run_program(["--json"], clean_env({"MORI_REPRO_LIBIBVERBS": str(absent)}))
    assert result.returncode == 20
    missing = result.report()["environment"]["missing"]
    assert missing[1] == {
        "component": "rdma",
        "detail": f"libibverbs could not be loaded: {absent}: {NO_SUCH_FILE}",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sub-offset", "0"], "--sub-offset must be at least --sub-size"),
        (["--sub-offset", "63MiB", "--sub-size", "2MiB"], "must lie inside --alloc-size"),
        (["--alloc-size", "lots"], "--alloc-size: not a size: 'lots'"),
        (["--mode", "maybe"], "--mode: 'maybe' is not one of the allowed values"),
        (["--frobnicate"], "unknown argument '--frobnicate'"),
    ],
)
def test_bad_arguments_are_named(args: list[str], message: str) -> None:
    result = run_program(args, clean_env())
    assert result.returncode == ExitCode.USAGE
    assert message in result.stderr
    assert result.stdout == ""


def test_program_has_no_link_time_dependency_on_vendor_libraries() -> None:
    """The point of dlopen: the binary must start where libibverbs, HSA or CUDA are absent."""
    dynamic = subprocess.run(
        ["readelf", "--dynamic", str(binary_path())], capture_output=True, text=True, check=True
    ).stdout
    needed = {line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line}
    assert needed, "readelf listed no NEEDED entries: not a dynamically linked program?"
    # glibc's own parts (libdl and libpthread are separate before glibc 2.34, which the release builds against)
    # and, in a build with the system compiler, its C++ runtime.
    glibc = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "ld-linux-x86-64.so.2"}
    assert needed <= glibc | {"libstdc++.so.6", "libgcc_s.so.1"}, needed
