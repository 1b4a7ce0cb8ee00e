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
squashfs path on the node (its ``args.c``). :class:`SquashfsStore` is this image store as the node jobs use it
(a row of :mod:`atomdyn_launchers.job.stores`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from atomdyn_core.atomic import atomic_write_json
from atomdyn_core.fetch import sha256_file
from atomdyn_launchers.job import images
from atomdyn_launchers.job.checks import FAIL, NOT_NEEDED, PASS, Check
from atomdyn_launchers.job.image_store import image_rows

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


# How the node check knows pyxis is there: the plugin adds its options to srun (SPANK), so `srun --help` on the
# node lists --container-image (pyxis's README, its args.c option table).
PYXIS_OPTION = "--container-image"


def pyxis_installed(srun: str = "srun") -> Check:
    """Whether srun on this node has the pyxis plugin (what a job of this store needs instead of Docker)."""
    try:
        done = subprocess.run([srun, "--help"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("pyxis", FAIL, f"cannot run {srun} --help: {exc}")
    if PYXIS_OPTION in done.stdout + done.stderr:
        return Check("pyxis", PASS, f"srun --help lists {PYXIS_OPTION} (the pyxis plugin is loaded)")
    return Check(
        "pyxis",
        FAIL,
        f"srun --help does not list {PYXIS_OPTION}: pyxis is not installed or not in plugstack.conf here",
    )


class SquashfsStore:
    """The images as squashfs files in the shared directory (``images_dir``), imported once from the first
    node's Docker daemon, run as pyxis container steps of the job (``srun --container-image``)."""

    name: ClassVar[str] = "squashfs"
    shared: ClassVar[bool] = True
    described: ClassVar[str] = "the imported squashfs on every node"
    image_rows: ClassVar[tuple[str, ...]] = ("docker", "image")  # the pyxis row is the node's (rung 1)

    def __init__(self, docker_host: str, images_dir: str = "", srun: str = "srun") -> None:
        self._client = images.DockerCLI(docker_host)  # where the images are made present, then imported from
        self.images_dir = images_dir
        self.srun = srun

    @property
    def client(self) -> images.DockerCLI:
        return self._client

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def checks(self, spec: Mapping[str, Any]) -> list[Check]:
        """srun has pyxis, and each image's squashfs is visible here with its recorded size (and the archive
        manifest's image id where one is recorded)."""
        runtime = spec["runtime"]
        out = [
            Check("docker", NOT_NEEDED, f"RUNTIME={runtime}: the jobs run enroot containers through srun"),
            pyxis_installed(self.srun),
        ]

        def find(tag: str, expected: str | None) -> tuple[str | None, str]:
            path = squashfs_path(self.images_dir, tag)
            why = matches(path, tag, expected, hashed=False)
            if why is not None:
                return f"{tag}: {why} (run `invoke nodes.prepare`)", ""
            return None, f"{tag} as {path}"

        return [*out, *image_rows(spec, find)]

    def one_shot(
        self,
        image: str,
        argv: Sequence[str],
        *,
        network: str = "none",
        devices: Sequence[str] = (),
        mounts: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> list[str]:
        """As the jobs' short-lived tools run (``PyxisRuntime.tool``): a step on the host's network, with the
        caller's environment (srun passes it on), ``devices`` and ``mounts`` bind-mounted."""
        srun = [self.srun, "--overlap", "--ntasks=1", "--nodes=1"]
        srun.append(f"--container-image={squashfs_path(self.images_dir, image)}")
        binds = [*devices, *mounts]
        if binds:
            srun.append("--container-mounts=" + ",".join(f"{m}:{m}" for m in binds))
        srun += ["--no-container-mount-home", "--no-container-remap-root", "--no-container-entrypoint"]
        return [*srun, *argv]

    def stale(self, tags: Sequence[str]) -> list[str]:
        recorded = images.recorded_ids(Path(self.images_dir), tags)
        return [
            tag
            for tag in tags
            if matches(squashfs_path(self.images_dir, tag), tag, recorded.get(tag), hashed=False)
        ]

    def prepare_shared(
        self,
        spec: Mapping[str, Any],
        node: str,
        make_present: Callable[[], None],
        actions: list[str],
        log_path: Path,
    ) -> dict[str, Any]:
        """Every image as a squashfs, imported once. One whose record names the expected image id (the archive
        manifest's, else this node's daemon's) and whose size and sha256 match is left alone; else the images
        are made present in this node's daemon (``make_present``: the docker strategies), then
        ``enroot import dockerd://<tag>``."""
        directory = Path(self.images_dir)
        tags: list[str] = spec["images"]
        docker = self._client
        recorded = images.recorded_ids(directory, tags)
        stale: dict[str, str] = {}
        with images.exclusive(directory / ".import.lock"):  # two prepares never import into one place at once
            for tag in tags:
                expected = recorded.get(tag) or docker.image_id(tag)
                why = matches(squashfs_path(directory, tag), tag, expected)
                if why is None:
                    actions.append(f"{squashfs_name(tag)} matches its image: verified, not re-imported")
                else:
                    stale[tag] = why
            if stale:
                make_present()
            for tag, why in stale.items():
                image_id = docker.image_id(tag)
                if image_id is None:
                    raise images.ImageError(f"{tag} is not in {node}'s docker daemon: nothing to import")
                label = docker.run(
                    "image", "inspect", "--format",
                    '{{if .Config.Labels}}{{index .Config.Labels "' + LOCK_LABEL + '"}}{{end}}',
                    tag, timeout=60,
                )  # fmt: skip
                try:
                    record = import_image(
                        tag, directory, node, image_id=image_id, lock_digest=label,
                        env={"DOCKER_HOST": docker.host}, log=log_path,
                    )  # fmt: skip
                except SquashfsError as exc:
                    raise images.ImageError(str(exc)) from None
                actions.append(f"imported {record['squashfs']} ({why}; sha256 {record['sha256'][:16]})")
        return {t: read_record(squashfs_path(directory, t)) for t in tags}


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
