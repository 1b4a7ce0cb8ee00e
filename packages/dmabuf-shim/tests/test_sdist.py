"""The sdist builds a working wheel on a machine with only a compiler (no rdma-core, ROCm or CUDA headers)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]


def require_build_tools() -> None:
    missing = [m for m in ("scikit_build_core", "pybind11") if importlib.util.find_spec(m) is None]
    if missing:
        message = f"build requirements not installed in this environment: {', '.join(missing)}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.integration
def test_sdist_builds_a_wheel_with_the_library_and_no_foreign_dependencies(tmp_path: Path) -> None:
    require_build_tools()
    sdist_dir, wheel_dir = tmp_path / "sdist", tmp_path / "wheel"
    build_sdist = (
        "import sys; from scikit_build_core.build import build_sdist; print(build_sdist(sys.argv[1]))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH")}
    made = subprocess.run(
        [sys.executable, "-c", build_sdist, str(sdist_dir)],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    sdist = sdist_dir / made.stdout.strip().splitlines()[-1]
    assert sdist.name == "dmabuf_shim-0.1.0.tar.gz"
    wheel = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            "-w",
            str(wheel_dir),
            str(sdist),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert wheel.returncode == 0, wheel.stdout[-3000:] + wheel.stderr[-3000:]
    [built] = list(wheel_dir.glob("dmabuf_shim-0.1.0-*.whl"))
    with zipfile.ZipFile(built) as zf:
        names = set(zf.namelist())
        assert {"dmabuf_shim/libdmabuf_shim.so", "dmabuf_shim/libdmabuf_shim_benchverbs.so"} <= names
        assert "dmabuf_shim/py.typed" in names and "dmabuf_shim/cli.py" in names
        assert any(n.startswith("dmabuf_shim/_native.") and n.endswith(".so") for n in names)
        zf.extract("dmabuf_shim/libdmabuf_shim.so", tmp_path / "x")
    dynamic = subprocess.run(
        ["readelf", "-d", str(tmp_path / "x" / "dmabuf_shim" / "libdmabuf_shim.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed and not any(lib in " ".join(needed) for lib in ("ibverbs", "hsa", "cuda", "stdc++"))
