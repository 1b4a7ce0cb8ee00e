"""Images on a node's Docker daemon (and the docker-compatible client other image stores extend), and the verified image archive in the shared directory.

The archive is ``docker save`` of every image to prepare, written once to ``SHARED_DIR/images`` under a
temporary name and renamed into place; its sha256, size and the image ids it holds go into a small manifest
written atomically after it. A node verifies size and sha256 against the manifest before ``docker load``,
and the image ids after: a tampered or truncated archive is refused, never loaded.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_core.fetch import sha256_file

MANIFEST_NAME = "archive-manifest.json"
MANIFEST_SCHEMA = 1
_CHUNK = 1 << 20


class ImageError(RuntimeError):
    """A docker command failed, or an archive does not match its manifest."""


def docker_client() -> str:
    """$ATOMDYN_DOCKER, else docker.io's client (matches the 20.10 engine), else the first docker on PATH."""
    explicit = os.environ.get("ATOMDYN_DOCKER")
    if explicit:
        return explicit
    if Path("/usr/bin/docker").exists():
        return "/usr/bin/docker"
    return shutil.which("docker") or "docker"


@dataclass(frozen=True)
class DockerCLI:
    host: str
    client: str = ""

    name = "docker"
    _package = "docker.io"

    def command(self) -> str:
        return self.client or docker_client()

    def env(self) -> dict[str, str]:
        """The client's environment: the job's, with the daemon named."""
        return {**os.environ, "DOCKER_HOST": self.host}

    @property
    def where(self) -> str:
        return self.host

    def run(self, *args: str, timeout: float = 3600.0) -> str:
        try:
            done = subprocess.run(
                [self.command(), *args],
                capture_output=True,
                text=True,
                env=self.env(),
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError as exc:
            raise ImageError(f"no {self.name} client ({exc.filename}); install {self._package}") from exc
        except subprocess.TimeoutExpired as exc:
            raise ImageError(f"{self.name} {args[0]} did not finish within {timeout:.0f} s") from exc
        if done.returncode != 0:
            tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:])
            raise ImageError(f"{self.name} {args[0]} at {self.where} failed: {tail}")
        return done.stdout.strip()

    def version(self) -> str:
        return self.run("version", "--format", "{{.Server.Version}}", timeout=20)

    def describe(self, version: str) -> str:
        """The node check's row of this store, given ``version()``."""
        return f"{self.host} (engine {version})"

    def image_id(self, reference: str) -> str | None:
        try:
            return self.run("image", "inspect", "--format", "{{.Id}}", reference, timeout=60) or None
        except ImageError:
            return None

    def image_ids(self, tags: Sequence[str]) -> dict[str, str | None]:
        return {tag: self.image_id(tag) for tag in tags}

    def save_args(self, path: Path, tags: Sequence[str]) -> list[str]:
        return ["save", "-o", str(path), *tags]

    def run_args(self) -> list[str]:
        """``run`` of an image the node already has, as the runtime runs it."""
        return [self.command(), "run", "--rm"]


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created) while the block runs: two node jobs never write one place at
    once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class Manifest:
    archive: Path
    sha256: str
    size: int
    images: dict[str, str]  # tag -> image id
    saved_on: str
    created: str

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": MANIFEST_SCHEMA,
            "archive": self.archive.name,
            "sha256": self.sha256,
            "size": self.size,
            "images": dict(sorted(self.images.items())),
            "saved_on": self.saved_on,
            "created": self.created,
        }


def read_manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST_NAME
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ImageError(f"no image archive manifest at {path} (run `invoke nodes.prepare`)") from exc
    except (OSError, ValueError) as exc:
        raise ImageError(f"image archive manifest {path} is unreadable: {exc}") from exc
    try:
        if raw["schema_version"] != MANIFEST_SCHEMA:
            raise ImageError(f"{path}: schema_version {raw['schema_version']!r}, expected {MANIFEST_SCHEMA}")
        name = str(raw["archive"])
        if "/" in name or name.startswith("."):
            raise ImageError(f"{path}: archive {name!r} must be a file name in {directory}")
        return Manifest(
            archive=directory / name,
            sha256=str(raw["sha256"]),
            size=int(raw["size"]),
            images={str(k): str(v) for k, v in dict(raw["images"]).items()},
            saved_on=str(raw["saved_on"]),
            created=str(raw["created"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ImageError(f"{path}: missing or bad field ({exc})") from exc


def manifest_covers(directory: Path, tags: Sequence[str]) -> Manifest | None:
    """The manifest when it holds exactly ``tags`` and its archive has the recorded size; else None."""
    try:
        manifest = read_manifest(directory)
    except ImageError:
        return None
    if set(manifest.images) != set(tags):
        return None
    if not manifest.archive.is_file() or manifest.archive.stat().st_size != manifest.size:
        return None
    return manifest


def recorded_ids(directory: Path, tags: Sequence[str]) -> dict[str, str]:
    """Image ids the archive manifest records for those of ``tags`` it holds (empty without a manifest)."""
    try:
        manifest = read_manifest(directory)
    except ImageError:
        return {}
    return {t: manifest.images[t] for t in tags if t in manifest.images}


def save_archive(docker: DockerCLI, tags: Sequence[str], directory: Path, node: str) -> Manifest:
    """``docker save`` the images into ``directory`` (temporary name, then rename), then the manifest."""
    ids = docker.image_ids(tags)
    missing = [t for t, i in ids.items() if i is None]
    if missing:
        raise ImageError(f"cannot save: {', '.join(missing)} not present on {node}")
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".saving-{node}-{os.getpid()}.tar"
    try:
        docker.run(*docker.save_args(tmp, sorted(tags)))
        sha = sha256_file(tmp)
        final = directory / f"images-{sha[:16]}.tar"
        tmp.replace(final)
    finally:
        tmp.unlink(missing_ok=True)
    manifest = Manifest(
        archive=final,
        sha256=sha,
        size=final.stat().st_size,
        images={t: str(i) for t, i in ids.items()},
        saved_on=node,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    atomic_write_json(directory / MANIFEST_NAME, manifest.to_json())
    for old in directory.glob("images-*.tar"):  # earlier archives: the manifest no longer names them
        if old != final:
            old.unlink(missing_ok=True)
    return manifest


def verify_archive(manifest: Manifest, copy_to: Path | None = None) -> None:
    """Size and sha256 of the archive against the manifest; ImageError (nothing loaded) on any mismatch.
    ``copy_to``: also copy the bytes that were hashed there, so what is loaded is exactly what was verified
    (the shared file could change between the check and the load)."""
    path = manifest.archive
    if not path.is_file():
        raise ImageError(f"image archive {path} is missing (manifest names it)")
    size = path.stat().st_size
    if size != manifest.size:
        raise ImageError(
            f"image archive {path} has {size} bytes, its manifest says {manifest.size}: refusing to load it"
        )
    digest = hashlib.sha256()
    with path.open("rb") as src, copy_to.open("wb") if copy_to else open(os.devnull, "wb") as out:
        for chunk in iter(lambda: src.read(_CHUNK), b""):
            digest.update(chunk)
            out.write(chunk)
    actual = digest.hexdigest()
    if actual != manifest.sha256:
        raise ImageError(
            f"image archive {path} sha256 {actual} does not match its manifest ({manifest.sha256}): "
            "refusing to load it"
        )


def load_verified(docker: DockerCLI, manifest: Manifest) -> dict[str, str]:
    """Verify into a node-local copy, ``docker load`` that copy, then check every tag has the manifest's
    image id; return tag -> id."""
    with tempfile.TemporaryDirectory(prefix="atomdyn-load-") as tmp:
        private = Path(tmp) / manifest.archive.name
        verify_archive(manifest, copy_to=private)
        docker.run("load", "-i", str(private))
    return check_ids(docker, manifest.images)


def check_ids(docker: DockerCLI, expected: Mapping[str, str]) -> dict[str, str]:
    ids = docker.image_ids(list(expected))
    wrong = [f"{t} is {ids[t] or 'absent'}, expected {i}" for t, i in expected.items() if ids[t] != i]
    if wrong:
        raise ImageError("image ids after loading do not match the manifest: " + "; ".join(wrong))
    return {t: str(i) for t, i in ids.items()}
