"""Source archives (UCX, NIXL) fetched by commit and verified against the lock's sha256 before use."""

from __future__ import annotations

import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_core.fetch import FetchError, VerificationError, sha256_file
from atomdyn_core.lock import Source, require_recorded

URL_TIMEOUT_S = 60.0


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
    overrides: list[str] = []
    what = f"source {source.name} archive"
    require_recorded(
        f"{what} sha256", source.archive.sha256, override=allow_unrecorded, overrides_used=overrides
    )
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / archive_name(source)
    expected = source.archive.sha256
    if final.is_file() and expected is not None and sha256_file(final) == expected:
        return SourceArchive(
            source.name, source.commit, final, expected, final.stat().st_size, "cache", overrides
        )
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache_dir) as tmp:
        staged = Path(tmp) / final.name
        if mirror:
            candidate = Path(mirror.removeprefix("file://")) / final.name
            if not candidate.is_file():
                raise FetchError(f"{final.name} is missing from the source mirror {candidate.parent}")
            shutil.copyfile(candidate, staged)
            origin = f"mirror:{candidate}"
        else:
            try:
                with (
                    urllib.request.urlopen(source.archive.url, timeout=URL_TIMEOUT_S) as response,
                    staged.open("wb") as out,
                ):
                    shutil.copyfileobj(response, out)
            except (urllib.error.URLError, OSError) as exc:
                raise FetchError(
                    f"cannot download {source.archive.url}: {getattr(exc, 'reason', exc)}"
                ) from exc
            origin = source.archive.url
        actual = sha256_file(staged)
        if expected is not None and actual != expected:
            raise VerificationError(
                f"{final.name}: sha256 mismatch: expected {expected}, actual {actual} (from {origin})"
            )
        size = staged.stat().st_size
        if source.archive.size is not None and size != source.archive.size:
            raise VerificationError(
                f"{final.name}: size mismatch: expected {source.archive.size}, got {size}"
            )
        staged.replace(final)
    return SourceArchive(source.name, source.commit, final, actual, size, origin, overrides)
