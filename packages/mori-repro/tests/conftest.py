"""Fixtures: the installed native program, and the shared test doubles (testing/doubles) built once."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mori_repro.native import binary_path
from mori_repro.verdict import check_result

REPO_ROOT = Path(__file__).resolve().parents[3]
DOUBLES_BUILD = REPO_ROOT / "testing" / "doubles" / "build.py"
# Variables through which the program finds its libraries; tests set them explicitly, never inherit them.
LIB_VARS = ("MORI_REPRO_LIBIBVERBS", "MORI_REPRO_LIBHSA", "MORI_REPRO_LIBCUDA")


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    def report(self) -> dict[str, Any]:
        data = json.loads(self.stdout)
        assert isinstance(data, dict)
        # Every result the program writes must give its own verdict by mori_repro.verdict's rules, which
        # `report --result` applies to a result written elsewhere: the two sets of rules cannot drift apart.
        assert check_result(data) == data["exit_code"] == self.returncode
        return data


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LIB_VARS}
    env.update(extra or {})
    return env


def run_program(args: Sequence[str], env: Mapping[str, str]) -> Result:
    proc = subprocess.run(
        [str(binary_path()), *args], capture_output=True, text=True, env=dict(env), timeout=120, check=False
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def doubles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The one copy of the doubles, compiled with the system compiler into this session's temp dir."""
    spec = importlib.util.spec_from_file_location("atomdyn_testing_doubles_build", DOUBLES_BUILD)
    assert spec is not None and spec.loader is not None, f"cannot load {DOUBLES_BUILD}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built: dict[str, Path] = module.build_doubles(tmp_path_factory.mktemp("doubles"))
    return built


@pytest.fixture()
def hsa_env(doubles: dict[str, Path]) -> dict[str, str]:
    return clean_env(
        {"MORI_REPRO_LIBIBVERBS": str(doubles["ibverbs"]), "MORI_REPRO_LIBHSA": str(doubles["hsa"])}
    )


@pytest.fixture()
def cuda_env(doubles: dict[str, Path]) -> dict[str, str]:
    return clean_env(
        {"MORI_REPRO_LIBIBVERBS": str(doubles["ibverbs"]), "MORI_REPRO_LIBCUDA": str(doubles["cuda"])}
    )
