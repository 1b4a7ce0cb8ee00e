"""Fixtures: a private Docker daemon, a stand-in base image, a test lock with small real wheels and sources."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from atomdyn_images.engine import Docker, DockerError
from atomdyn_images.standin import make_standin
from atomdyn_images.wheelfile import write_wheel

REPO = Path(__file__).resolve().parents[3]
PATCHES = REPO / "patches"
DAEMON_DEADLINE_S = 30.0


def need(condition: bool, what: str) -> None:
    """Skip locally when infrastructure is missing; in CI that is a failure (a missing install step)."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing in CI: .ci/run must install it")
    pytest.skip(f"{what} is not available here")


def preimage_tree(root: Path, patch: Path) -> Path:
    """A source tree holding, for each file the patch touches, the lines its hunks expect (with filler between)."""
    current: Path | None = None
    chunks: dict[Path, list[str]] = {}
    for line in patch.read_text(encoding="utf-8").splitlines():
        if line.startswith("--- a/"):
            current = root / line[len("--- a/") :]
            chunks.setdefault(current, [])
        elif line.startswith("@@") and current is not None:
            chunks[current].append(f"// filler before hunk {len(chunks[current])}")
        elif current is not None and line[:1] in (" ", "-") and not line.startswith("---"):
            chunks[current].append(line[1:])
        elif line.startswith("diff --git"):
            current = None
    for path, lines in chunks.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def unmount_below(root: Path) -> None:
    """dockerd leaves mounts under its exec root (exec/netns/default): unmount them, deepest first."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)


@dataclass
class Daemon:
    docker: Docker
    root: Path
    standin: str


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    dockerd = shutil.which("dockerd") or ("/usr/sbin/dockerd" if Path("/usr/sbin/dockerd").exists() else None)
    need(dockerd is not None, "dockerd (Debian package docker.io)")
    need(shutil.which("git") is not None, "git")
    assert dockerd is not None
    root = Path(tempfile.mkdtemp(prefix="atomdyn-img-dockerd-"))
    sock = root / "docker.sock"
    log = (root / "dockerd.log").open("wb")
    proc = subprocess.Popen(
        [dockerd, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "-H", f"unix://{sock}",
         "--pidfile", str(root / "dockerd.pid"), "--iptables=false", "--ip6tables=false", "--ip-forward=false",
         "--ip-masq=false", "--bridge=none"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    docker = Docker(host=f"unix://{sock}")
    deadline = time.monotonic() + DAEMON_DEADLINE_S
    try:
        while True:
            try:
                docker.ping()
                break
            except DockerError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"dockerd at {sock} not ready within {DAEMON_DEADLINE_S} s: {exc}; log: {root / 'dockerd.log'}"
                    ) from exc
                time.sleep(0.1)  # polling interval for the daemon socket, bounded by the deadline above
        standin = f"atomdyn-standin-{root.name.lower()}:test"
        make_standin(docker, standin)
        yield Daemon(docker, root, standin)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        unmount_below(root)
        shutil.rmtree(root, ignore_errors=True)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wheel_entry(path: Path, project: str, version: str, roles: list[str], **extra: str) -> dict[str, object]:
    entry: dict[str, object] = {
        "filename": path.name, "source": "pypi", "project": project, "version": version,
        "size": path.stat().st_size, "sha256": _sha(path), "roles": roles,
    }  # fmt: skip
    entry.update(extra)
    return entry


def _tarball(tree: Path, top: str, dest: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(str(tree), arcname=top)
    dest.write_bytes(buffer.getvalue())
    return dest


@dataclass
class Fixture:
    lock_path: Path
    mirror: Path
    source_mirror: Path
    compat: Path
    workdir: Path
    raw: dict[str, object]

    def write_lock(self, raw: dict[str, object]) -> Path:
        self.lock_path.write_text(json.dumps(raw, indent=2), encoding="utf-8")
        return self.lock_path


def make_fixture(tmp: Path, name: str) -> Fixture:
    """Small real wheels (with the entry points and modules the validator inspects) and a lock that pins them."""
    mirror, sources, compat = tmp / "mirror", tmp / "sources", tmp / "compat"
    for directory in (mirror, sources, compat):
        directory.mkdir(parents=True)
    dynamo = write_wheel(mirror, "ai-dynamo", "1.3.0.post1",
                         {"dynamo/frontend/__init__.py": "", "dynamo/vllm/__init__.py": ""})  # fmt: skip
    runtime = write_wheel(mirror, "ai-dynamo-runtime", "1.3.0.post1", {"dynamo/runtime/__init__.py": ""})
    atom_files = {
        "atom/__init__.py": "",
        "atom/plugin/__init__.py": "",
        "atom/plugin/vllm/__init__.py": "",
        "atom/plugin/vllm/register.py": (
            "def register_platform():\n    return 'atom.plugin.vllm.platform.AtomPlatform'\n\n"
            "def register_model():\n    import vllm\n"
            "    vllm.ModelRegistry.register_model('Qwen3ForCausalLM', 'atom.models.qwen3:Qwen3ForCausalLM')\n"
        ),
    }
    atom_eps = {
        "vllm.platform_plugins": {"atom": "atom.plugin.vllm.register:register_platform"},
        "vllm.general_plugins": {"atom_model_registry": "atom.plugin.vllm.register:register_model"},
    }
    atom = write_wheel(mirror, "atom", "0.1.6rc0+rocm7.1", atom_files, atom_eps)
    write_wheel(compat, "nixl-compat", "0.1.0", {"rixl/__init__.py": "", "nixl_compat/__init__.py": ""})
    write_wheel(compat, "dmabuf-shim", "0.1.0", {"dmabuf_shim/__init__.py": ""})
    tree = preimage_tree(tmp / "nixl-tree", PATCHES / "0001-ucx-opt-in-host-classified-vram.patch")
    commit = "53be1d43a415ff3a14b8bc942ca7242307adb70d"
    archive = _tarball(tree, f"nixl-{commit}", sources / f"nixl-{commit}.tar.gz")
    raw: dict[str, object] = {
        "schema_version": 1,
        "release": {"name": name, "version": "1.3.0-0.1.6rc0"},
        "images": {"atom_base": {"repository": "rocm/atom-dev", "tag": "v0.1.6-rc0", "digest": "unrecorded"}},
        "sources": {
            "dynamo": {"repository": "https://github.com/ai-dynamo/dynamo", "version": "1.3.0",
                       "commit": "8ce9e22f11576402102ea9d8b8e46233f5430a0d"},
            "atom": {"repository": "https://github.com/ROCm/ATOM", "version": "0.1.6rc0",
                     "commit": "f9017b58b8369a55d14e153b51cadd81ab2ba65a"},
            "ucx": {"repository": "https://github.com/openucx/ucx", "commit": "b56982d8076ac54eb9a0d4a7dbea7852ede75508",
                    "archive": {"url": "https://github.com/openucx/ucx/archive/b5.tar.gz", "sha256": "unrecorded",
                                "size": "unrecorded"}},
            "nixl": {"repository": "https://github.com/ai-dynamo/nixl", "commit": commit,
                     "archive": {"url": f"https://github.com/ai-dynamo/nixl/archive/{commit}.tar.gz",
                                 "sha256": _sha(archive), "size": archive.stat().st_size}},
        },
        "wheels": {
            "ai-dynamo": _wheel_entry(dynamo, "ai-dynamo", "1.3.0.post1", ["image-base"]),
            "ai-dynamo-runtime": _wheel_entry(runtime, "ai-dynamo-runtime", "1.3.0.post1", ["image-base"]),
            "atom-rocm7.1": _wheel_entry(atom, "atom", "0.1.6rc0+rocm7.1", ["image-base"], variant="rocm7.1"),
        },
    }  # fmt: skip
    fixture = Fixture(tmp / "release-lock.json", mirror, sources, compat, tmp / "work", raw)
    fixture.write_lock(raw)
    return fixture


@pytest.fixture
def fixture(tmp_path: Path) -> Fixture:
    return make_fixture(tmp_path, f"atomdyn-test-{tmp_path.name.lower().replace('_', '-')}")
