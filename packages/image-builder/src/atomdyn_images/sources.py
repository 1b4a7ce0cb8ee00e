"""Source archives (UCX, NIXL) fetched by commit and verified against the lock's sha256 before use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_core.fetch import Artifact, FetchError, fetch_artifact
from atomdyn_core.lock import Source


@dataclass
class SourceArchive:
    name: str
    commit: str
    path: Path
    sha256: str
    size: int
    origin: str
    overrides: list[str] = field(default_factory=list)


def archive_name(source: Source) -> str:
    return f"{source.name}-{source.commit}.tar.gz"


def fetch_source(
    source: Source, cache_dir: Path, *, mirror: str = "", allow_unrecorded: bool = False
) -> SourceArchive:
    """The archive from ``mirror`` (a directory holding ``<name>-<commit>.tar.gz``) or its URL, verified."""
    if source.archive is None:
        raise FetchError(f"source {source.name} has no archive in the lock ($.sources.{source.name}.archive)")
    artifact = Artifact(
        what=f"source {source.name} archive",
        filename=archive_name(source),
        sha256=source.archive.sha256,
        size=source.archive.size,
        url=source.archive.url,
    )
    result = fetch_artifact(artifact, cache_dir, mirror=mirror or None, allow_unrecorded=allow_unrecorded)
    return SourceArchive(
        source.name, source.commit, result.path, result.sha256, result.size, result.origin, result.overrides
    )
