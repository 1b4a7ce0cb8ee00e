"""The in-image validator, run for real (a subprocess, stdlib only) against constructed environments."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from dynamo_fakes import BACKEND_ARGS, DYNAMO_VLLM, WORKER_ARGS

from atomdyn_images import validator
from atomdyn_images.wheelfile import write_wheel

EXPECTED = {"ai-dynamo": "1.3.0.post1", "ai-dynamo-runtime": "1.3.0.post1", "atom": "0.1.6rc0+rocm7.1"}
VLLM_COMMIT = "0b3ba88f165976e77ca5e6a7a3f5bba4562b80af"  # the lock's sources.vllm
OTHER_COMMIT = "1234567890abcdef1234567890abcdef12345678"
# vLLM built with setup.py bdist_wheel from a checkout past its last tag (setuptools-scm), then "+rocm…" appended.
VLLM_VERSION = "0.22.1.dev3+g0b3ba88f1.rocm710"
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
    dynamo_vllm: str = "ok",
    vllm: str | None = VLLM_VERSION,
    vllm_version_file: str | None = None,
) -> Path:
    """``vllm``: the installed vLLM distribution's version (None: no vLLM at all, as in a native ATOM image)."""
    site, wheels = tmp / "site", tmp / "wheels"
    site.mkdir()
    wheels.mkdir()
    if dynamo is not None:
        files = {"dynamo/__init__.py": "", "dynamo/vllm/__init__.py": ""}
        files["dynamo/vllm/backend_args.py"] = BACKEND_ARGS[backend_args]
        files.update(DYNAMO_VLLM[dynamo_vllm])
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
    if vllm is not None:
        files = {"vllm/__init__.py": FAKE_VLLM}
        if vllm_version_file is not None:
            files["vllm/_version.py"] = vllm_version_file
        install(site, write_wheel(wheels, "vllm", vllm, files))
    return site


def git_checkout(root: Path, head: str, refs: dict[str, str] | None = None, packed: str = "") -> Path:
    """The files of a git checkout's .git that name its HEAD (what ATOM keeps in /app/vllm)."""
    git = root / ".git"
    git.mkdir(parents=True)
    (git / "HEAD").write_text(head + "\n")
    for ref, commit in (refs or {}).items():
        (git / ref).parent.mkdir(parents=True, exist_ok=True)
        (git / ref).write_text(commit + "\n")
    if packed:
        (git / "packed-refs").write_text(packed)
    return root


def run(
    site: Path,
    tmp: Path,
    *args: str,
    env: dict[str, str] | None = None,
    vllm_commit: str | None = VLLM_COMMIT,
    vllm_source: Path | None = None,
    worker_args: dict[str, list[str]] | None = WORKER_ARGS,
) -> subprocess.CompletedProcess[str]:
    expected = tmp / "expected.json"
    body: dict[str, object] = {"versions": EXPECTED, "lock_digest": "sha256:" + "0" * 64}
    if vllm_commit is not None:
        body["vllm_commit"] = vllm_commit
    expected.write_text(json.dumps(body))
    # Never the host's /app/vllm: a checkout the test made, or a directory that does not exist.
    source = vllm_source or tmp / "no-vllm-checkout"
    # -S: no site-packages, so only the constructed environment (and the standard library) is visible.
    command = [sys.executable, "-S", str(Path(validator.__file__)), "--expected", str(expected), *args]
    if worker_args is not None:  # what invoke validate.gpu passes
        command += ["--worker-args", json.dumps(worker_args)]
    environment = {"PYTHONPATH": str(site), validator.VLLM_SOURCE_ENV: str(source), **(env or {})}
    return subprocess.run(command, env=environment, capture_output=True, text=True, check=False)


def checks(result: subprocess.CompletedProcess[str]) -> dict[str, tuple[bool, str]]:
    body = json.loads(result.stdout)
    return {c["name"]: (c["ok"], c["reason"]) for c in body["checks"]}


def test_complete_environment_passes(tmp_path: Path) -> None:
    result = run(make_env(tmp_path), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["PASS"] * 9
    assert "PASS atom-qwen3: Qwen3ForCausalLM -> atom.models.qwen3" in lines
    assert lines[-1] == "RESULT PASS"


def test_json_output_for_evidence(tmp_path: Path) -> None:
    result = run(make_env(tmp_path), tmp_path, "--json")
    body = json.loads(result.stdout)
    assert body["ok"] is True
    assert body["expected"] == {**EXPECTED, "vllm_commit": VLLM_COMMIT}
    assert [c["name"] for c in body["checks"]] == [
        "dynamo-version", "atom-version", "vllm-commit", "torch-rocm", "atom-platform", "atom-qwen3",
        "dynamo-imports", "dynamo-disaggregation-flag", "dynamo-worker-args",
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


def test_no_vllm_installed_fails_naming_the_native_atom_image(tmp_path: Path) -> None:
    result = run(make_env(tmp_path, vllm=None), tmp_path, "--json")
    assert result.returncode == 1
    ok, reason = checks(result)["vllm-commit"]
    assert not ok
    assert reason.startswith("vLLM is not installed: the base is likely a native ATOM image")
    assert "tagged vllm-v<version>-nightly_<date>" in reason


def test_the_lock_s_vllm_commit_in_the_installed_version_passes(tmp_path: Path) -> None:
    ok, reason = checks(run(make_env(tmp_path), tmp_path, "--json"))["vllm-commit"]
    assert ok, reason
    assert reason == f"vLLM 0b3ba88f1 (version {VLLM_VERSION}) is the lock's 0b3ba88f1659"


def test_another_vllm_commit_fails_naming_both(tmp_path: Path) -> None:
    site = make_env(tmp_path, vllm="0.22.1.dev3+g1234567890.rocm710")
    result = run(site, tmp_path, "--json")
    assert result.returncode == 1
    assert checks(result)["vllm-commit"] == (
        False,
        f"vLLM is 1234567890 (version 0.22.1.dev3+g1234567890.rocm710), the lock says {VLLM_COMMIT}",
    )


def test_the_commit_id_in_vllm_s_version_file_comes_first(tmp_path: Path) -> None:
    """Newer setuptools-scm writes the commit into vllm/_version.py; it wins over the version string."""
    version_file = (
        "__version__ = version = '0.22.1.dev3+g0b3ba88f1'\n"
        f"__commit_id__ = commit_id = 'g{OTHER_COMMIT[:10]}'\n"
    )
    site = make_env(tmp_path, vllm_version_file=version_file)
    ok, reason = checks(run(site, tmp_path, "--json"))["vllm-commit"]
    assert not ok
    assert reason == f"vLLM is {OTHER_COMMIT[:10]} (vllm/_version.py), the lock says {VLLM_COMMIT}"


def test_the_commit_of_atom_s_vllm_checkout_passes(tmp_path: Path) -> None:
    """Exactly on a tag the version names no commit, and _version.py's may be None: /app/vllm's HEAD tells."""
    version_file = "__version__ = version = '0.22.0'\n__commit_id__ = commit_id = None\n"
    site = make_env(tmp_path, vllm="0.22.0+rocm710", vllm_version_file=version_file)
    detached = git_checkout(tmp_path / "app-vllm", VLLM_COMMIT)
    ok, reason = checks(run(site, tmp_path, "--json", vllm_source=detached))["vllm-commit"]
    assert ok, reason
    assert reason == f"vLLM {VLLM_COMMIT} ({detached}/.git HEAD) is the lock's 0b3ba88f1659"


@pytest.mark.parametrize("packed", [False, True])
def test_a_checkout_on_a_branch_is_followed_to_its_commit(tmp_path: Path, packed: bool) -> None:
    site = make_env(tmp_path, vllm="0.22.0")
    ref = "refs/heads/main"
    if packed:
        text = f"# pack-refs with: peeled fully-peeled sorted\n{OTHER_COMMIT} refs/heads/other\n{VLLM_COMMIT} {ref}\n"
        checkout = git_checkout(tmp_path / "app-vllm", f"ref: {ref}", packed=text)
    else:
        checkout = git_checkout(tmp_path / "app-vllm", f"ref: {ref}", refs={ref: VLLM_COMMIT})
    assert checks(run(site, tmp_path, "--json", vllm_source=checkout))["vllm-commit"][0]


def test_no_commit_anywhere_fails_saying_where_it_looked(tmp_path: Path) -> None:
    site = make_env(tmp_path, vllm="0.22.0")
    ok, reason = checks(run(site, tmp_path, "--json"))["vllm-commit"]
    assert not ok
    assert reason.startswith("cannot tell which vLLM commit is installed (looked at: ")
    assert "_version.py commit_id, version 0.22.0, " in reason
    assert f"{tmp_path / 'no-vllm-checkout'}/.git)" in reason


def test_an_expected_file_without_the_vllm_commit_fails_the_check(tmp_path: Path) -> None:
    ok, reason = checks(run(make_env(tmp_path), tmp_path, "--json", vllm_commit=None))["vllm-commit"]
    assert not ok
    assert reason == f"vLLM 0b3ba88f1 (version {VLLM_VERSION}), but the expected file names no vLLM commit"


def test_a_malformed_vllm_commit_in_the_expected_file_is_refused(tmp_path: Path) -> None:
    result = run(make_env(tmp_path), tmp_path, vllm_commit="0b3b")
    assert result.returncode == 2
    assert "'vllm_commit' is '0b3b', expected 7 to 40 lowercase hex digits" in result.stderr


def test_same_commit_needs_seven_digits_either_way() -> None:
    assert validator.same_commit("0b3ba88f1", VLLM_COMMIT)
    assert validator.same_commit(VLLM_COMMIT, "0b3ba88")
    assert not validator.same_commit("0b3ba8", VLLM_COMMIT)
    assert not validator.same_commit("0b3ba88f2", VLLM_COMMIT)


def test_a_dynamo_whose_main_does_not_import_fails_naming_the_missing_module(tmp_path: Path) -> None:
    """dynamo/vllm/__init__.py imports nothing of vLLM: the worker's own modules must be the ones imported."""
    result = run(make_env(tmp_path, dynamo_vllm="main-fails"), tmp_path, "--json")
    assert result.returncode == 1
    found = checks(result)
    assert found["dynamo-imports"] == (
        False,
        "dynamo.vllm.main does not import: ModuleNotFoundError: No module named 'vllm.renderers' "
        "(missing: vllm.renderers)",
    )
    assert found["dynamo-worker-args"][1].startswith("dynamo.vllm.main does not import: ModuleNotFoundError")


def test_a_nixl_ep_without_a_build_for_the_torch_is_named_with_its_fix(tmp_path: Path) -> None:
    result = run(make_env(tmp_path, dynamo_vllm="nixl-ep-torch"), tmp_path, "--json")
    assert result.returncode == 1
    ok, reason = checks(result)["dynamo-imports"]
    assert not ok
    assert reason.startswith(
        "dynamo.vllm.main does not import: ModuleNotFoundError: No module named "
        "'nixl_ep_cu13.nixl_ep_cpp_torch211' (missing: nixl_ep_cu13.nixl_ep_cpp_torch211)"
    ), reason
    assert "nixl_ep has no build for this image's torch" in reason and "without nixl_ep" in reason, reason


def test_each_role_s_argv_goes_through_dynamo_s_parser(tmp_path: Path) -> None:
    ok, reason = checks(run(make_env(tmp_path), tmp_path, "--json"))["dynamo-worker-args"]
    assert ok, reason
    assert reason == "dynamo.vllm's parse_args takes the prefill, decode worker argv"


def test_a_flag_dynamo_s_parser_refuses_fails_naming_the_role_and_the_flag(tmp_path: Path) -> None:
    wrong = {**WORKER_ARGS, "decode": [*WORKER_ARGS["decode"], "--no-such-flag", "1"]}
    result = run(make_env(tmp_path), tmp_path, "--json", worker_args=wrong)
    assert result.returncode == 1
    assert checks(result)["dynamo-worker-args"] == (
        False,
        "decode: dynamo.vllm rejects its argv: unrecognized arguments: --no-such-flag 1",
    )


def test_without_worker_argv_the_check_fails_saying_so(tmp_path: Path) -> None:
    site = make_env(tmp_path)
    result = run(site, tmp_path, "--json", worker_args=None)
    assert result.returncode == 1
    ok, reason = checks(result)["dynamo-worker-args"]
    assert not ok
    assert reason.startswith("no worker argv given: the workers' command lines are unchecked")
    # The launchers pass an empty object for an engine whose workers are not dynamo.vllm (the mock engine).
    none = checks(run(site, tmp_path, "--json", worker_args={}))
    assert none["dynamo-worker-args"] == (True, "no role of the run is a dynamo.vllm worker")


@pytest.mark.parametrize(
    ("value", "message"),
    [("[", "is not JSON"), ("[]", "a JSON object"), ('{"prefill": "--model m"}', "list of strings")],
)
def test_malformed_worker_args_are_refused(tmp_path: Path, value: str, message: str) -> None:
    result = run(make_env(tmp_path), tmp_path, "--worker-args", value, worker_args=None)
    assert result.returncode == 2
    assert message in result.stderr


def test_what_the_checks_print_stays_off_the_json_document(tmp_path: Path) -> None:
    """vLLM logs to stdout when a worker's modules import: --json keeps stdout one JSON document."""
    site = make_env(tmp_path)
    handlers = site / "dynamo" / "vllm" / "handlers.py"
    handlers.write_text("import vllm\nprint('INFO vllm: a log line on stdout')\n")
    result = run(site, tmp_path, "--json")
    assert json.loads(result.stdout)["ok"] is True
    assert "INFO vllm: a log line on stdout" in result.stderr
