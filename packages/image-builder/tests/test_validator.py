"""The in-image validator, run for real (a subprocess, stdlib only) against constructed environments."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from dynamo_fakes import BACKEND_ARGS

from atomdyn_images import validator
from atomdyn_images.wheelfile import write_wheel

EXPECTED = {"ai-dynamo": "1.3.0.post1", "ai-dynamo-runtime": "1.3.0.post1", "atom": "0.1.6rc0+rocm7.1"}
REGISTER = (
    "def register_platform():\n    return 'atom.plugin.vllm.platform.AtomPlatform'\n\n"
    "def register_model():\n    import vllm\n"
    "    vllm.ModelRegistry.register_model('Qwen3ForCausalLM', 'atom.models.qwen3:Qwen3ForCausalLM')\n"
)
# A stand-in for vLLM's registry (vLLM needs torch and a GPU build): register_model(arch, "module:Class")
# stores a lazy entry with module_name/class_name, a class is stored with model_cls, as vLLM's _ModelRegistry does.
FAKE_VLLM = (
    "class _Lazy:\n"
    "    def __init__(self, module_name, class_name):\n"
    "        self.module_name, self.class_name = module_name, class_name\n\n"
    "class _Registered:\n"
    "    def __init__(self, model_cls):\n"
    "        self.model_cls = model_cls\n\n"
    "class _ModelRegistry:\n"
    "    def __init__(self):\n"
    "        self.models = {'Qwen3ForCausalLM': _Lazy('vllm.model_executor.models.qwen3', 'Qwen3ForCausalLM')}\n"
    "    def register_model(self, arch, model_cls):\n"
    "        if isinstance(model_cls, str):\n"
    "            self.models[arch] = _Lazy(*model_cls.split(':'))\n"
    "        else:\n"
    "            self.models[arch] = _Registered(model_cls)\n\n"
    "ModelRegistry = _ModelRegistry()\n"
)


def install(site: Path, wheel: Path) -> None:
    """Unpack a wheel into a site directory: what pip does, enough for importlib.metadata."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)


def make_env(
    tmp: Path,
    *,
    dynamo: str | None = "1.3.0.post1",
    atom: str | None = "0.1.6rc0+rocm7.1",
    hip: str | None = "6.4.43482",
    platform_ep: bool = True,
    other_platform: bool = False,
    general_ep: bool = True,
    frontend: bool = True,
    backend_args: str = "1.3",
) -> Path:
    site, wheels = tmp / "site", tmp / "wheels"
    site.mkdir()
    wheels.mkdir()
    if dynamo is not None:
        files = {"dynamo/__init__.py": "", "dynamo/vllm/__init__.py": ""}
        files["dynamo/vllm/backend_args.py"] = BACKEND_ARGS[backend_args]
        if frontend:
            files["dynamo/frontend/__init__.py"] = ""
        install(site, write_wheel(wheels, "ai-dynamo", dynamo, files))
        install(site, write_wheel(wheels, "ai-dynamo-runtime", dynamo, {"dynamo/runtime/__init__.py": ""}))
    if atom is not None:
        eps: dict[str, dict[str, str]] = {}
        if platform_ep:
            eps["vllm.platform_plugins"] = {"atom": "atom.plugin.vllm.register:register_platform"}
        if general_ep:
            eps["vllm.general_plugins"] = {"atom_model_registry": "atom.plugin.vllm.register:register_model"}
        files = {"atom/__init__.py": "", "atom/plugin/__init__.py": "", "atom/plugin/vllm/__init__.py": ""}
        files["atom/plugin/vllm/register.py"] = REGISTER
        install(site, write_wheel(wheels, "atom", atom, files, eps))
    if other_platform:
        eps = {"vllm.platform_plugins": {"other": "otherplat:activate"}}
        files = {"otherplat.py": "def activate():\n    return 'otherplat.Platform'\n"}
        install(site, write_wheel(wheels, "otherplat", "1.0", files, eps))
    hip_value = "None" if hip is None else repr(hip)
    torch_init = f"__version__ = '2.9.0'\nclass version:\n    hip = {hip_value}\n    cuda = None if {hip_value} else '12.8'\n"
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(torch_init)
    (site / "vllm").mkdir()
    (site / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    return site


def run(
    site: Path, tmp: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    expected = tmp / "expected.json"
    expected.write_text(json.dumps({"versions": EXPECTED, "lock_digest": "sha256:" + "0" * 64}))
    # -S: no site-packages, so only the constructed environment (and the standard library) is visible.
    command = [sys.executable, "-S", str(Path(validator.__file__)), "--expected", str(expected), *args]
    return subprocess.run(
        command, env={"PYTHONPATH": str(site), **(env or {})}, capture_output=True, text=True, check=False
    )


def checks(result: subprocess.CompletedProcess[str]) -> dict[str, tuple[bool, str]]:
    body = json.loads(result.stdout)
    return {c["name"]: (c["ok"], c["reason"]) for c in body["checks"]}


def test_complete_environment_passes(tmp_path: Path) -> None:
    result = run(make_env(tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["PASS"] * 7
    assert "PASS atom-qwen3: Qwen3ForCausalLM -> atom.models.qwen3" in lines
    assert lines[-1] == "RESULT PASS"


def test_json_output_for_evidence(tmp_path: Path) -> None:
    result = run(make_env(tmp_path), tmp_path, "--json")
    body = json.loads(result.stdout)
    assert body["ok"] is True
    assert body["expected"] == EXPECTED
    assert [c["name"] for c in body["checks"]] == [
        "dynamo-version", "atom-version", "torch-rocm", "atom-platform", "atom-qwen3", "dynamo-imports",
        "dynamo-disaggregation-flag",
    ]  # fmt: skip


def test_wrong_dynamo_version_fails(tmp_path: Path) -> None:
    result = run(make_env(tmp_path, dynamo="1.2.0"), tmp_path, "--json")
    assert result.returncode == 1
    ok, reason = checks(result)["dynamo-version"]
    assert not ok
    assert "ai-dynamo is 1.2.0, the lock says 1.3.0.post1" in reason


def test_missing_atom_fails_every_atom_check(tmp_path: Path) -> None:
    result = run(make_env(tmp_path, atom=None), tmp_path, "--json")
    found = checks(result)
    assert found["atom-version"] == (False, "atom is not installed (expected 0.1.6rc0+rocm7.1)")
    assert not found["atom-platform"][0]
    assert "no 'vllm.platform_plugins' entry point named 'atom'" in found["atom-platform"][1]
    assert not found["atom-qwen3"][0]


def test_cuda_torch_fails(tmp_path: Path) -> None:
    result = run(make_env(tmp_path, hip=None), tmp_path, "--json")
    ok, reason = checks(result)["torch-rocm"]
    assert not ok
    assert "is not a ROCm build (version.hip=None, cuda='12.8')" in reason


def test_rocm_torch_passes_with_hip_version(tmp_path: Path) -> None:
    assert checks(run(make_env(tmp_path), tmp_path, "--json"))["torch-rocm"] == (
        True,
        "torch 2.9.0, HIP 6.4.43482",
    )


def test_missing_torch_fails(tmp_path: Path) -> None:
    site = make_env(tmp_path)
    (site / "torch" / "__init__.py").unlink()
    (site / "torch").rmdir()
    ok, reason = checks(run(site, tmp_path, "--json"))["torch-rocm"]
    assert not ok
    assert reason.startswith("torch does not import: ModuleNotFoundError")


def test_atom_entry_point_missing(tmp_path: Path) -> None:
    ok, reason = checks(run(make_env(tmp_path, platform_ep=False), tmp_path, "--json"))["atom-platform"]
    assert not ok
    assert "(found: none)" in reason


def test_two_activated_platforms_fail(tmp_path: Path) -> None:
    ok, reason = checks(run(make_env(tmp_path, other_platform=True), tmp_path, "--json"))["atom-platform"]
    assert not ok
    assert "atom=atom.plugin.vllm.platform.AtomPlatform, other=otherplat.Platform" in reason


def test_plugin_disabled_by_environment(tmp_path: Path) -> None:
    site = make_env(tmp_path)
    result = run(site, tmp_path, "--json", env={"ATOM_DISABLE_VLLM_PLUGIN": "1"})
    assert checks(result)["atom-platform"] == (False, "ATOM_DISABLE_VLLM_PLUGIN=1 turns the ATOM plugin off")
    result = run(site, tmp_path, "--json", env={"VLLM_PLUGINS": "something_else"})
    found = checks(result)
    assert "VLLM_PLUGINS excludes 'atom'" in found["atom-platform"][1]
    assert not found["atom-qwen3"][0]


def test_qwen3_left_with_vllm_fails(tmp_path: Path) -> None:
    ok, reason = checks(run(make_env(tmp_path, general_ep=False), tmp_path, "--json"))["atom-qwen3"]
    assert not ok
    assert "no 'vllm.general_plugins' entry point from ATOM" in reason


def test_frontend_not_importable_fails(tmp_path: Path) -> None:
    ok, reason = checks(run(make_env(tmp_path, frontend=False), tmp_path, "--json"))["dynamo-imports"]
    assert not ok
    assert reason.startswith("dynamo.frontend does not import: ModuleNotFoundError")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not found"),
        ("{", "unreadable"),
        ('{"versions": {"atom": "1"}}', "lacks ai-dynamo, ai-dynamo-runtime"),
    ],
)
def test_bad_expected_file(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "expected.json"
    if content is not None:
        path.write_text(content)
    result = subprocess.run(
        [sys.executable, "-S", validator.__file__, "--expected", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_a_dynamo_without_the_role_flag_the_jobs_write_fails(tmp_path: Path) -> None:
    result = run(make_env(tmp_path, backend_args="older"), tmp_path, "--json")
    assert result.returncode == 1
    assert checks(result)["dynamo-disaggregation-flag"] == (
        False,
        "dynamo.vllm has no --disaggregation-mode (the job scripts write it)",
    )


def test_the_pinned_dynamo_takes_the_role_flag() -> None:
    # The real ai-dynamo 1.3.0.post1 of the project environment: its argument group, no vLLM import.
    assert validator.check_dynamo_disaggregation_flag() == validator.Check(
        "dynamo-disaggregation-flag", True, "dynamo.vllm takes --disaggregation-mode agg|prefill|decode"
    )
