"""What the launchers need of a runtime, in one protocol: the engines wrap a role's command lines with it (its
processes, short-lived tools, the job lines before them, the record of the image it runs), and the nodes, the
checks and the validation ask it, as a kind, what differs between runtimes (whether its processes run in the
image, where the images live, what a node job needs in its environment to reach them, which paths it can mount).
Nothing outside ``runtimes/`` compares a runtime's name.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from atomdyn_launchers.job.stores import STORES, NodeStore
from atomdyn_launchers.runtimes.devices import DeviceAccess
from atomdyn_launchers.sbatch import Arg, ProcessSpec, Shell

if TYPE_CHECKING:
    from atomdyn_launchers.config.cluster import ClusterConfig
    from atomdyn_launchers.job.images import DockerCLI


@dataclass(frozen=True)
class RuntimeSpec:
    """What a runtime object is built from besides the cluster configuration: the image (a tag; pyxis runs its
    imported squashfs), the venv (the venv runtime's), what containers are named after and mount, the docker
    client, and whether the processes get unlimited locked memory (RDMA registration; not for vendor "none")."""

    image: str = ""
    venv: Path = Path()
    container_prefix: str = ""
    mounts: Sequence[str] = ()
    docker: str = "docker"
    lock_memory: bool = True


class Runtime(Protocol):
    """A runtime: the kind (class attributes and class methods, asked by nodes, checks and validation) and the
    object one run or job wraps its processes with (built by :func:`atomdyn_launchers.runtimes.runtime_for`)."""

    name: ClassVar[str]  # RUNTIME in cluster.env
    # The processes run in the pinned image: their environment is complete, the job's exports aside.
    in_image: ClassVar[bool]
    # The images live in each node's own image store (nodes.prepare loads or builds them on every node).
    node_images: ClassVar[bool]
    # Where the images live on the nodes: a row of job/stores.py's STORES (the node side, which may not import
    # this registry, gets it in its spec as node_facts()), and whether the containers mount RDMA_PROVIDER_LIBS
    # (which must then exist on the node).
    image_store: ClassVar[str]
    mounts_rdma_libs: ClassVar[bool]

    @property
    def python(self) -> str: ...

    @property
    def image(self) -> str: ...

    def wrap(
        self,
        name: str,
        argv: Sequence[Arg],
        env: Mapping[str, Arg],
        devices: DeviceAccess,
        inherit: Sequence[str] = (),
    ) -> ProcessSpec: ...

    def tool(
        self,
        argv: Sequence[str],
        env: Mapping[str, Arg] | None = None,
        devices: DeviceAccess | None = None,
        name: str | None = None,
    ) -> list[Arg]: ...

    def prelude(self, devices: DeviceAccess) -> list[str]: ...

    def image_prelude(self, images_dir: str, target: str, node_python: Sequence[str]) -> list[str]: ...

    @classmethod
    def build(cls, config: ClusterConfig, spec: RuntimeSpec) -> Runtime: ...

    @classmethod
    def job_env(cls, config: ClusterConfig, node: str, docker_host: str = "") -> dict[str, str]: ...

    @classmethod
    def store_cli(cls, config: ClusterConfig, node: str, docker_host: str) -> DockerCLI | None: ...

    @classmethod
    def node_facts(cls) -> dict[str, object]: ...

    @classmethod
    def store(cls) -> type[NodeStore]: ...

    @classmethod
    def mount_problem(cls, key: str, path: str) -> str | None: ...

    @classmethod
    def prepare_problem(cls, strategy: str) -> str | None: ...


class RuntimeKind:
    """What most runtimes answer alike, as a kind."""

    name: ClassVar[str]
    in_image: ClassVar[bool]
    node_images: ClassVar[bool]
    image_store: ClassVar[str] = "docker"  # the venv runtime's too: images given explicitly are checked there
    mounts_rdma_libs: ClassVar[bool] = False

    @classmethod
    def node_facts(cls) -> dict[str, object]:
        """What a node job asks of the runtime, as JSON for its spec (job/node_check.py, job/node_prepare.py
        read it there, standard library only): where the images live, whether its processes run in them,
        what its containers mount. The node side never compares the runtime's name."""
        return {
            "name": cls.name,  # for messages only
            "in_image": cls.in_image,
            "node_images": cls.node_images,
            "image_store": cls.image_store,
            "mounts_rdma_libs": cls.mounts_rdma_libs,
        }

    @classmethod
    def store(cls) -> type[NodeStore]:
        """The image store the runtime's images live in (job/stores.py): whether it is shared, what it holds."""
        return STORES[cls.image_store]

    @classmethod
    def job_env(cls, config: ClusterConfig, node: str, docker_host: str = "") -> dict[str, str]:
        """What a job on ``node`` needs in its environment to reach the image store: the docker daemon's
        address when one is given."""
        return {"DOCKER_HOST": docker_host} if docker_host else {}

    @classmethod
    def store_cli(cls, config: ClusterConfig, node: str, docker_host: str) -> DockerCLI | None:
        """The client of the node's image store the runtime runs its images from (None: no such store)."""
        return None

    @classmethod
    def mount_problem(cls, key: str, path: str) -> str | None:
        """Why the path of cluster key ``key`` cannot be mounted into every container (None: it can)."""
        return None

    @classmethod
    def prepare_problem(cls, strategy: str) -> str | None:
        """Why ``nodes.prepare`` cannot use ``strategy`` for this runtime (None: it can)."""
        return None


def quoted(argv: Sequence[Arg]) -> str:
    return " ".join(a.text if isinstance(a, Shell) else shlex.quote(a) for a in argv)


def env_args(env: Mapping[str, Arg]) -> list[Arg]:
    args: list[Arg] = []
    for key, value in sorted(env.items()):
        args += [
            "-e",
            Shell(shlex.quote(f"{key}=") + value.text) if isinstance(value, Shell) else f"{key}={value}",
        ]
    return args


def env_prefix(env: Mapping[str, Arg] | None) -> list[Arg]:
    if not env:
        return []
    out: list[Arg] = ["env"]
    for key, value in sorted(env.items()):
        out.append(
            Shell(shlex.quote(f"{key}=") + value.text) if isinstance(value, Shell) else f"{key}={value}"
        )
    return out
