"""``atomdyn-images build --rehearsal``: the whole image build on this machine, from stand-ins, for real.

What is real: the lock, the production Dockerfile rendering, the Dynamo wheels (fetched through pip's index and
verified against the lock), the patch series, the nixl-compat and dmabuf-shim wheels built from packages/, the
hash checks on the host and inside the build, BuildKit and its cache. What stands in: the ATOM base image (a
tiny image made from this host), the ATOM wheel and the UCX/NIXL archives (their hashes are not in the lock
yet, hence allow-unrecorded), and the UCX/NIXL compile. Every override is in the labels and the build record,
and the images are tagged ``…-rehearsal`` so they cannot be mistaken for a release.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from atomdyn_core.fetch import FetchError, fetch_wheel, print_progress
from atomdyn_core.lock import Lock
from atomdyn_images import render, standin, standin_inputs
from atomdyn_images.build import DMABUF_SHIM, NIXL_COMPAT, BuildOptions, BuildRecord, build
from atomdyn_images.daemon import PrivateDaemon, start_daemon
from atomdyn_images.engine import Docker, echo_progress
from atomdyn_images.patching import read_series

STATE_DIR = Path(".atomdyn")
REHEARSAL_DIR = STATE_DIR / "docker-rehearsal"
STANDIN_TAG = "atomdyn-standin:rehearsal"
COMPAT_PACKAGES = tuple(project.replace("_", "-") for project in (NIXL_COMPAT, DMABUF_SHIM))
_SKIP_PARTS = {"build", "dist", "_skbuild", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


class RehearsalError(RuntimeError):
    """The rehearsal cannot run (busy directory, no repository, a wheel that would not install)."""


@dataclass(frozen=True)
class Settings:
    repo: Path  # the repository root: packages/, patches/, .atomdyn/
    root: Path  # daemon data-root and socket, mirrors, build context and record
    docker_host: str = ""  # an existing daemon instead of a private one
    keep_daemon: bool = False
    atom_variant: str = ""
    patches: Path | None = None
    quiet: bool = False

    @property
    def workdir(self) -> Path:
        return self.root / "build"


@dataclass
class Result:
    record_path: Path
    first: BuildRecord
    first_s: float
    second: BuildRecord
    second_s: float
    daemon: str  # what happened to the daemon, for the report

    @property
    def second_all_cached(self) -> bool:
        return all(image.all_cached for image in self.second.images)


def repo_root(lock: Lock) -> Path:
    if lock.path is None:
        raise RehearsalError("the rehearsal needs a lock read from the repository (release-lock.json)")
    root = lock.path.resolve().parent
    if not (root / "packages").is_dir():
        raise RehearsalError(
            f"{root} (where the lock is) has no packages/: the rehearsal runs in the repository"
        )
    return root


@contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise RehearsalError(
                f"another rehearsal is using {root}; wait for it or pass --rehearsal-dir"
            ) from exc
        yield


def _link(path: Path, directory: Path) -> None:
    """Put a verified cache file into the mirror (a hard link; a copy across file systems), atomically."""
    target = directory / path.name
    if target.is_file() and os.path.samefile(target, path):
        return
    tmp = directory / f".{path.name}.tmp"
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:
        shutil.copyfile(path, tmp)
    tmp.replace(target)


def atom_variant(lock: Lock, wanted: str) -> str:
    if wanted:
        return wanted
    variants = sorted(w.variant or w.name for w in lock.wheels.values() if w.project == "atom")
    return variants[0] if variants else ""


def stage_wheel_mirror(
    lock: Lock, variant: str, mirror: Path, wheel_cache: Path, quiet: bool = False
) -> None:
    """The real Dynamo wheels (verified against the lock) and a stand-in ATOM wheel, and nothing else."""
    mirror.mkdir(parents=True, exist_ok=True)
    keep = set()
    for name in render.BASE_WHEELS:
        wheel = lock.wheels.get(name)
        if wheel is None:
            raise RehearsalError(f"release-lock.json lacks wheel {name!r} ($.wheels)")
        try:
            fetched = fetch_wheel(wheel, wheel_cache, progress=None if quiet else print_progress)
        except FetchError as exc:
            raise RehearsalError(f"the rehearsal uses the real {name} wheel: {exc}") from exc
        _link(fetched.path, mirror)
        keep.add(fetched.path.name)
    atom = render.atom_wheel(lock, variant)
    keep.add(standin_inputs.write_atom_wheel(mirror, atom.version, atom.filename).name)
    for entry in mirror.iterdir():
        if entry.name not in keep:
            entry.unlink()


def stage_source_mirror(lock: Lock, patches: Path, directory: Path) -> None:
    """Stand-in NIXL (the lines the patch series expects) and UCX archives under their mirror names."""
    for name in ("nixl", "ucx"):
        if name not in lock.sources:
            raise RehearsalError(f"release-lock.json has no source {name!r} ($.sources.{name})")
    nixl, ucx = lock.sources["nixl"], lock.sources["ucx"]
    standin_inputs.write_source_archive(
        directory, "nixl", nixl.commit, standin_inputs.preimage_files(read_series(patches))
    )
    standin_inputs.write_source_archive(directory, "ucx", ucx.commit, {})


def _package_files(package: Path) -> list[Path]:
    """The package's tracked and untracked-but-not-ignored files (so build outputs never count)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "."],
        cwd=package,
        capture_output=True,
        check=False,
    )
    if listed.returncode == 0:
        names = [Path(n) for n in listed.stdout.decode().split("\0") if n]
    else:
        names = [p.relative_to(package) for p in package.rglob("*") if p.is_file()]
    return sorted(n for n in names if not set(n.parts) & _SKIP_PARTS and (package / n).is_file())


def compat_wheels(repo: Path, cache: Path, python_version: str, quiet: bool = False) -> Path:
    """nixl-compat and dmabuf-shim wheels built from packages/, reused while their sources are unchanged.

    Built from a copy of each package (not in place), so a developer's build directories are neither used nor
    disturbed. dmabuf-shim is native: it is built by this interpreter and must match the stand-in's Python.
    """
    copies: dict[str, list[Path]] = {}
    digest = hashlib.sha256(f"python {sys.version_info[0]}.{sys.version_info[1]}\n".encode())
    for package in COMPAT_PACKAGES:
        source = repo / "packages" / package
        if not (source / "pyproject.toml").is_file():
            raise RehearsalError(f"{source} is not a package (no pyproject.toml)")
        copies[package] = _package_files(source)
        for name in copies[package]:
            digest.update(f"{package}/{name}\0".encode() + (source / name).read_bytes())
    target = cache / digest.hexdigest()[:16]
    if not target.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".compat-", dir=cache) as tmp:
            for package, names in copies.items():
                for name in names:
                    dest = Path(tmp) / "src" / package / name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(repo / "packages" / package / name, dest)
            command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", f"{tmp}/out"]
            command += [f"{tmp}/src/{package}" for package in COMPAT_PACKAGES]
            if not quiet:
                print(
                    f"rehearsal: building {', '.join(COMPAT_PACKAGES)} wheels from packages/", file=sys.stderr
                )
            built = subprocess.run(command, capture_output=True, text=True, check=False)
            if built.returncode != 0:
                tail = " | ".join((built.stderr or built.stdout).strip().splitlines()[-6:])
                raise RehearsalError(f"pip wheel of {', '.join(COMPAT_PACKAGES)} failed: {tail}")
            try:
                Path(f"{tmp}/out").rename(target)
            except OSError:
                if not target.is_dir():  # not a concurrent rehearsal that got there first
                    raise
    wanted = f"cp{python_version.replace('.', '')}"
    for wheel in target.glob("*.whl"):
        python_tag = wheel.name[: -len(".whl")].split("-")[-3]
        if python_tag.startswith("cp") and python_tag != wanted:
            raise RehearsalError(
                f"{wheel.name} is built for {python_tag}, but the stand-in base runs Python {python_version} "
                f"({standin.SYSTEM_PYTHON}): run the rehearsal with a Python {python_version} interpreter"
            )
    return target


def _ensure_standin(docker: Docker) -> None:
    if (
        docker.image_id(STANDIN_TAG) is None
        or docker.labels(STANDIN_TAG).get(standin.RECIPE_LABEL) != standin.RECIPE
    ):
        note = f"{render.REHEARSAL_NOTE} (stand-in for the ATOM base image)"
        standin.make_standin(docker, STANDIN_TAG, labels={render.REHEARSAL_LABEL: note})


def _timed_build(lock: Lock, options: BuildOptions, docker: Docker) -> tuple[BuildRecord, float]:
    started = time.monotonic()
    record = build(lock, options, docker)
    return record, time.monotonic() - started


def rehearse(lock: Lock, settings: Settings, say: Callable[[str], None] = print) -> Result:
    """Stage the inputs, build both images twice (the second from cache), stop the daemon unless kept."""
    with _exclusive(settings.root):
        daemon: PrivateDaemon | None = None
        if settings.docker_host:
            docker = Docker(host=settings.docker_host)
            fate = f"used the daemon at {settings.docker_host}"
        else:
            daemon = start_daemon(settings.root)
            docker = daemon.docker()
            how = "started" if daemon.started_here else "reused"
            say(
                f"rehearsal: dockerd {how} (pid {daemon.pid}, {daemon.host}, data-root {settings.root / 'data'})"
            )
            fate = ""
        stopped = False
        try:
            docker.stream = None if settings.quiet else echo_progress
            docker.ping()
            variant = atom_variant(lock, settings.atom_variant)
            patches = settings.patches or settings.repo / "patches"
            mirror, sources = settings.root / "mirror", settings.root / "sources"
            stage_wheel_mirror(lock, variant, mirror, settings.repo / STATE_DIR / "wheels", settings.quiet)
            stage_source_mirror(lock, patches, sources)
            compat = compat_wheels(
                settings.repo,
                settings.repo / STATE_DIR / "compat-wheels",
                standin.python_version(),
                settings.quiet,
            )
            _ensure_standin(docker)
            options = BuildOptions(
                workdir=settings.workdir,
                atom_variant=variant,
                base=STANDIN_TAG,
                mirror=str(mirror),
                source_mirror=str(sources),
                patches=patches,
                compat_wheels=compat,
                allow_unrecorded=True,
                native="stand-in",
                network="none",
                rehearsal=True,
            )
            first, first_s = _timed_build(lock, options, docker)
            second, second_s = _timed_build(lock, options, docker)
        finally:
            if daemon is not None and not settings.keep_daemon:
                daemon.stop()
                stopped = True
            elif daemon is not None:
                daemon.detach()
        if daemon is not None:
            fate = (
                f"dockerd (pid {daemon.pid}) stopped; images kept in {settings.root / 'data'}"
                if stopped
                else f"dockerd kept running: pid {daemon.pid}, DOCKER_HOST={daemon.host} (stop: kill {daemon.pid})"
            )
        return Result(settings.workdir / "build-record.json", first, first_s, second, second_s, fate)


def report(result: Result) -> list[str]:
    def state(record: BuildRecord) -> str:
        ran = sum(s == "RAN" for image in record.images for s in image.steps.values())
        return "every layer cached" if ran == 0 else f"{ran} steps ran"

    lines = [f"{image.target}: {image.tags[0]} {image.image_id}" for image in result.second.images]
    lines.append("overrides: " + ", ".join(result.second.overrides))
    lines.append(f"record: {result.record_path} (rehearsal: {str(result.second.rehearsal).lower()})")
    lines.append(f"rehearsal first build:  {result.first_s:6.2f} s ({state(result.first)})")
    lines.append(f"rehearsal second build: {result.second_s:6.2f} s ({state(result.second)})")
    lines.append(result.daemon)
    return lines
