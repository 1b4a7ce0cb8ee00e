"""Which lock a run used: the checkout's (venv runtime, and the key of the aggregated answer a P/D run compares
with), or the one the image every job ran carries in its label (docker runtime)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atomdyn_core.lock import find_lock_path, load_lock
from atomdyn_launchers.runtimes import get_runtime


def checkout_lock_digest(path: Path | None, project_dir: Path) -> str | None:
    """The digest of the lock this run used: ``path``, else $ATOMDYN_LOCK, else the project's lock."""
    try:
        return load_lock(path or find_lock_path(project_dir)).digest
    except (OSError, ValueError, LookupError):  # no readable lock: the run records None
        return None


def run_lock_digest(
    runtime: str, images: dict[str, dict[str, Any]], checkout_digest: str | None
) -> tuple[str | None, str]:
    """(the lock digest the run used, where it was read). A runtime that runs an image: the
    io.atomdyn.lock.digest label of the image every job ran, as its runtime recorded it on the node
    (images/<role>.json); none when a label is missing or the roles disagree. Else: the checkout's lock, which
    is what the venv was built from."""
    if not get_runtime(runtime).in_image:  # the venv was built from the checkout's lock
        return checkout_digest, f"checkout lock ({runtime} runtime)"
    digests = {role: str(info.get("lock_digest") or "") for role, info in images.items()}
    if not digests:
        return None, "unknown: no job recorded its image (images/<role>.json)"
    missing = sorted(role for role, digest in digests.items() if not digest)
    if missing:
        return None, f"unknown: the image of {', '.join(missing)} carries no io.atomdyn.lock.digest label"
    if len(set(digests.values())) > 1:
        return None, "unknown: the roles ran images of different locks: " + ", ".join(
            f"{role} {digest}" for role, digest in sorted(digests.items())
        )
    return next(iter(digests.values())), "image label io.atomdyn.lock.digest"
