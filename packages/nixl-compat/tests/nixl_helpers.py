"""Test helpers: subprocesses with a constructed environment (fake ROCm torch, stand-in nixl_rocm).

A uniquely named module (not conftest), so several packages' suites can share one pytest session.

Each scenario runs in a fresh interpreter because backend resolution happens once per process, at import.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

PKG = Path(__file__).resolve().parents[1]
SRC = PKG / "src"
CORE_SRC = PKG.parent / "core" / "src"

STANDIN_NIXL_ROCM = '''
"""Test stand-in for AMD's nixl_rocm: upstream's Python API (a separate module object) over the
native bindings of nixl_cu13, which is all this CPU machine has. DRAM transfers are real."""
import importlib
import importlib.util
import sys
from pathlib import Path

_cu = importlib.util.find_spec("nixl_cu13")
for _sub in ("_bindings", "_utils", "logging"):
    sys.modules[f"{__name__}.{_sub}"] = importlib.import_module(f"nixl_cu13.{_sub}")
_spec = importlib.util.spec_from_file_location(f"{__name__}._api", Path(_cu.origin).parent / "_api.py")
_api = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _api
_spec.loader.exec_module(_api)
from ._api import DEFAULT_COMM_PORT, nixl_agent, nixl_agent_config  # noqa: E402,F401
ROCM_STANDIN = True
'''

BROKEN_NIXL_ROCM = 'raise ImportError("libamdhip64.so.7: cannot open shared object file")\n'

FAKE_TORCH_INIT = '''
"""Fake torch for backend-resolution tests: only what the resolver and the doctor read."""
from . import version
__version__ = version.__version__


class cuda:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_count():
        return 0
'''


def require_nixl() -> None:
    """nixl_cu13 must be installed; in CI its absence is a failure, never a skip."""
    if importlib.util.find_spec("nixl_cu13") is None:
        msg = "nixl-cu13==1.5.1 is not installed (pip install --no-deps nixl-cu13==1.5.1 nixl==1.5.1)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def make_fake_torch(root: Path, *, hip: str | None, cuda: str | None) -> Path:
    pkg = root / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(FAKE_TORCH_INIT)
    tver = "2.7.0+rocm6.4" if hip else (f"2.7.0+cu{cuda.replace('.', '')}" if cuda else "2.7.0+cpu")
    (pkg / "version.py").write_text(f"__version__ = {tver!r}\nhip = {hip!r}\ncuda = {cuda!r}\n")
    return root


def make_nixl_rocm(root: Path, version: str = "1.5.1", broken: bool = False) -> Path:
    pkg = root / "nixl_rocm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(BROKEN_NIXL_ROCM if broken else STANDIN_NIXL_ROCM)
    dist = root / f"nixl_rocm-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nixl-rocm\nVersion: {version}\n")
    (dist / "top_level.txt").write_text("nixl_rocm\n")
    (dist / "RECORD").write_text("")
    return root


def env_for(*paths: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "NIXL_COMPAT_"))}
    env["UCX_NET_DEVICES"] = "lo"
    pythonpath = [str(p) for p in paths] + [str(SRC), str(CORE_SRC)]
    if os.environ.get("PYTHONPATH"):
        pythonpath.append(os.environ["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    env.update(extra)
    return env


def run_py(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_ok(code: str, env: dict[str, str]) -> str:
    proc = run_py(code, env)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def run_cli(args: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nixl_compat.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def doctor(env: dict[str, str], *args: str) -> dict[str, Any]:
    proc = run_cli(["doctor", "--json", *args], env)
    assert proc.stdout.strip(), f"doctor printed nothing (exit {proc.returncode}):\n{proc.stderr}"
    report: dict[str, Any] = json.loads(proc.stdout)
    report["_exit"] = proc.returncode
    return report
