"""Fixtures: a private Docker daemon, a stand-in base image, a test lock with small real wheels and sources."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from dynamo_fakes import BACKEND_ARGS

from atomdyn_images import standin_inputs
from atomdyn_images.daemon import start_daemon
from atomdyn_images.engine import Docker
from atomdyn_images.patching import Patch, read_series
from atomdyn_images.standin import make_standin
from atomdyn_images.wheelfile import write_wheel

REPO = Path(__file__).resolve().parents[3]
PATCHES = REPO / "patches"


def need(condition: bool, what: str) -> None:
    """Skip locally when infrastructure is missing; in CI that is a failure (a missing install step)."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing in CI: .ci/run must install it")
    pytest.skip(f"{what} is not available here")


def preimage_tree(root: Path, patch: Path) -> Path:
    """A source tree holding, for each file the patch touches, the lines its hunks expect."""
    return standin_inputs.preimage_tree(root, [Patch(patch.name, patch, "")])


@dataclass
class Daemon:
    docker: Docker
    root: Path
    standin: str


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    need(
        shutil.which("dockerd") is not None or Path("/usr/sbin/dockerd").exists(),
        "dockerd (Debian package docker.io)",
    )
    need(shutil.which("git") is not None, "git")
    root = Path(tempfile.mkdtemp(prefix="atomdyn-img-dockerd-"))
    private = start_daemon(root, reuse=False)
    try:
        # The daemon is this session's alone: a fixed tag (one made from mkdtemp's name was refused by docker
        # when the name ended in "_", about one session in 37: "invalid reference format").
        standin = "atomdyn-standin:test"
        make_standin(private.docker(), standin)
        yield Daemon(private.docker(), root, standin)
    finally:
        private.stop()
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
    dynamo = write_wheel(mirror, "ai-dynamo", "1.3.0.post1", {
        "dynamo/frontend/__init__.py": "", "dynamo/vllm/__init__.py": "",
        "dynamo/vllm/backend_args.py": BACKEND_ARGS["1.3"],  # the role flag the validator has Dynamo parse
    })  # fmt: skip
    runtime = write_wheel(mirror, "ai-dynamo-runtime", "1.3.0.post1", {"dynamo/runtime/__init__.py": ""})
    atom = standin_inputs.write_atom_wheel(mirror, "0.1.6rc0+rocm7.1")
    write_wheel(compat, "nixl-compat", "0.1.0", {"rixl/__init__.py": "", "nixl_compat/__init__.py": ""})
    write_wheel(compat, "dmabuf-shim", "0.1.0", {"dmabuf_shim/__init__.py": ""})
    commit, ucx_commit = (
        "53be1d43a415ff3a14b8bc942ca7242307adb70d",
        "b56982d8076ac54eb9a0d4a7dbea7852ede75508",
    )
    preimage = standin_inputs.preimage_files(read_series(PATCHES))
    archive = standin_inputs.write_source_archive(sources, "nixl", commit, preimage)
    ucx = standin_inputs.write_source_archive(sources, "ucx", ucx_commit, {})
    raw: dict[str, object] = {
        "schema_version": 1,
        "release": {"name": name, "version": "1.3.0-0.1.6rc0"},
        "images": {"atom_base": {"repository": "rocm/atom-dev", "tag": "v0.1.6-rc0", "digest": "unrecorded"}},
        "sources": {
            "dynamo": {"repository": "https://github.com/ai-dynamo/dynamo", "version": "1.3.0",
                       "commit": "8ce9e22f11576402102ea9d8b8e46233f5430a0d"},
            "atom": {"repository": "https://github.com/ROCm/ATOM", "version": "0.1.6rc0",
                     "commit": "f9017b58b8369a55d14e153b51cadd81ab2ba65a"},
            "ucx": {"repository": "https://github.com/openucx/ucx", "commit": ucx_commit,
                    "archive": {"url": f"https://github.com/openucx/ucx/archive/{ucx_commit}.tar.gz",
                                "sha256": _sha(ucx), "size": ucx.stat().st_size}},
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
