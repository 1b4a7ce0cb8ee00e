"""The release lock: one typed model of `release-lock.json`, validated on every load.

Every pin of the stack lives in the lock. A hash that could not be obtained where the lock was written is
recorded as the literal string ``"unrecorded"``; consumers refuse such an entry unless the user passes an
explicit override (`require_recorded`), and record that override wherever the artifact's provenance goes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.bounded import MIB, FileReadError, read_bytes
from atomdyn_core.jsonload import JSONNestingError, loads_bounded

SCHEMA_VERSION = 1
UNRECORDED = "unrecorded"
LOCK_FILE_NAME = "release-lock.json"
LOCK_ENV = "ATOMDYN_LOCK"

_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX40 = re.compile(r"[0-9a-f]{40}")
_WHEEL_SOURCES = ("pypi", "url")
WHEEL_ROLES = frozenset({"image-base", "image-overlay", "rehearsal", "gpu-evidence", "etcd", "accuracy"})
# The schema nests four levels ($.sources.<name>.archive.url); anything far deeper is not a lock.
MAX_DEPTH = 16
LOCK_MAX_BYTES = 16 * MIB  # the lock is a few hundred KiB; a device or a runaway file is refused
# The largest artifact a lock may pin: a ROCm base image is tens of GiB; 10**30 bytes is no download.
MAX_ARTIFACT_BYTES = 1 << 40
# Names that become file names (a source's archive, a wheel, a .deb in a cache or a mirror) are plain base
# names: no '/', NUL, newline or other control character, never '.' or '..'.
_ENTRY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# A wheel's file name as the binary distribution format spells it: name-version(-build)?-python-abi-platform.
_WHEEL_FILENAME = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9_.]*-[A-Za-z0-9_.!+]+(?:-[0-9][A-Za-z0-9_.]*)?"
    r"-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl"
)
# Debian policy's package names, versions ([epoch:]upstream[-revision]) and architectures.
_DEB_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
_DEB_VERSION = re.compile(r"(?:[0-9]+:)?[A-Za-z0-9][A-Za-z0-9.+~-]*")
_DEB_ARCH = re.compile(r"[a-z0-9][a-z0-9-]*")


class LockError(ValueError):
    """The lock is malformed; ``json_path`` names the offending place (e.g. ``$.wheels.ai-dynamo.sha256``)."""

    def __init__(self, json_path: str, message: str) -> None:
        super().__init__(f"{json_path}: {message}")
        self.json_path = json_path
        self.message = message


class UnrecordedHashError(LookupError):
    """A consumer asked for an artifact whose hash is not yet recorded, without an override."""


@dataclass(frozen=True)
class Image:
    name: str
    repository: str
    tag: str
    digest: str | None  # "sha256:<hex>", or None when not yet recorded
    digest_hint: str = ""
    note: str = ""
    # The image's labels as its registry gave them with the recorded digest (`nox -s update_lock --
    # --resolve-base`); empty while the digest is unrecorded.
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def reference(self) -> str:
        """``repository@sha256:…``; raises when the digest is not recorded (use `require_recorded` first)."""
        if self.digest is None:
            raise UnrecordedHashError(
                f"image {self.name!r} ({self.repository}:{self.tag}) has no recorded digest"
                + (f" (known only as {self.digest_hint})" if self.digest_hint else "")
            )
        return f"{self.repository}@{self.digest}"


@dataclass(frozen=True)
class Archive:
    url: str
    sha256: str | None
    size: int | None


@dataclass(frozen=True)
class Source:
    name: str
    repository: str
    commit: str
    tag: str = ""
    version: str = ""
    archive: Archive | None = None
    note: str = ""

    @property
    def archive_filename(self) -> str:
        """The archive's file name in a cache or a source mirror: ``<name>-<commit>.tar.gz``."""
        return f"{self.name}-{self.commit}.tar.gz"


@dataclass(frozen=True)
class Wheel:
    name: str
    filename: str
    source: str  # "pypi" (through pip's configured index) or "url"
    project: str
    version: str
    sha256: str | None
    size: int | None
    url: str = ""
    roles: tuple[str, ...] = ()
    variant: str = ""
    note: str = ""

    @property
    def recorded(self) -> bool:
        return self.sha256 is not None and self.size is not None

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"


@dataclass(frozen=True)
class Deb:
    """A Debian package pinned by its .deb file (what `apt-get download PACKAGE=VERSION` fetches)."""

    name: str
    filename: str
    package: str
    version: str
    architecture: str
    sha256: str | None
    size: int | None
    roles: tuple[str, ...] = ()
    note: str = ""

    @property
    def apt_spec(self) -> str:
        return f"{self.package}={self.version}"


@dataclass(frozen=True)
class Lock:
    schema_version: int
    release_name: str
    release_version: str
    images: Mapping[str, Image]
    sources: Mapping[str, Source]
    wheels: Mapping[str, Wheel]
    digest: str
    path: Path | None = field(default=None, compare=False)
    debs: Mapping[str, Deb] = field(default_factory=dict)  # optional section: Debian packages by .deb

    def wheels_with_role(self, role: str) -> list[Wheel]:
        return [w for w in self.wheels.values() if role in w.roles]


def require_recorded(
    what: str, value: str | int | None, *, override: bool, overrides_used: list[str]
) -> None:
    """Refuse an unrecorded hash unless ``override``; an accepted override is appended to ``overrides_used``."""
    if value is not None:
        return
    if not override:
        raise UnrecordedHashError(
            f"{what}: hash not yet recorded in {LOCK_FILE_NAME}; refusing to use it. "
            "Record it with `nox -s update_lock` where it can be fetched, or pass an explicit override "
            "(e.g. --allow-unrecorded) to accept it; the override is written into the provenance record."
        )
    overrides_used.append(f"allow-unrecorded:{what}")


def canonical_digest(raw: Any) -> str:
    """sha256 of the canonical JSON form (sorted keys, no whitespace, UTF-8)."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def find_lock_path(start: Path | None = None) -> Path:
    """$ATOMDYN_LOCK, else the nearest release-lock.json at or above ``start`` (default: the working directory)."""
    env = os.environ.get(LOCK_ENV)
    if env:
        return Path(env)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / LOCK_FILE_NAME
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no {LOCK_FILE_NAME} found at or above {here} (set ${LOCK_ENV} to its path)")


def load_lock(path: Path | None = None) -> Lock:
    lock_path = Path(path) if path is not None else find_lock_path()
    try:
        data = read_bytes(lock_path, LOCK_MAX_BYTES, "lock")
    except FileReadError as exc:
        raise LockError("$", str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockError(
            "$", f"{lock_path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    return parse_lock(text, lock_path)


def parse_lock(text: str, path: Path | None = None) -> Lock:
    try:
        raw = loads_bounded(text, limit=MAX_DEPTH, object_pairs_hook=_KeyedObject)
    except JSONNestingError as exc:
        raise LockError("$", f"{path or 'the lock'}: {exc} (the lock's schema nests 4)") from None
    except json.JSONDecodeError as exc:
        raise LockError("$", f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from exc
    except ValueError as exc:  # e.g. an integer longer than Python's int-from-string limit
        raise LockError("$", f"not valid JSON: {exc}") from None
    _refuse_duplicate_keys(raw, "$")
    root = _Obj(raw, "$")
    root.keys(required={"schema_version", "release", "images", "sources", "wheels"}, optional={"debs"})
    version = root.integer("schema_version")
    if version != SCHEMA_VERSION:
        raise LockError(
            "$.schema_version", f"unsupported schema version {version} (this tool reads {SCHEMA_VERSION})"
        )
    release = root.obj("release")
    release.keys(required={"name", "version"})
    return Lock(
        schema_version=version,
        release_name=release.string("name"),
        release_version=release.string("version"),
        images={name: _image(name, entry) for name, entry in root.obj("images").items()},
        sources={name: _source(name, entry) for name, entry in root.obj("sources").items()},
        wheels={name: _wheel(name, entry) for name, entry in root.obj("wheels").items()},
        digest=canonical_digest(raw),
        path=path,
        debs={name: _deb(name, entry) for name, entry in root.obj("debs").items()} if "debs" in raw else {},
    )


def _image(name: str, entry: _Obj) -> Image:
    entry.keys(required={"repository", "tag", "digest"}, optional={"digest_hint", "note", "labels"})
    digest = entry.string("digest")
    if digest != UNRECORDED:
        if not digest.startswith("sha256:"):
            raise LockError(entry.path("digest"), f"image digest must start with 'sha256:' (got {digest!r})")
        _check_hex64(entry.path("digest"), digest.removeprefix("sha256:"))
    labels = entry.str_map("labels") if "labels" in entry.raw else {}
    if labels and digest == UNRECORDED:
        raise LockError(
            entry.path("labels"),
            "labels are recorded with the digest they were read with, and the digest is unrecorded",
        )
    return Image(
        name=name,
        repository=entry.string("repository"),
        tag=entry.string("tag"),
        digest=None if digest == UNRECORDED else digest,
        digest_hint=entry.string("digest_hint", ""),
        note=entry.string("note", ""),
        labels=labels,
    )


def _source(name: str, entry: _Obj) -> Source:
    entry.keys(required={"repository", "commit"}, optional={"tag", "version", "archive", "note"})
    commit = entry.string("commit")
    if not _HEX40.fullmatch(commit):
        raise LockError(entry.path("commit"), f"commit must be 40 lowercase hex characters (got {commit!r})")
    archive = None
    if "archive" in entry.raw:
        arch = entry.obj("archive")
        arch.keys(required={"url", "sha256", "size"})
        archive = Archive(url=_https(arch, "url"), sha256=_sha256(arch), size=_size(arch))
    return Source(
        name=name,
        repository=_https(entry, "repository"),
        commit=commit,
        tag=entry.string("tag", ""),
        version=entry.string("version", ""),
        archive=archive,
        note=entry.string("note", ""),
    )


def _wheel(name: str, entry: _Obj) -> Wheel:
    entry.keys(
        required={"filename", "source", "project", "version", "sha256", "size", "roles"},
        optional={"url", "variant", "note"},
    )
    filename = entry.string("filename")
    if not _WHEEL_FILENAME.fullmatch(filename):
        raise LockError(
            entry.path("filename"),
            f"expected a wheel file name, NAME-VERSION-PYTHON-ABI-PLATFORM.whl of letters, digits and "
            f"'_.+!' (got {filename!r})",
        )
    source = entry.string("source")
    if source not in _WHEEL_SOURCES:
        raise LockError(entry.path("source"), f"must be one of {', '.join(_WHEEL_SOURCES)} (got {source!r})")
    url = _https(entry, "url") if "url" in entry.raw else ""
    if source == "url" and not url:
        raise LockError(entry.path("url"), "required when source is 'url'")
    roles = _roles(entry)
    return Wheel(
        name=name,
        filename=filename,
        source=source,
        project=entry.string("project"),
        version=entry.string("version"),
        sha256=_sha256(entry),
        size=_size(entry),
        url=url,
        roles=tuple(roles),
        variant=entry.string("variant", ""),
        note=entry.string("note", ""),
    )


def _deb(name: str, entry: _Obj) -> Deb:
    entry.keys(
        required={"filename", "package", "version", "architecture", "sha256", "size", "roles"},
        optional={"note"},
    )
    package, version, arch = entry.string("package"), entry.string("version"), entry.string("architecture")
    for key, value, pattern, what in (
        ("package", package, _DEB_PACKAGE, "a Debian package name (lowercase letters, digits, '+.-')"),
        ("version", version, _DEB_VERSION, "a Debian version ([EPOCH:]VERSION of letters, digits, '.+~-')"),
        ("architecture", arch, _DEB_ARCH, "a Debian architecture (lowercase letters, digits, '-')"),
    ):
        if not pattern.fullmatch(value):
            raise LockError(entry.path(key), f"expected {what} (got {value!r})")
    filename = entry.string("filename")
    # apt names the file PACKAGE_VERSION_ARCH.deb with the epoch's ':' written as %3a.
    expected = f"{package}_{version.replace(':', '%3a')}_{arch}.deb"
    if filename != expected:
        raise LockError(
            entry.path("filename"), f"expected {expected!r} for {package} {version} (got {filename!r})"
        )
    roles = _roles(entry)
    return Deb(
        name=name,
        filename=filename,
        package=package,
        version=version,
        architecture=arch,
        sha256=_sha256(entry),
        size=_size(entry),
        roles=tuple(roles),
        note=entry.string("note", ""),
    )


def _roles(entry: _Obj) -> list[str]:
    roles = entry.str_list("roles")
    for index, role in enumerate(roles):
        if role not in WHEEL_ROLES:
            raise LockError(
                f"{entry.path('roles')}[{index}]", f"unknown role {role!r} (known: {sorted(WHEEL_ROLES)})"
            )
    return roles


def _sha256(entry: _Obj) -> str | None:
    value = entry.string("sha256")
    if value == UNRECORDED:
        return None
    _check_hex64(entry.path("sha256"), value)
    return value


def _size(entry: _Obj) -> int | None:
    value = entry.raw.get("size")
    if value == UNRECORDED:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise LockError(entry.path("size"), f"must be a positive integer or {UNRECORDED!r} (got {value!r})")
    if value > MAX_ARTIFACT_BYTES:
        raise LockError(
            entry.path("size"),
            f"{value} bytes is not a plausible size (more than {MAX_ARTIFACT_BYTES >> 30} GiB, the largest an "
            "image, wheel or archive of the lock may be)",
        )
    return value


def _check_hex64(path: str, value: str) -> None:
    if not _HEX64.fullmatch(value):
        raise LockError(path, f"sha256 must be 64 lowercase hex characters or {UNRECORDED!r} (got {value!r})")


def _https(entry: _Obj, key: str) -> str:
    value = entry.string(key)
    if not value.startswith("https://"):
        raise LockError(entry.path(key), f"must be an https URL (got {value!r})")
    return value


class _KeyedObject(dict[str, Any]):
    """A JSON object that remembers keys it saw twice: json.loads would silently keep the last value."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        seen: set[str] = set()
        self.duplicates: list[str] = []
        for key, _ in pairs:
            if key in seen:
                self.duplicates.append(key)
            seen.add(key)


def _refuse_duplicate_keys(value: Any, path: str) -> None:
    if isinstance(value, _KeyedObject):
        if value.duplicates:
            key = value.duplicates[0]
            raise LockError(f"{path}.{key}", "duplicate key (a JSON reader would keep only the last value)")
        for key, item in value.items():
            _refuse_duplicate_keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_duplicate_keys(item, f"{path}[{index}]")


class _Obj:
    """A JSON object being validated, with its JSON path for error messages."""

    def __init__(self, raw: Any, path: str) -> None:
        if not isinstance(raw, dict):
            raise LockError(path, f"expected an object, got {type(raw).__name__}")
        self.raw: dict[str, Any] = raw
        self._path = path

    def path(self, key: str) -> str:
        return f"{self._path}.{key}"

    def keys(self, required: Iterable[str], optional: Iterable[str] = ()) -> None:
        required_set, allowed = set(required), set(required) | set(optional)
        for key in self.raw:
            if key not in allowed:
                raise LockError(self.path(key), f"unknown key (allowed here: {', '.join(sorted(allowed))})")
        for key in sorted(required_set - set(self.raw)):
            raise LockError(self.path(key), "missing required key")

    def string(self, key: str, default: str | None = None) -> str:
        if key not in self.raw and default is not None:
            return default
        value = self.raw.get(key)
        if not isinstance(value, str) or not value:
            raise LockError(self.path(key), f"expected a non-empty string, got {value!r}")
        return value

    def integer(self, key: str) -> int:
        value = self.raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise LockError(self.path(key), f"expected an integer, got {value!r}")
        return value

    def str_list(self, key: str) -> list[str]:
        value = self.raw.get(key)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise LockError(self.path(key), f"expected a list of strings, got {value!r}")
        return list(value)

    def str_map(self, key: str) -> dict[str, str]:
        """An object of non-empty string keys and string values (an image's labels; a value may be empty)."""
        value = self.raw.get(key)
        if not isinstance(value, dict):
            raise LockError(self.path(key), f"expected an object of strings, got {value!r}")
        for name, item in value.items():
            if not name or not isinstance(item, str):
                raise LockError(f"{self.path(key)}.{name}", f"expected a string value, got {item!r}")
        return dict(value)

    def obj(self, key: str) -> _Obj:
        return _Obj(self.raw.get(key), self.path(key))

    def items(self) -> Iterable[tuple[str, _Obj]]:
        """The entries of a section (images, sources, wheels, debs); their names may become file names."""
        for key in self.raw:
            if not _ENTRY_NAME.fullmatch(key):
                raise LockError(
                    self.path(key),
                    f"an entry name must be a plain name of letters, digits and '._+-' (got {key!r})",
                )
        return [(key, _Obj(value, self.path(key))) for key, value in self.raw.items()]
