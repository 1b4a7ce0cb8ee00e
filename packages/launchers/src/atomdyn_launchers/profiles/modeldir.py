"""Model directories the project builds: one digest over their files, and putting one built in a staging sibling
into place, for builders that may run concurrently."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from atomdyn_core.fetch import sha256_file


def files_digest(path: Path, files: Iterable[str], missing: Callable[[str], Exception]) -> str:
    """sha256 over each file's name and sha256, in name order: one figure for the whole directory. A file
    that is not there raises ``missing(name)``."""
    outer = hashlib.sha256()
    for name in sorted(files):
        file = Path(path) / name
        if not file.is_file():
            raise missing(name)
        outer.update(f"{name} {sha256_file(file)}\n".encode())
    return "sha256:" + outer.hexdigest()


def install_staged(staging: Path, path: Path, is_whole: Callable[[Path], bool]) -> None:
    """Rename ``staging`` to ``path``. A copy already at ``path`` that is not whole (older, damaged) is moved
    aside and deleted first; when another builder put a whole copy there first, that copy is kept (the caller
    removes ``staging``). Readers never see a half-written directory."""
    if path.exists() and not is_whole(path):
        stale = Path(tempfile.mkdtemp(prefix=f".{path.name}.stale.", dir=path.parent))
        path.rename(stale / path.name)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        staging.rename(path)
    except OSError:
        if not is_whole(path):
            raise
