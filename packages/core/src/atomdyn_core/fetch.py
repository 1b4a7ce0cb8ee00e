"""Verified fetching of the wheels the lock names.

A file reaches its final name in the cache only after its size and sha256 matched the lock; a mismatch removes
it and raises `VerificationError` naming the file, the expected and the actual hash. Sources: an https URL, a
local mirror directory (a path or ``file://``), for ``source: pypi`` entries pip's configured package index
(``pip download`` of the exact file), and for Debian packages apt's configured sources (``apt-get download
PACKAGE=VERSION``, after apt's own cache), so no index host is written anywhere.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from atomdyn_core.atomic import atomic_write_json
from atomdyn_core.lock import Deb, Source, Wheel, require_recorded

CHUNK = 1 << 20
URL_ATTEMPTS = 3
URL_TIMEOUT_S = 30.0

Progress = Callable[[str, int, int | None], None]


class FetchError(RuntimeError):
    """An input could not be obtained (unreachable URL, missing from the mirror, pip failed)."""


class VerificationError(FetchError):
    """An input was obtained but its size or sha256 differs from the lock; the file has been removed."""


@dataclass
class FetchResult:
    path: Path
    sha256: str
    size: int
    origin: str
    cached: bool
    overrides: list[str] = field(default_factory=list)
    replaced: str = ""  # what was wrong with a cached copy that this fetch replaced


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Artifact:
    """One file to bring in verified: from ``url``, a mirror directory, or pip's index (``pip_requirement``)."""

    what: str  # for messages and provenance, e.g. "wheel nixl" or "source ucx archive"
    filename: str
    sha256: str | None
    size: int | None
    url: str = ""
    pip_requirement: str = ""
    apt_spec: str = ""  # PACKAGE=VERSION for `apt-get download`


def wheel_artifact(wheel: Wheel) -> Artifact:
    return Artifact(
        what=f"wheel {wheel.name}",
        filename=wheel.filename,
        sha256=wheel.sha256,
        size=wheel.size,
        url=wheel.url if wheel.source == "url" else "",
        pip_requirement=wheel.requirement if wheel.source == "pypi" else "",
    )


def deb_artifact(deb: Deb) -> Artifact:
    return Artifact(f"deb {deb.name}", deb.filename, deb.sha256, deb.size, apt_spec=deb.apt_spec)


def source_artifact(source: Source) -> Artifact:
    """A source's archive as the lock pins it (by commit); the source must have an archive entry."""
    if source.archive is None:
        raise FetchError(f"source {source.name} has no archive in the lock ($.sources.{source.name}.archive)")
    return Artifact(
        what=f"source {source.name} archive",
        filename=source.archive_filename,
        sha256=source.archive.sha256,
        size=source.archive.size,
        url=source.archive.url,
    )


def fetch_wheel(
    wheel: Wheel,
    cache_dir: Path,
    *,
    mirror: str | None = None,
    allow_unrecorded: bool = False,
    progress: Progress | None = None,
) -> FetchResult:
    """Bring ``wheel`` into ``cache_dir`` verified; a verified copy already there is reused."""
    return fetch_artifact(
        wheel_artifact(wheel), cache_dir, mirror=mirror, allow_unrecorded=allow_unrecorded, progress=progress
    )


def fetch_artifact(
    artifact: Artifact,
    cache_dir: Path,
    *,
    mirror: str | None = None,
    allow_unrecorded: bool = False,
    progress: Progress | None = None,
) -> FetchResult:
    """Bring ``artifact`` into ``cache_dir``; it gets its final name only once size and sha256 matched."""
    overrides: list[str] = []
    what = artifact.what
    _check_file_name(artifact)
    require_recorded(f"{what} sha256", artifact.sha256, override=allow_unrecorded, overrides_used=overrides)
    require_recorded(f"{what} size", artifact.size, override=allow_unrecorded, overrides_used=overrides)
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / artifact.filename
    replaced = ""
    if final.is_file() and artifact.sha256 is not None:
        if _matches(final, artifact):
            return FetchResult(final, artifact.sha256, final.stat().st_size, "cache", True, overrides)
        # A corrupt copy never keeps the final name, whether or not the fetch below succeeds.
        replaced = (
            f"the cached {final} ({final.stat().st_size} bytes, sha256 {sha256_file(final)}) "
            "did not match the lock and was removed"
        )
        final.unlink()
    try:
        actual_sha, actual_size, origin = _fetch_verified(artifact, final, mirror, progress)
    except FetchError as exc:
        if replaced:
            raise type(exc)(f"{exc}; {replaced}") from exc
        raise
    if overrides:
        # The override travels with the artifact: whoever uses this file can see it was not verified.
        atomic_write_json(
            cache_dir / f"{artifact.filename}.provenance.json",
            {
                "filename": artifact.filename,
                "sha256": actual_sha,
                "size": actual_size,
                "origin": origin,
                "overrides": overrides,
            },
        )
    return FetchResult(final, actual_sha, actual_size, origin, False, overrides, replaced)


def _fetch_verified(
    artifact: Artifact, final: Path, mirror: str | None, progress: Progress | None
) -> tuple[str, int, str]:
    """Obtain into a staging directory beside ``final``; rename into place only once size and sha256 match."""
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=final.parent) as tmp:
        staged = Path(tmp) / artifact.filename
        origin = obtain(artifact, staged, mirror, progress)
        actual_size = staged.stat().st_size
        actual_sha = sha256_file(staged)
        # The hash first: it is the stronger statement and names both digests.
        if artifact.sha256 is not None and actual_sha != artifact.sha256:
            staged.unlink()
            raise VerificationError(
                f"{artifact.filename}: sha256 mismatch: expected {artifact.sha256}, actual {actual_sha} (from {origin}); file removed"
            )
        if artifact.size is not None and actual_size != artifact.size:
            staged.unlink()
            raise VerificationError(
                f"{artifact.filename}: size mismatch: expected {artifact.size} bytes, got {actual_size} (from {origin}); file removed"
            )
        staged.replace(final)
    return actual_sha, actual_size, origin


def _check_file_name(artifact: Artifact) -> None:
    """The file name is joined to a cache, a mirror or a staging directory: it must stay inside them."""
    name = artifact.filename
    if name in ("", ".", "..") or Path(name).name != name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise FetchError(
            f"{artifact.what}: {name!r} is not a plain file name (one path component, no control characters)"
        )


def _matches(path: Path, artifact: Artifact) -> bool:
    return path.stat().st_size == artifact.size and sha256_file(path) == artifact.sha256


def obtain(
    artifact: Artifact, dest: Path, mirror: str | None = None, progress: Progress | None = None
) -> str:
    """Download ``artifact`` to ``dest`` WITHOUT verifying its hash; returns where it came from. Callers verify.

    A size the lock records is enforced on the way in: a mirror's file of another size is not copied, a
    download announced or running longer is stopped."""
    _check_file_name(artifact)
    if mirror:
        return _from_mirror(artifact.filename, dest, mirror, artifact.size, progress)
    if artifact.url:
        return _from_url(artifact.url, dest, artifact.size, progress)
    if artifact.pip_requirement:
        return _from_pip(artifact.filename, artifact.pip_requirement, dest)
    if artifact.apt_spec:
        return _from_apt(artifact.filename, artifact.apt_spec, dest)
    raise FetchError(f"{artifact.what}: no URL, mirror or package index to fetch {artifact.filename} from")


def _from_mirror(
    filename: str, dest: Path, mirror: str, expected_size: int | None, progress: Progress | None
) -> str:
    root = Path(mirror.removeprefix("file://"))
    if not root.is_dir():
        raise FetchError(f"mirror directory {root} does not exist")
    candidate = root / filename
    if not candidate.is_file():
        raise FetchError(f"{filename} is missing from the mirror {root}")
    with candidate.open("rb") as src:
        size = os.fstat(src.fileno()).st_size  # of the file opened, before a byte is copied
        if expected_size is not None and size != expected_size:
            raise VerificationError(
                f"{filename}: size mismatch: expected {expected_size} bytes, the mirror's {candidate} has "
                f"{size} bytes; not copied"
            )
        with dest.open("wb") as out:
            _copy(src, out, filename, size, progress, limit=expected_size)
    return f"mirror:{candidate}"


def _from_url(url: str, dest: Path, expected_size: int | None, progress: Progress | None) -> str:
    last_error = ""
    for attempt in range(1, URL_ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as response:
                length = response.headers.get("Content-Length")
                announced = int(length) if length and length.isdigit() else None
                if expected_size is not None and announced is not None and announced != expected_size:
                    raise VerificationError(
                        f"{dest.name}: size mismatch: expected {expected_size} bytes, the server announces "
                        f"{announced} ({url}); not downloaded"
                    )
                with dest.open("wb") as out:
                    total = announced or expected_size
                    _copy(response, out, dest.name, total, progress, limit=expected_size)
            return url
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            dest.unlink(missing_ok=True)
            last_error = str(getattr(exc, "reason", exc))
            if isinstance(exc, urllib.error.HTTPError) and exc.code < 500:
                break  # a 404 will not heal on retry
            if attempt < URL_ATTEMPTS:
                time.sleep(2.0**attempt)  # bounded backoff between a handful of attempts
    raise FetchError(f"cannot download {url}: {last_error}")


def _from_pip(filename: str, requirement: str, dest: Path) -> str:
    """``pip download`` the exact file through pip's configured index, for the interpreter its tags name."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--dest",
        str(dest.parent),
    ]
    command += _platform_args(filename)
    command.append(requirement)
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0 or not dest.is_file():
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        raise FetchError(f"pip could not download {filename} ({requirement}): {' | '.join(tail)}")
    return f"pip:{requirement}"


APT_ARCHIVES = Path("/var/cache/apt/archives")


def _from_apt(filename: str, spec: str, dest: Path) -> str:
    """apt's cache of installed packages, else ``apt-get download`` through apt's configured sources."""
    cached = APT_ARCHIVES / filename
    if cached.is_file():
        shutil.copyfile(cached, dest)
        return f"apt-cache:{cached}"
    if shutil.which("apt-get") is None:
        raise FetchError(f"{filename}: no apt-get here to download {spec} (use a mirror directory)")
    completed = subprocess.run(
        ["apt-get", "download", spec], cwd=dest.parent, capture_output=True, text=True, check=False
    )
    if completed.returncode != 0 or not dest.is_file():
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        raise FetchError(f"apt-get could not download {filename} ({spec}): {' | '.join(tail)}")
    return f"apt:{spec}"


def _platform_args(filename: str) -> list[str]:
    """Target tags from the wheel's name, so a cp312 wheel can be fetched from a cp311 host."""
    parts = filename[: -len(".whl")].split("-")
    python_tag, abi_tag, platform_tag = parts[-3], parts[-2], parts[-1]
    if platform_tag == "any":
        # Exactly the pure wheel, even where the project also publishes compiled ones that pip would prefer.
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        return ["--platform", "any", "--implementation", "py", "--abi", "none", "--python-version", version]
    args = [arg for platform in platform_tag.split(".") for arg in ("--platform", platform)]  # a.b: both
    if python_tag.startswith("cp"):
        digits = python_tag[2:]
        args += ["--python-version", f"{digits[0]}.{digits[1:]}", "--implementation", "cp", "--abi", abi_tag]
    return args


def _copy(
    src: BinaryIO,
    out: BinaryIO,
    label: str,
    total: int | None,
    progress: Progress | None,
    limit: int | None = None,
) -> None:
    """Copy in chunks; past ``limit`` bytes (the size the lock records) the copy stops with a mismatch."""
    done = 0
    for chunk in iter(lambda: src.read(CHUNK), b""):
        done += len(chunk)
        if limit is not None and done > limit:
            raise VerificationError(
                f"{label}: size mismatch: expected {limit} bytes, got more; stopped after {done}"
            )
        out.write(chunk)
        if progress:
            progress(label, done, total)


def print_progress(label: str, done: int, total: int | None) -> None:
    """A one-line progress bar on stderr."""
    width = 30
    if total:
        filled = int(width * min(done, total) / total)
        line = f"\r{label[:48]:48} [{'#' * filled}{'.' * (width - filled)}] {done / 2**20:7.1f}/{total / 2**20:.1f} MiB"
    else:
        line = f"\r{label[:48]:48} {done / 2**20:7.1f} MiB"
    sys.stderr.write(line)
    if total and done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()
