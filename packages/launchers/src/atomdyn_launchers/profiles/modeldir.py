"""Putting a model directory built in a staging sibling into place, for builders that may run concurrently."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


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
