"""The in-image validator for the SGLang engine's image (platform "sglang"), run for real (a subprocess, stdlib only)
against constructed environments: Dynamo's and SGLang's versions, MORI at the lock's commit (one that contains
ROCm/mori#509's dma-buf offset fix), a ROCm torch, the worker's and MORI's imports."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_validator import install

from atomdyn_images import validator
from atomdyn_images.wheelfile import write_wheel

MORI_COMMIT = "0d05a4d244e803e8366cc693685a266314cc0f2a"  # ROCm/mori#509 itself
BEFORE_FIX = "87235632aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"  # not the lock's commit
EXPECTED = {"ai-dynamo": "1.3.0.post1", "ai-dynamo-runtime": "1.3.0.post1", "sglang": "0.5.14"}
MODULES = {
    "dynamo/__init__.py": "",
    "dynamo/frontend/__init__.py": "",
    "dynamo/sglang/__init__.py": "",
    "dynamo/sglang/args.py": "import sglang.srt.server_args\n",
    "dynamo/sglang/main.py": "import dynamo.sglang.args\n",
}


def make_env(
    tmp: Path,
    *,
    mori_version: str | None = "1.2.2.dev40+g0d05a4d2",
    mori_version_file: str | None = None,
    mori_dist: bool = True,
    hip: str | None = "7.0.51831",
) -> Path:
    site, wheels = tmp / "site", tmp / "wheels"
    site.mkdir()
    wheels.mkdir()
    install(site, write_wheel(wheels, "ai-dynamo", "1.3.0.post1", MODULES))
    install(site, write_wheel(wheels, "ai-dynamo-runtime", "1.3.0.post1", {"dynamo/runtime/__init__.py": ""}))
    sglang = {"sglang/__init__.py": "", "sglang/srt/__init__.py": "", "sglang/srt/server_args.py": ""}
    install(site, write_wheel(wheels, "sglang", "0.5.14", sglang))
    mori = {"mori/__init__.py": "", "mori/io/__init__.py": ""}
    if mori_version_file is not None:
        mori["mori/_version.py"] = f"__version__ = '{mori_version_file}'\n"
    if mori_dist and mori_version is not None:
        install(site, write_wheel(wheels, "amd_mori", mori_version, mori))
    else:
        for name, text in mori.items():
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_text(text)
    hip_value = repr(hip)
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(
        f"__version__ = '2.9.0'\nclass version:\n    hip = {hip_value}\n    cuda = None\n"
    )
    return site


def run(site: Path, tmp: Path, mori_commit: str | None = MORI_COMMIT) -> subprocess.CompletedProcess[str]:
    expected = tmp / "expected.json"
    body: dict[str, object] = {
        "platform": "sglang",
        "versions": EXPECTED,
        "lock_digest": "sha256:" + "0" * 64,
    }
    if mori_commit is not None:
        body["mori_commit"] = mori_commit
    expected.write_text(json.dumps(body))
    command = [sys.executable, "-S", str(Path(validator.__file__)), "--expected", str(expected), "--json"]
    return subprocess.run(command, env={"PYTHONPATH": str(site)}, capture_output=True, text=True, check=False)


def checks(result: subprocess.CompletedProcess[str]) -> dict[str, tuple[bool, str]]:
    body = json.loads(result.stdout)
    return {c["name"]: (c["ok"], c["reason"]) for c in body["checks"]}


def test_the_sglang_image_passes(tmp_path: Path) -> None:
    result = run(make_env(tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    found = checks(result)
    assert list(found) == ["dynamo-version", "sglang-version", "mori-commit", "torch-rocm", "sglang-imports"]
    assert found["mori-commit"] == (
        True,
        "MORI 0d05a4d2 (amd_mori 1.2.2.dev40+g0d05a4d2) is the lock's 0d05a4d244e8, which contains 0d05a4d2",
    )
    assert "mori.io" in found["sglang-imports"][1]


def test_a_mori_before_the_fix_fails_naming_it(tmp_path: Path) -> None:
    result = run(make_env(tmp_path, mori_version=f"1.2.2.dev39+g{BEFORE_FIX[:8]}"), tmp_path)
    assert result.returncode == 1
    ok, reason = checks(result)["mori-commit"]
    assert not ok
    assert reason.startswith("MORI is 87235632 (amd_mori 1.2.2.dev39+g87235632), the lock says 0d05a4d244e8")
    assert "ROCm/mori#509" in reason


def test_the_commit_in_mori_s_version_file_is_read_without_a_distribution(tmp_path: Path) -> None:
    site = make_env(tmp_path, mori_dist=False, mori_version_file="1.2.2.dev40+g0d05a4d24")
    ok, reason = checks(run(site, tmp_path))["mori-commit"]
    assert ok and "mori/_version.py 1.2.2.dev40+g0d05a4d24" in reason, reason


def test_a_mori_without_a_commit_cannot_be_shown_to_carry_the_fix(tmp_path: Path) -> None:
    site = make_env(tmp_path, mori_version="1.2.2")
    ok, reason = checks(run(site, tmp_path))["mori-commit"]
    assert not ok and "cannot tell which MORI commit" in reason and "#509" in reason


def test_no_mori_and_a_cuda_torch_fail(tmp_path: Path) -> None:
    site = make_env(tmp_path, mori_version=None, hip=None)
    shutil.rmtree(site / "mori")
    found = checks(run(site, tmp_path))
    assert found["mori-commit"] == (
        False,
        "MORI is not installed (no amd_mori distribution, no mori package)",
    )
    assert not found["torch-rocm"][0] and not found["sglang-imports"][0]


@pytest.mark.parametrize("commit", [None, "main", "0D05A4D2"])
def test_the_expected_file_must_name_a_mori_commit(tmp_path: Path, commit: str | None) -> None:
    result = run(make_env(tmp_path), tmp_path, mori_commit=commit)
    assert result.returncode == 2
    assert "'mori_commit'" in result.stderr and "0d05a4d2" in result.stderr
