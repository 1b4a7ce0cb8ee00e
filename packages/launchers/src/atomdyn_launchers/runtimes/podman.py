"""``RUNTIME=podman``: ``podman run`` of the same image as the docker runtime, from each node's podman storage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from atomdyn_launchers.job.images import DockerCLI
from atomdyn_launchers.job.podman import PodmanCLI
from atomdyn_launchers.runtimes.base import RuntimeSpec
from atomdyn_launchers.runtimes.docker import DockerRuntime
from atomdyn_launchers.sbatch import Arg

if TYPE_CHECKING:
    from atomdyn_launchers.config.cluster import ClusterConfig

# podman reads its configuration files from these variables (containers-storage.conf(5), containers.conf(5)).
PODMAN_CONFIG_FILES = (("CONTAINERS_STORAGE_CONF", "storage.conf"), ("CONTAINERS_CONF", "containers.conf"))


def podman_env(config: ClusterConfig, node: str) -> dict[str, str]:
    """The variables that point podman at PODMAN_CONFIG_DIR's files for jobs on ``node`` (``%n`` = the node);
    empty: podman's own configuration on the node."""
    if not config.podman_config_dir:
        return {}
    directory = config.podman_config_dir.replace("%n", node)
    return {var: f"{directory}/{name}" for var, name in PODMAN_CONFIG_FILES}


@dataclass(frozen=True)
class PodmanRuntime(DockerRuntime):
    """``podman run`` of the same image, with the docker runtime's options (podman takes docker's run options:
    ``--rm --init --name --network host --ipc host --cap-add --ulimit --device --group-add --security-opt -v
    -e``), stopped by name in the same way (``podman stop``/``rm -f``: the container's conmon outlives the job's
    client as a docker container outlives its client). Daemonless: the image store is the node's podman
    storage (PODMAN_CONFIG_DIR's storage.conf, or podman's default), which ``nodes.prepare`` loads from the
    verified archive. What differs from docker:

    - ``--pull=never``: an image missing on the node fails at once, naming it, instead of podman trying a
      registry (the images come from ``nodes.prepare``, never a pull).
    - NVIDIA GPUs as a CDI device, ``--device nvidia.com/gpu=all`` (podman 4 has no ``--gpus``; the node needs
      the CDI spec ``nvidia-ctk cdi generate`` writes). AMD: ``/dev/kfd`` and ``/dev/dri`` with
      ``--group-add video``, as docker (rootless podman needs ``keep-groups`` instead: docs/runtimes.md).
    - Limits: rootful podman sets nofile and nproc itself (containers.conf ``default_ulimits``) unless the
      command gives any ``--ulimit``; the engines' own ``--ulimit`` options are passed as they are."""

    docker: str = "podman"
    name: ClassVar[str] = "podman"
    image_store: ClassVar[str] = "podman"
    nvidia_gpus: ClassVar[tuple[str, ...]] = ("--device", "nvidia.com/gpu=all")
    # podman prints an image's Id without docker's "sha256:" (both are the config's digest).
    image_id_template: ClassVar[str] = '"sha256:{{.Id}}"'

    @classmethod
    def build(cls, config: ClusterConfig, spec: RuntimeSpec) -> PodmanRuntime:
        return cls(spec.image, spec.container_prefix, spec.mounts, lock_memory=spec.lock_memory)

    @classmethod
    def job_env(cls, config: ClusterConfig, node: str, docker_host: str = "") -> dict[str, str]:
        """podman_env: the node's podman storage, which nodes.prepare loaded (DOCKER_HOST plays no part)."""
        return podman_env(config, node)

    @classmethod
    def store_cli(cls, config: ClusterConfig, node: str, docker_host: str) -> DockerCLI | None:
        return PodmanCLI(env_overrides=podman_env(config, node))

    @classmethod
    def prepare_problem(cls, strategy: str) -> str | None:
        if strategy == "load":
            return None
        return (
            f"RUNTIME=podman prepares with the load strategy only (--strategy {strategy} builds in each node's "
            "docker daemon, which podman does not use): the archive is built and saved by Docker on the first "
            "node, then loaded into every node's podman storage"
        )

    def _run(self) -> list[Arg]:
        return [self.docker, "run", "--rm", "--init", "--pull=never"]
