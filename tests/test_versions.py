"""Every console script of every package answers --version with its distribution's one version (pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]


def console_scripts() -> list[tuple[str, str]]:
    """(script, version) for every [project.scripts] entry of every package."""
    found = []
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        found += [(script, project["version"]) for script in project.get("scripts", {})]
    return found


def test_the_expected_scripts_are_covered() -> None:
    names = {script for script, _ in console_scripts()}
    assert {
        "atomdyn-lock",
        "atomdyn-images",
        "atomdyn-validate",
        "atomdyn-cluster",
        "nixl-compat",
        "dmabuf-shim",
        "mori-repro",
    } <= names


@pytest.mark.parametrize(("script", "version"), console_scripts())
def test_version_flag(script: str, version: str) -> None:
    executable = Path(sys.executable).parent / script
    assert executable.is_file(), f"{script} is not installed in the project environment"
    done = subprocess.run(
        [str(executable), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == f"{script} {version}\n"
