"""Run-time entry points (`invoke --list`). Each package owns its collection; this file only assembles them."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Collection, Context, task

ROOT = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def _lock_cli(c: Context, *args: str) -> None:
    c.run(" ".join([str(BIN / "atomdyn-lock"), *args]), pty=False)


@task(help={"path": "lock file (default: release-lock.json at the repository root)"})
def verify(c: Context, path: str = "") -> None:
    """Validate release-lock.json and print its digest."""
    _lock_cli(c, *(["--lock", path] if path else []), "verify")


@task(
    help={
        "cache": "directory for verified wheels",
        "mirror": "local mirror directory (path or file://) instead of the network",
        "role": "only wheels with this role (image-base, rehearsal, gpu-evidence, etcd)",
        "only": "comma-separated lock entry names",
        "allow_unrecorded": "comma-separated entries (or 'all') accepted without a recorded hash; recorded as an override",
    }
)
def fetch(
    c: Context,
    cache: str = ".atomdyn/wheels",
    mirror: str = "",
    role: str = "",
    only: str = "",
    allow_unrecorded: str = "",
) -> None:
    """Download every wheel the lock names into a cache, verifying size and sha256 (the PoC's fetch step)."""
    args = ["fetch", "--cache", cache]
    if mirror:
        args += ["--mirror", mirror]
    if role:
        args += ["--role", role]
    if only:
        args += ["--only", *only.split(",")]
    for name in filter(None, allow_unrecorded.split(",")):
        args += ["--allow-unrecorded", name]
    _lock_cli(c, *args)


ns = Collection()
ns.add_collection(Collection("lock", verify))
ns.add_collection(Collection("wheels", fetch))
