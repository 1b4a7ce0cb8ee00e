"""NIXL's meson subprojects for a build without network: read from wrap files, checked, staged (no download)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import REPO

from atomdyn_images import subprojects
from atomdyn_images.cli import main


def _tree(tmp: Path, archives: dict[str, bytes]) -> Path:
    """A tree with one [wrap-file] subproject per archive, and a [wrap-git] one that has no hash."""
    wraps = tmp / "nixl" / "subprojects"
    wraps.mkdir(parents=True)
    for name, data in archives.items():
        (wraps / f"{name}.wrap").write_text(
            "[wrap-file]\n"
            f"directory = {name}-1.0\n"
            f"source_url = https://example.invalid/{name}-1.0.tar.gz\n"
            f"source_filename = {name}-1.0.tar.gz\n"
            f"source_hash = {hashlib.sha256(data).hexdigest()}\n"
        )
    (wraps / "gitdep.wrap").write_text(
        "[wrap-git]\nurl = https://example.invalid/gitdep.git\nrevision = v1\n"
    )
    return tmp / "nixl"


def test_archives_are_checked_then_copied_into_the_packagecache(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {"taskflow": b"taskflow archive", "liburing": b"liburing archive"})
    store = tmp_path / "store"
    store.mkdir()
    (store / "taskflow-1.0.tar.gz").write_bytes(b"taskflow archive")
    (store / "liburing-1.0.tar.gz").write_bytes(b"liburing archive")
    staged = subprojects.stage_packagecache(tree, store)
    assert [a.subproject for a in staged] == ["liburing", "taskflow"]  # the wrap-git one has nothing to stage
    cache = tree / "subprojects" / "packagecache"
    assert (cache / "taskflow-1.0.tar.gz").read_bytes() == b"taskflow archive"


def test_an_archive_that_differs_from_its_wrap_hash_is_refused(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {"taskflow": b"taskflow archive"})
    store = tmp_path / "store"
    store.mkdir()
    (store / "taskflow-1.0.tar.gz").write_bytes(b"something else")
    with pytest.raises(subprojects.SubprojectError, match=r"but NIXL's taskflow.wrap pins [0-9a-f]{64}"):
        subprojects.stage_packagecache(tree, store)
    assert not (tree / "subprojects" / "packagecache" / "taskflow-1.0.tar.gz").exists()


def test_verified_archives_already_there_are_not_downloaded_again(tmp_path: Path) -> None:
    """The URLs are unreachable (.invalid): succeeding proves nothing was fetched."""
    tree = _tree(tmp_path, {"taskflow": b"taskflow archive"})
    out = tmp_path / "out"
    out.mkdir()
    (out / "taskflow-1.0.tar.gz").write_bytes(b"taskflow archive")
    assert main(["subprojects", str(tree), "--out", str(out)]) == 0


def test_a_wrap_file_without_a_hash_is_an_error(tmp_path: Path) -> None:
    tree = _tree(tmp_path, {})
    (tree / "subprojects" / "bad.wrap").write_text("[wrap-file]\nsource_filename = bad.tar.gz\n")
    with pytest.raises(
        subprojects.SubprojectError, match=r"bad.wrap: source_filename bad.tar.gz has no sha256"
    ):
        subprojects.wrap_archives(tree)


def test_tags_are_the_release_builds_tags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tags", "--lock", str(REPO / "release-lock.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "base": "dynamo-atom-mi355x:1.3.0-0.1.6rc0",
        "overlay": "dynamo-atom-mi355x-nixl-rocm:1.3.0-0.1.6rc0",
    }
