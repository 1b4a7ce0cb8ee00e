"""The SGLang parser's environment (.venv-sglang): its hash-pinned requirements agree with the lock and with
Dynamo's pin of SGLang, leave SGLang's CUDA stack out, and the installed environment (where bootstrap made it) is
what those files say."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from atomdyn_core.lock import load_lock

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = (ROOT / "requirements" / "sglang.txt", ROOT / "requirements" / "sglang-wheel.txt")
VENV = ROOT / ".venv-sglang"
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+)", re.M)
# What SGLang's own metadata requires and the parser never imports: none of it may come in.
CUDA_STACK = ("flashinfer-python", "flashinfer-cubin", "cuda-python", "nvidia-cutlass-dsl", "sglang-kernel")


def pins() -> dict[str, tuple[str, set[str]]]:
    """project (normalised) -> (version, sha256 hashes) of both requirement files."""
    found: dict[str, tuple[str, set[str]]] = {}
    for path in REQUIREMENTS:
        for name, version, hashes in _PIN.findall(path.read_text()):
            found[re.sub(r"[-_.]+", "-", name).lower()] = (
                version,
                set(re.findall(r"sha256:([0-9a-f]{64})", hashes)),
            )
    return found


def test_the_files_pin_the_lock_s_wheels_and_dynamo_s_sglang() -> None:
    lock = load_lock(ROOT / "release-lock.json")
    found = pins()
    for entry in ("torch-cpu-cp311", "ai-dynamo", "ai-dynamo-runtime"):
        wheel = lock.wheels[entry]
        version, hashes = found[wheel.project.lower()]
        assert version == wheel.version, entry
        assert wheel.sha256 in hashes, f"{entry}: the lock's sha256 is not among the requirements' hashes"
    assert found["sglang"][0] == "0.5.14"  # ai-dynamo 1.3.0.post1's [sglang] extra
    assert found["torch"][0].endswith("+cpu")
    assert not [name for name in CUDA_STACK if name in found]
    assert not [name for name in found if name.startswith("nvidia-")]


def test_the_installed_environment_is_what_the_files_say() -> None:
    python = VENV / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(
                f"{VENV} is missing: scripts/bootstrap.sh installs it (scripts/install_sglang_parser.sh)"
            )
        pytest.skip(f"{VENV} not installed (scripts/install_sglang_parser.sh)")
    probe = (
        "import importlib.metadata as m, json, torch\n"
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))\n"
        "print(torch.version.cuda)\n"
    )
    done = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    installed_text, cuda = done.stdout.splitlines()[-2:]
    installed = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in json.loads(installed_text).items()}
    assert cuda == "None"
    wrong = {
        name: (version, installed.get(name))
        for name, (version, _) in pins().items()
        if installed.get(name) != version
    }
    assert not wrong, f"installed versions differ from the files (pinned, installed): {wrong}"
    assert not [name for name in installed if name.startswith("nvidia-") or name in CUDA_STACK]
