"""The pinned images as enroot squashfs files on the shared filesystem, for ``RUNTIME=pyxis``.

``nodes.prepare`` imports each image once, on one node, from that node's Docker daemon (where the docker
strategies put it, verified against the archive manifest's image id): ``enroot import -o <tmp> dockerd://<tag>``
(enroot's ``import`` command: ``docker://[USER@][REGISTRY#]IMAGE[:TAG]`` pulls from a registry,
``dockerd://IMAGE[:TAG]`` reads the local Docker daemon; upstream NVIDIA/enroot ``enroot.in`` and
``doc/cmd/import.md``), into ``SHARED_DIR/images/<tag with / : @ as +>.sqsh`` under a temporary name, hashed,
renamed into place, and recorded beside it (``<squashfs>.json``: the tag, the docker image id and lock digest it
was imported from, size and sha256). A squashfs whose record names the expected image id and whose size and
sha256 match is left alone. Jobs copy the record into the run directory (``record``), checking the size.

A pyxis job names the squashfs by path (``--container-image=/path.sqsh``): pyxis takes an enroot URI or a
squashfs path on the node (its ``args.c``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_core.fetch import sha256_file

MODULE = "atomdyn_launchers.job.squashfs"
RECORD_SCHEMA = 1
LOCK_LABEL = "io.atomdyn.lock.digest"


class SquashfsError(RuntimeError):
    """An import failed, or a squashfs does not match its record."""


def squashfs_name(tag: str) -> str:
    """The file name of ``tag``'s squashfs: no ``:`` (pyxis's mount separator, and enroot reads ``:`` in an
    image argument as a tag), no ``/`` or ``@``."""
    return "".join("+" if c in "/:@" else c for c in tag) + ".sqsh"


def squashfs_path(directory: Path | str, tag: str) -> Path:
    return Path(directory) / squashfs_name(tag)


def record_path(squashfs: Path | str) -> Path:
    return Path(f"{squashfs}.json")


def import_argv(tag: str, output: Path | str, source: str = "dockerd") -> list[str]:
    """The import command: ``enroot import -o OUTPUT dockerd://TAG`` (``docker://`` from a registry)."""
    if source not in ("dockerd", "docker"):
        raise ValueError(f"unknown enroot import scheme {source!r}")
    return ["enroot", "import", "-o", str(output), f"{source}://{tag}"]


def read_record(squashfs: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads(record_path(squashfs).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and raw.get("schema_version") == RECORD_SCHEMA else None


def matches(squashfs: Path, tag: str, image_id: str | None, hashed: bool = True) -> str | None:
    """Why ``squashfs`` is not the import of ``tag`` at ``image_id`` (None: it is). ``hashed``: also its sha256
    (once per prepare; a job checks the size alone)."""
    record = read_record(squashfs)
    if record is None:
        return f"no import record {record_path(squashfs)}"
    if record.get("image") != tag:
        return f"{record_path(squashfs)} records {record.get('image')!r}, not {tag}"
    if image_id and record.get("id") != image_id:
        return f"{squashfs.name} was imported from {str(record.get('id'))[:19]}, expected {image_id[:19]}"
    try:
        size = squashfs.stat().st_size
    except OSError:
        return f"{squashfs} is missing"
    if size != record.get("size"):
        return f"{squashfs} has {size} bytes, its record says {record.get('size')}"
    if hashed and sha256_file(squashfs) != record.get("sha256"):
        return f"{squashfs} sha256 differs from its record"
    return None


def import_image(
    tag: str,
    directory: Path,
    node: str,
    *,
    image_id: str,
    lock_digest: str,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
) -> dict[str, Any]:
    """``enroot import`` of ``tag`` from the Docker daemon ``env`` names into ``directory``; the record."""
    directory.mkdir(parents=True, exist_ok=True)
    final = squashfs_path(directory, tag)
    tmp = directory / f".importing-{node}-{os.getpid()}-{final.name}"
    tmp.unlink(missing_ok=True)
    argv = import_argv(tag, tmp)
    try:
        with open(log or os.devnull, "a") as out:
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            done = subprocess.run(
                argv, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT, check=False
            )
        if done.returncode != 0:
            raise SquashfsError(f"{' '.join(argv)} exited {done.returncode} (see the prepare log)")
        sha = sha256_file(tmp)
        tmp.replace(final)
    except FileNotFoundError as exc:
        raise SquashfsError(
            f"no {exc.filename} on {node}: enroot must be installed where images are imported"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    record = {
        "schema_version": RECORD_SCHEMA,
        "image": tag,
        "id": image_id,
        "lock_digest": lock_digest,
        "squashfs": final.name,
        "size": final.stat().st_size,
        "sha256": sha,
        "imported_on": node,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    atomic_write_json(record_path(final), record)
    return record


def record_for_run(squashfs: Path, out: Path) -> str | None:
    """Copy the import record into the run directory (``images/<role>.json``), after checking the squashfs
    has the recorded size; why not (None: written)."""
    record = read_record(squashfs)
    if record is None:
        return f"no import record for {squashfs} (run `invoke nodes.prepare`)"
    why = matches(squashfs, str(record.get("image")), None, hashed=False)
    if why is not None:
        return why
    atomic_write_json(out, {**record, "squashfs": str(squashfs)})
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE, description="the squashfs a pyxis job runs, recorded")
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="copy a squashfs's import record into the run directory")
    rec.add_argument("squashfs", type=Path)
    rec.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    why = record_for_run(args.squashfs, args.out)
    if why is not None:
        print(why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
