"""What an image store is to the node jobs: the :class:`NodeStore` protocol, and the store of each node's Docker
daemon (:class:`DaemonStore`), which stores reached through another docker-compatible client extend (podman's).
The registry is :mod:`atomdyn_launchers.job.stores`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from atomdyn_launchers.job import images
from atomdyn_launchers.job.checks import FAIL, NOT_NEEDED, PASS, Check


class NodeStore(Protocol):
    """An image store as node jobs use it; built from the node's docker host and the shared images directory."""

    name: ClassVar[str]  # a runtime's ``image_store``
    # One file per image on the shared filesystem: one prepare, on the first node, serves every node.
    shared: ClassVar[bool]
    # What the images are, as the certify ladder's image rung says when they are checked by file, not by id.
    described: ClassVar[str]
    # The rows of checks() about the store and its images (the certify ladder's image rung); any other row it
    # answers is a node requirement (rung 1).
    image_rows: ClassVar[tuple[str, ...]]

    def __init__(self, docker_host: str, images_dir: str = "") -> None: ...

    @property
    def client(self) -> images.DockerCLI:
        """The docker-compatible client ``load`` fills, or the daemon a shared store imports from."""
        ...

    def env(self) -> dict[str, str]:
        """The environment a command run in the image (:meth:`one_shot`) needs."""
        ...

    def checks(self, spec: Mapping[str, Any]) -> list[Check]:
        """The node check's rows for the store and each image the spec wants (``spec["images"]``: tag -> the
        archive manifest's id or None)."""
        ...

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
        """``argv`` run once in ``image`` (a tag) on this node, with ``devices`` and ``mounts`` (read-only)."""
        ...

    def stale(self, tags: Sequence[str]) -> list[str]:
        """(Shared stores, asked on the submit host.) The images whose file is missing or not the one recorded."""
        ...

    def prepare_shared(
        self,
        spec: Mapping[str, Any],
        node: str,
        make_present: Callable[[], None],
        actions: list[str],
        log_path: Path,
    ) -> dict[str, Any]:
        """(Shared stores, the ``import`` mode.) Every image into the shared directory, once; ``make_present``
        puts the images in :attr:`client` first (the ``load`` or ``build`` strategy). The records by tag."""
        ...


def image_rows(
    spec: Mapping[str, Any], find: Callable[[str, str | None], tuple[str | None, str]]
) -> list[Check]:
    """The node check's ``image`` rows, one per image ``spec`` wants (tag -> the archive manifest's id or None),
    judged by the store's ``find(tag, expected id)``: (why it is not the image wanted, or None; what was found).
    With no image configured, one failing row."""
    wanted: dict[str, str | None] = spec["images"]
    out: list[Check] = []
    for tag, expected in wanted.items():
        why, found = find(tag, expected)
        if why is not None:
            out.append(Check("image", FAIL, why))
        else:
            out.append(Check("image", PASS, found + (" (matches the archive)" if expected else "")))
    if not wanted:
        out.append(
            Check("image", FAIL, f"RUNTIME={spec['runtime']} but no image is configured (DYNAMO_ATOM_IMAGE)")
        )
    return out


class DaemonStore:
    """Each node's own store, reached through a docker-compatible client: images are checked by id, runs are
    ``<client> run``. A subclass names another client."""

    name: ClassVar[str] = "docker"
    shared: ClassVar[bool] = False
    described: ClassVar[str] = "images identical on every node"
    cli: ClassVar[type[images.DockerCLI]] = images.DockerCLI
    image_rows: ClassVar[tuple[str, ...]] = ("docker", "image")

    def __init__(self, docker_host: str, images_dir: str = "") -> None:
        self._client = self.cli(docker_host)
        self.images_dir = images_dir

    @property
    def client(self) -> images.DockerCLI:
        return self._client

    def env(self) -> dict[str, str]:
        return self._client.env()

    def checks(self, spec: Mapping[str, Any]) -> list[Check]:
        wanted: dict[str, str | None] = spec["images"]
        runtime = spec["runtime"]
        if not spec["runtime_facts"]["node_images"] and not wanted:
            return [
                Check("docker", NOT_NEEDED, f"RUNTIME={runtime}"),
                Check("image", NOT_NEEDED, f"RUNTIME={runtime}"),
            ]
        docker = self._client
        try:
            version = docker.version()
        except images.ImageError as exc:
            return [Check(docker.name, FAIL, str(exc)), Check("image", FAIL, f"{docker.name} unreachable")]

        def find(tag: str, expected: str | None) -> tuple[str | None, str]:
            actual = docker.image_id(tag)
            if actual is None:
                return f"{tag} is not present on this node (run `invoke nodes.prepare`)", ""
            if expected and actual != expected:
                return f"{tag} is {actual[:19]}, the prepared archive has {expected[:19]}", ""
            return None, f"{tag} {actual[:19]}"

        return [Check(docker.name, PASS, docker.describe(version)), *image_rows(spec, find)]

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
        run = [*self._client.run_args(), "--network", network, *(a for d in devices for a in ("--device", d))]
        run += [a for m in mounts for a in ("-v", f"{m}:{m}:ro")]
        run += [a for k, v in sorted((env or {}).items()) for a in ("-e", f"{k}={v}")]
        return [*run, image, *argv]

    def stale(self, tags: Sequence[str]) -> list[str]:
        return []  # nothing of it on the shared filesystem: each node's store is checked on the node

    def prepare_shared(
        self,
        spec: Mapping[str, Any],
        node: str,
        make_present: Callable[[], None],
        actions: list[str],
        log_path: Path,
    ) -> dict[str, Any]:
        raise images.ImageError(
            f"the {self.name} store is each node's own: nothing to import into the shared directory"
        )
