"""podman's storage on each node as the node jobs use it (``RUNTIME=podman``): daemonless, the store the job's
environment names, reached through podman's docker-compatible commands; a row of
:mod:`atomdyn_launchers.job.stores`."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from atomdyn_launchers.job.image_store import DaemonStore
from atomdyn_launchers.job.images import DockerCLI


def podman_client() -> str:
    """$ATOMDYN_PODMAN, else the first podman on PATH."""
    return os.environ.get("ATOMDYN_PODMAN") or shutil.which("podman") or "podman"


@dataclass(frozen=True)
class PodmanCLI(DockerCLI):
    """podman on this node, daemonless: its image store is the one the job's environment names
    (CONTAINERS_STORAGE_CONF, set from PODMAN_CONFIG_DIR), else podman's default. Same commands as docker's
    for what this module does (image inspect, load, save); image ids are written as docker writes them."""

    host: str = ""
    # Set on the submit host to reach a node's store from outside its job (the local cluster's wipe).
    env_overrides: Mapping[str, str] = field(default_factory=dict)
    name = "podman"
    _package = "podman"

    def command(self) -> str:
        return self.client or podman_client()

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.env_overrides}

    @property
    def where(self) -> str:
        return self.env().get("CONTAINERS_STORAGE_CONF") or "podman's default storage"

    def version(self) -> str:
        return self.run("version", "--format", "{{.Client.Version}}", timeout=20)

    def describe(self, version: str) -> str:
        return f"podman {version} ({self.where})"

    def image_id(self, reference: str) -> str | None:
        found = super().image_id(reference)  # podman's Id has no "sha256:"; both are the config's digest
        return f"sha256:{found}" if found and not found.startswith("sha256:") else found

    def run_args(self) -> list[str]:
        return [*super().run_args(), "--pull=never"]  # as PodmanRuntime: a missing image is named, not pulled

    def save_args(self, path: Path, tags: Sequence[str]) -> list[str]:
        # -m: several images in one docker-archive (podman saves only one without it)
        return ["save", "--format", "docker-archive", "-m", "-o", str(path), *tags]


class PodmanStore(DaemonStore):
    """podman's storage on each node (no daemon): the one the job's environment names."""

    name: ClassVar[str] = "podman"
    cli: ClassVar[type[DockerCLI]] = PodmanCLI
    image_rows: ClassVar[tuple[str, ...]] = ("podman", "image")
