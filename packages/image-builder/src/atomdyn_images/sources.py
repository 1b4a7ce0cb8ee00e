"""Source archives (UCX, NIXL) fetched by commit and verified against the lock's sha256 before use."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_core.fetch import fetch_artifact, source_artifact
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


def fetch_source(
    source: Source, cache_dir: Path, *, mirror: str = "", allow_unrecorded: bool = False
) -> SourceArchive:
    """The archive from ``mirror`` (a directory holding ``<name>-<commit>.tar.gz``) or its URL, verified."""
    result = fetch_artifact(
        source_artifact(source), cache_dir, mirror=mirror or None, allow_unrecorded=allow_unrecorded
    )
    return SourceArchive(
        source.name, source.commit, result.path, result.sha256, result.size, result.origin, result.overrides
    )
