"""Promises the repository makes about itself: the README's Quick start, its generated tables, the layout."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def quick_start_lines() -> list[str]:
    match = re.search(r"^## Quick start\n.*?^```[^\n]*\n(.*?)^```", README, re.M | re.S)
    assert match, "README has no Quick start code block"
    return [
        line for line in match.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def test_quick_start_is_two_lines_and_ci_runs_the_test_line_verbatim() -> None:
    lines = quick_start_lines()
    assert len(lines) == 2
    assert "demo" in lines[0] and "tests" in lines[1]
    assert lines[1] in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def block(name: str) -> str:
    match = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", README, re.S)
    assert match, f"README lacks the {name} markers"
    return match.group(1)


def test_pinned_stack_table_matches_the_lock() -> None:
    generated = subprocess.run(
        [sys.executable, "-m", "atomdyn_core.cli", "--lock", str(ROOT / "release-lock.json"), "table"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert block("pinned-stack") == generated, "regenerate with: python scripts/sync_readme.py"


PACKAGES = sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml"))


def test_the_design_cards_packages_exist() -> None:
    names = {p.name for p in PACKAGES}
    assert {"core", "image-builder", "nixl-compat", "dmabuf-shim", "mori-repro", "launchers"} <= names


@pytest.mark.parametrize("package", PACKAGES, ids=[p.name for p in PACKAGES])
def test_package_layout(package: Path) -> None:
    pyproject = (package / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^requires-python = ">=3\.10', pyproject, re.M), "nothing may tie a package to 3.11"
    assert (package / "README.md").is_file() and (package / "tests").is_dir()
    typed = list((package / "src").glob("*/py.typed"))
    assert typed, f"{package.name}: src/<module>/py.typed missing"


def test_no_registry_host_names_in_tracked_files() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    hosts = ("pypi" + ".org", "pythonhosted" + ".org", "deb.debian" + ".org", "registry.npmjs" + ".org")
    offenders = []
    for name in tracked:
        path = ROOT / name
        if path.is_file() and path.stat().st_size < 5_000_000:
            text = path.read_bytes().decode("utf-8", "replace")
            offenders += [f"{name}: {host}" for host in hosts if host in text]
    assert offenders == []
