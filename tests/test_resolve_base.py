"""`nox -s update_lock -- --resolve-base` against a real registry: Debian's docker-registry on loopback, started by
the test, holding stand-in images pushed with skopeo from OCI layouts built here (nothing is pulled).

The registry serves plain HTTP on 127.0.0.1, so the command runs with --registry 127.0.0.1:PORT --insecure-loopback:
the only way TLS verification is turned off, shown refused without the flag and for any registry that is not a
loopback address.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from atomdyn_core.lock import load_lock

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_BIN = Path("/usr/bin/docker-registry")  # Debian's docker-registry: the distribution registry
REPOSITORY = "rocm/atom-dev"
VLLM = json.loads((ROOT / "release-lock.json").read_text())["sources"]["vllm"]["commit"]
OTHER_VLLM = "1234567890abcdef1234567890abcdef12345678"
LABEL = "com.rocm.atom.vllm_commit"
RIGHT_TAG = "vllm-v0.22.0-nightly_20260712"  # labelled with the lock's sources.vllm
WRONG_TAG = "vllm-v0.22.0-nightly_20260610"  # labelled with another vLLM commit
NATIVE_TAG = "v0.1.6-rc0"  # no label: ATOM's native target
MULTI_TAG = "vllm-v0.22.0-nightly_20260617"  # amd64 of the right commit beside arm64 of another
RIGHT_LABELS = {LABEL: VLLM, "org.opencontainers.image.title": "stand-in for ATOM's vLLM image"}
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def need(condition: bool, what: str) -> None:
    """Skip locally when infrastructure is missing; in CI that is a failure (a missing install step)."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is missing in CI: requirements/apt.txt lists it")
    pytest.skip(f"{what} is not available here")


@dataclass
class Registry:
    address: str  # 127.0.0.1:PORT
    digests: dict[str, str]  # tag -> the digest skopeo wrote when it pushed it

    def manifest_digest(self, tag: str) -> str:
        """sha256 of the manifest bytes the registry serves for the tag, read over HTTP without skopeo."""
        request = urllib.request.Request(
            f"http://{self.address}/v2/{REPOSITORY}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as answer:
            body: bytes = answer.read()
            assert answer.headers["Docker-Content-Digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
        return "sha256:" + hashlib.sha256(body).hexdigest()


class Layout:
    """An OCI image layout written by hand: one tiny layer, a config carrying the labels."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs" / "sha256").mkdir(parents=True)
        (root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        self.index: list[dict[str, object]] = []

    def blob(self, data: bytes) -> dict[str, object]:
        digest = hashlib.sha256(data).hexdigest()
        (self.root / "blobs" / "sha256" / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    def image(self, labels: dict[str, str] | None, arch: str = "amd64") -> dict[str, object]:
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w", format=tarfile.PAX_FORMAT) as archive:
            data = f"stand-in {arch} {sorted((labels or {}).items())}\n".encode()
            info = tarfile.TarInfo("etc/atomdyn-standin")
            info.size, info.mtime = len(data), 0
            archive.addfile(info, io.BytesIO(data))
        layer = tar.getvalue()
        config: dict[str, object] = {
            "architecture": arch,
            "os": "linux",
            "config": {"Labels": labels} if labels is not None else {},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        }
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                **self.blob(json.dumps(config).encode()),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    **self.blob(gzip.compress(layer, mtime=0)),
                }
            ],
        }
        return {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            **self.blob(json.dumps(manifest).encode()),
            "platform": {"architecture": arch, "os": "linux"},
        }

    def add(self, name: str, descriptor: dict[str, object]) -> None:
        self.index.append({**descriptor, "annotations": {"org.opencontainers.image.ref.name": name}})

    def add_list(self, name: str, *images: dict[str, object]) -> None:
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": images,
        }
        self.add(
            name,
            {"mediaType": "application/vnd.oci.image.index.v1+json", **self.blob(json.dumps(index).encode())},
        )

    def write(self) -> None:
        (self.root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": self.index}))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_registry(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """docker-registry serve on 127.0.0.1:<free port>, storage in tmp; retried if the port was taken meanwhile."""
    for _ in range(5):
        address = f"127.0.0.1:{free_port()}"
        config = tmp / "registry.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {tmp / 'storage'}\n"
            f"http:\n  addr: {address}\n"
        )
        log = (tmp / "registry.log").open("ab")
        process = subprocess.Popen([str(REGISTRY_BIN), "serve", str(config)], stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and process.poll() is None:
            try:
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(f"http://{address}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        return process, address
            except OSError:
                time.sleep(0.1)
        stop(process)
    raise AssertionError(f"docker-registry did not start: {(tmp / 'registry.log').read_text()[-2000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def push(tmp: Path, layout: Path, name: str, address: str, tag: str, *, all_images: bool = False) -> str:
    """skopeo copy from the layout into the registry (Docker's v2s2 format, as docker push writes ATOM's images)."""
    policy = tmp / "policy.json"
    policy.write_text('{"default": [{"type": "insecureAcceptAnything"}]}')
    digest_file = tmp / f"{tag}.digest"
    argv = [
        "skopeo",
        "--policy",
        str(policy),
        "copy",
        "--dest-tls-verify=false",
        "--digestfile",
        str(digest_file),
    ]
    argv += ["--all"] if all_images else ["--format", "v2s2"]
    done = subprocess.run(
        [*argv, f"oci:{layout}:{name}", f"docker://{address}/{REPOSITORY}:{tag}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return digest_file.read_text().strip()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    need(shutil.which("skopeo") is not None, "skopeo (Debian package skopeo)")
    need(REGISTRY_BIN.is_file(), "docker-registry (Debian package docker-registry)")
    tmp = tmp_path_factory.mktemp("registry")
    layout = Layout(tmp / "oci")
    layout.add("right", layout.image(RIGHT_LABELS))
    layout.add("wrong", layout.image({LABEL: OTHER_VLLM}))
    layout.add("native", layout.image(None))
    layout.add_list("multi", layout.image(RIGHT_LABELS), layout.image({LABEL: OTHER_VLLM}, arch="arm64"))
    layout.write()
    process, address = start_registry(tmp)
    try:
        digests = {
            RIGHT_TAG: push(tmp, layout.root, "right", address, RIGHT_TAG),
            WRONG_TAG: push(tmp, layout.root, "wrong", address, WRONG_TAG),
            NATIVE_TAG: push(tmp, layout.root, "native", address, NATIVE_TAG),
            MULTI_TAG: push(tmp, layout.root, "multi", address, MULTI_TAG, all_images=True),
        }
        yield Registry(address, digests)
    finally:
        stop(process)


def lock_with(tmp: Path, tag: str, **entry: object) -> Path:
    raw = json.loads((ROOT / "release-lock.json").read_text())
    raw["images"]["atom_base"].update(tag=tag, **entry)
    path = tmp / "release-lock.json"
    path.write_text(json.dumps(raw, indent=2) + "\n")
    return path


def resolve(lock: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "update_lock.py"),
            "--lock",
            str(lock),
            "--resolve-base",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )


def test_records_the_digest_and_labels_of_the_lock_s_vllm_image(registry: Registry, tmp_path: Path) -> None:
    lock = lock_with(tmp_path, RIGHT_TAG)
    before = json.loads(lock.read_text())
    done = resolve(lock, "--registry", registry.address, "--insecure-loopback")
    assert done.returncode == 0, done.stderr
    after = load_lock(lock)
    image = after.images["atom_base"]
    # The digest skopeo pushed, and the sha256 of the manifest the registry serves, read without skopeo.
    assert image.digest == registry.digests[RIGHT_TAG] == registry.manifest_digest(RIGHT_TAG)
    assert dict(image.labels) == RIGHT_LABELS
    assert f"{LABEL}={VLLM}" in done.stdout and f"digest {after.digest}" in done.stdout
    raw = json.loads(lock.read_text())
    assert raw["images"]["atom_base"] == {
        **before["images"]["atom_base"],
        "digest": image.digest,
        "labels": RIGHT_LABELS,
    }
    assert {k: v for k, v in raw.items() if k != "images"} == {
        k: v for k, v in before.items() if k != "images"
    }
    # Asked again, the same answer: nothing to write.
    text = lock.read_text()
    again = resolve(lock, "--registry", registry.address, "--insecure-loopback")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("same   image atom_base") and lock.read_text() == text
    # The builder now renders the base by that digest, with no override.
    out = tmp_path / "rendered"
    rendered = subprocess.run(
        [sys.executable, "-m", "atomdyn_images.cli", "render", "--lock", str(lock), "--atom-variant", "rocm7.1",
         "--out", str(out), "--patches", str(ROOT / "patches")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    assert f"FROM {REPOSITORY}@{image.digest}" in (out / "Dockerfile.base").read_text()


def test_a_multi_platform_tag_is_pinned_by_its_list_with_the_amd64_image_s_labels(
    registry: Registry, tmp_path: Path
) -> None:
    lock = lock_with(tmp_path, MULTI_TAG)
    done = resolve(lock, "--registry", registry.address, "--insecure-loopback")
    assert done.returncode == 0, done.stderr
    image = load_lock(lock).images["atom_base"]
    assert image.digest == registry.digests[MULTI_TAG] == registry.manifest_digest(MULTI_TAG)
    assert dict(image.labels) == RIGHT_LABELS  # the arm64 image names another commit: not the one read


def test_a_tag_of_another_vllm_commit_is_refused_naming_both(registry: Registry, tmp_path: Path) -> None:
    lock = lock_with(tmp_path, WRONG_TAG)
    text = lock.read_text()
    done = resolve(lock, "--registry", registry.address, "--insecure-loopback")
    assert done.returncode == 1
    assert (
        f"{REPOSITORY}:{WRONG_TAG} ({registry.digests[WRONG_TAG]}) carries {LABEL}={OTHER_VLLM}"
        in done.stderr
    )
    assert f"but the lock's sources.vllm is {VLLM}" in done.stderr and "the lock is unchanged" in done.stderr
    assert lock.read_text() == text


def test_a_native_tag_without_the_label_is_refused(registry: Registry, tmp_path: Path) -> None:
    lock = lock_with(tmp_path, NATIVE_TAG)
    text = lock.read_text()
    done = resolve(lock, "--registry", registry.address, "--insecure-loopback")
    assert done.returncode == 1
    assert (
        f"{REPOSITORY}:{NATIVE_TAG} ({registry.digests[NATIVE_TAG]}) carries no {LABEL} label" in done.stderr
    )
    assert f"built from sources.vllm {VLLM}" in done.stderr
    assert lock.read_text() == text


def test_the_sglang_image_is_recorded_by_its_digest_and_labels_alone(
    registry: Registry, tmp_path: Path
) -> None:
    """`--image sglang_base` (the sglang engine's base): no vLLM label is asked of it; its MORI is checked in the
    image by atomdyn-validate. The registry's unlabelled stand-in plays it under the test repository."""
    raw = json.loads((ROOT / "release-lock.json").read_text())
    assert raw["images"]["sglang_base"]["digest"] == "unrecorded"
    raw["images"]["sglang_base"].update(repository=REPOSITORY, tag=NATIVE_TAG)
    lock = tmp_path / "release-lock.json"
    lock.write_text(json.dumps(raw, indent=2) + "\n")
    done = resolve(lock, "--image", "sglang_base", "--registry", registry.address, "--insecure-loopback")
    assert done.returncode == 0, done.stderr
    image = load_lock(lock).images["sglang_base"]
    assert image.digest == registry.digests[NATIVE_TAG]
    assert f"record image sglang_base: {REPOSITORY}:{NATIVE_TAG} {image.digest}" in done.stdout
    assert "no label checked" in done.stdout
    assert json.loads(lock.read_text())["images"]["atom_base"] == raw["images"]["atom_base"]  # untouched


def test_a_tag_that_moved_from_the_recorded_digest_is_refused(registry: Registry, tmp_path: Path) -> None:
    recorded = "sha256:" + "ab" * 32
    lock = lock_with(tmp_path, RIGHT_TAG, digest=recorded, labels=RIGHT_LABELS)
    text = lock.read_text()
    done = resolve(lock, "--registry", registry.address, "--insecure-loopback")
    assert done.returncode == 1
    assert f"now points at {registry.digests[RIGHT_TAG]}, but the lock records {recorded}" in done.stderr
    assert lock.read_text() == text


def test_tls_is_verified_unless_the_registry_is_loopback_and_named(
    registry: Registry, tmp_path: Path
) -> None:
    lock = lock_with(tmp_path, RIGHT_TAG)
    text = lock.read_text()
    # By default skopeo verifies TLS: the plain-HTTP registry is not taken.
    verified = resolve(lock, "--registry", registry.address)
    assert verified.returncode == 1
    assert f"skopeo inspect docker://{registry.address}/{REPOSITORY}:{RIGHT_TAG} failed" in verified.stderr
    assert "HTTPS" in verified.stderr
    # --insecure-loopback is refused, before skopeo runs, for a name (even localhost) and without --registry.
    port = registry.address.rsplit(":", 1)[1]
    for extra in (["--registry", f"localhost:{port}"], []):
        done = resolve(lock, *extra, "--insecure-loopback")
        assert done.returncode == 1
        assert "TLS verification is turned off only towards a registry on a loopback address" in done.stderr
    assert lock.read_text() == text


def test_without_skopeo_the_command_says_what_to_install(tmp_path: Path) -> None:
    lock = lock_with(tmp_path, RIGHT_TAG)
    done = resolve(lock, env={**os.environ, "PATH": str(tmp_path / "empty")})
    assert done.returncode == 1
    assert "skopeo is not installed (Debian: apt-get install skopeo; requirements/apt.txt)" in done.stderr
