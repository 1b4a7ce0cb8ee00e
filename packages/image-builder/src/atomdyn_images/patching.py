"""The patch series: ``patches/series`` lists patch files, applied in order with ``git apply`` to a source tree.

Every patch is checked (``git apply --check``) against the tree as the previous ones leave it before anything is
written, so a hunk that does not apply fails clearly and leaves the tree untouched.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path


class PatchError(RuntimeError):
    """A series entry is missing, or a patch does not apply; the message names the patch and git's reason."""


@dataclass(frozen=True)
class Patch:
    name: str
    path: Path
    sha256: str


def read_series(patch_dir: Path) -> list[Patch]:
    series = patch_dir / "series"
    if not series.is_file():
        raise PatchError(f"no series file at {series}")
    patches = []
    for number, raw in enumerate(series.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "/" in line or line.startswith("."):
            raise PatchError(f"{series}:{number}: {line!r} must be a file name inside {patch_dir}")
        path = patch_dir / line
        if not path.is_file():
            raise PatchError(f"{series}:{number}: patch {line} is listed but {path} does not exist")
        patches.append(Patch(line, path, hashlib.sha256(path.read_bytes()).hexdigest()))
    return patches


def series_digest(patches: list[Patch]) -> str:
    return hashlib.sha256("".join(f"{p.name}:{p.sha256}\n" for p in patches).encode()).hexdigest()


def _git_apply(tree: Path, patch: Patch, check: bool) -> None:
    # A private git dir: the tree may be a plain directory, or sit inside another repository.
    with tempfile.TemporaryDirectory(prefix="atomdyn-gitdir-") as gitdir:
        env = dict(os.environ, GIT_DIR=gitdir, GIT_WORK_TREE=str(tree))
        subprocess.run(["git", "init", "-q"], env=env, check=True, capture_output=True)
        command = [
            "git",
            "apply",
            "--whitespace=nowarn",
            *(["--check"] if check else []),
            str(patch.path.resolve()),
        ]
        completed = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        reason = " | ".join(completed.stderr.strip().splitlines()[-4:])
        raise PatchError(f"patch {patch.name} does not apply to {tree}: {reason}")


def apply_series(tree: Path, patches: list[Patch]) -> None:
    """Check the whole series on a scratch copy, then apply it to ``tree``."""
    if not tree.is_dir():
        raise PatchError(f"source tree {tree} is not a directory")
    with tempfile.TemporaryDirectory(prefix="atomdyn-patchcheck-") as scratch:
        copy = Path(scratch) / "tree"
        shutil.copytree(tree, copy, symlinks=True)
        for patch in patches:
            _git_apply(copy, patch, check=True)
            _git_apply(copy, patch, check=False)
    for patch in patches:
        _git_apply(tree, patch, check=False)


def extract_archive(archive: Path, dest: Path) -> Path:
    """Unpack a GitHub-style source tarball (one top-level directory) into ``dest``; returns ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
    try:
        with tarfile.open(archive) as tar:
            members = tar.getmembers()
            for member in members:
                if member.name.startswith("/") or ".." in Path(member.name).parts:
                    raise PatchError(f"{archive}: unsafe member path {member.name!r}")
                if member.issym() or member.islnk():
                    target = Path(member.name).parent / member.linkname
                    if member.linkname.startswith("/") or ".." in target.parts:
                        raise PatchError(f"{archive}: link {member.name!r} points outside the tree")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, members=members, filter="data")
            else:  # pragma: no cover - Pythons without extraction filters; members validated above
                tar.extractall(staging, members=members)
        roots = list(staging.iterdir())
        top = roots[0] if len(roots) == 1 and roots[0].is_dir() else staging
        top.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest
