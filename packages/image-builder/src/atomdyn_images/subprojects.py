"""NIXL's meson subprojects for a build without network: their archives verified and put in the packagecache.

NIXL's tree pins each ``[wrap-file]`` subproject (taskflow, abseil-cpp, liburing, asio, ...) by the sha256 in
its ``subprojects/*.wrap`` file, and the tree itself is pinned by the lock's archive hash, so these hashes are
part of what the lock pins. The archives are taken from a directory (``--subprojects DIR``), checked against
those hashes here, and copied into ``subprojects/packagecache``; meson (``--wrap-mode=nodownload``) checks
them again and downloads nothing. ``fetch_subprojects`` fills such a directory where the network is reachable.
``[wrap-git]`` subprojects have no hash to check; NIXL's only one (prometheus-cpp, for an optional telemetry
plugin) is then left out of the build.
"""

from __future__ import annotations

import configparser
import hashlib
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from atomdyn_core.fetch import sha256_file

PACKAGECACHE = Path("subprojects") / "packagecache"


class SubprojectError(RuntimeError):
    """A wrap file that cannot be read, or an archive missing or not matching its wrap file's hash."""


@dataclass(frozen=True)
class WrapArchive:
    subproject: str
    filename: str
    sha256: str
    url: str


def wrap_archives(tree: Path) -> list[WrapArchive]:
    """Every archive the tree's ``[wrap-file]`` subprojects need (sources and wrapdb patches), sorted."""
    found = []
    for wrap in sorted((tree / "subprojects").glob("*.wrap")):
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(wrap.read_text(encoding="utf-8"), source=str(wrap))
        except configparser.Error as exc:
            raise SubprojectError(f"{wrap}: not a readable wrap file: {exc}") from exc
        if not parser.has_section("wrap-file"):
            continue
        section = parser["wrap-file"]
        for kind in ("source", "patch"):
            filename = section.get(f"{kind}_filename", "")
            if not filename:
                continue
            sha256 = section.get(f"{kind}_hash", "")
            if len(sha256) != 64:
                raise SubprojectError(f"{wrap}: {kind}_filename {filename} has no sha256 {kind}_hash")
            found.append(WrapArchive(wrap.stem, filename, sha256, section.get(f"{kind}_url", "")))
    return found


def stage_packagecache(tree: Path, archives_dir: Path) -> list[WrapArchive]:
    """Copy each needed archive from ``archives_dir`` into the tree's packagecache after checking its hash."""
    needed = wrap_archives(tree)
    missing = [a.filename for a in needed if not (archives_dir / a.filename).is_file()]
    if missing:
        raise SubprojectError(
            f"{archives_dir} lacks NIXL's meson subproject archives {', '.join(missing)}: fill it with "
            "`atomdyn-images subprojects SRC --out DIR` where the network is reachable, "
            "or build with --network host (an override: meson then downloads them)"
        )
    cache = tree / PACKAGECACHE
    cache.mkdir(parents=True, exist_ok=True)
    for archive in needed:
        source = archives_dir / archive.filename
        actual = sha256_file(source)
        if actual != archive.sha256:
            raise SubprojectError(
                f"{source}: sha256 {actual}, but NIXL's {archive.subproject}.wrap pins {archive.sha256}"
            )
        shutil.copy2(source, cache / archive.filename)
    return needed


def fetch_subprojects(tree: Path, out_dir: Path) -> list[WrapArchive]:
    """Download every archive of ``tree``'s wrap files into ``out_dir``; a file keeps its name only if verified."""
    out_dir.mkdir(parents=True, exist_ok=True)
    archives = wrap_archives(tree)
    for archive in archives:
        final = out_dir / archive.filename
        if final.is_file() and sha256_file(final) == archive.sha256:
            continue
        if not archive.url.startswith("https://"):
            raise SubprojectError(
                f"{archive.subproject}: {archive.filename} has no https URL in its wrap file"
            )
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=f".{archive.filename}.", delete=False) as tmp:
            digest = hashlib.sha256()
            with urllib.request.urlopen(archive.url, timeout=120) as response:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    digest.update(chunk)
                    tmp.write(chunk)
        if digest.hexdigest() != archive.sha256:
            Path(tmp.name).unlink()
            raise SubprojectError(
                f"{archive.url}: sha256 {digest.hexdigest()}, but {archive.subproject}.wrap pins {archive.sha256}"
            )
        Path(tmp.name).replace(final)
    return archives
