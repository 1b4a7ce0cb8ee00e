"""``RUNTIME=docker``: a role's processes as ``docker run`` of the built image, from each node's docker daemon
(``nodes.prepare`` builds or loads the images there)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from atomdyn_launchers.job.images import DockerCLI
from atomdyn_launchers.runtimes.base import RuntimeKind, RuntimeSpec, env_args, quoted
from atomdyn_launchers.runtimes.devices import DeviceAccess, RdmaMounts, kernel_config_prelude
from atomdyn_launchers.sbatch import Arg, Container, ProcessSpec, Shell

if TYPE_CHECKING:
    from atomdyn_launchers.config.cluster import ClusterConfig


def rdma_args(rdma: RdmaMounts) -> list[Arg]:
    """The provider libraries mounted read-only at their own paths, and named to libibverbs (RdmaMounts)."""
    args: list[Arg] = []
    for lib in rdma.provider_libs:
        args += ["-v", f"{lib}:{lib}:ro"]
    if rdma.drivers:
        args += ["-e", "RDMAV_DRIVERS=" + ":".join(rdma.drivers)]
    return args


def device_args(devices: DeviceAccess, nvidia_gpus: Sequence[str] = ("--gpus", "all")) -> list[Arg]:
    """``docker run``'s options for ``devices``. ``nvidia_gpus``: how the client asks for every NVIDIA GPU
    (podman: a CDI device, see PodmanRuntime)."""
    args: list[Arg] = list(devices.container_args)
    if devices.vendor == "amd":
        args += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
    elif devices.vendor == "nvidia":
        args += list(nvidia_gpus)
    if devices.rdma_required:
        # The RDMA path is the point of this engine: a node without /dev/infiniband fails loudly here.
        args += ["--device", "/dev/infiniband"]
    elif devices.optional_rdma:
        args.append(Shell('"${IB_DEVICE_ARGS[@]}"'))  # NVLink-only hosts have none; see device_prelude()
    if devices.rdma is not None:
        args += rdma_args(devices.rdma)
    if devices.kernel_config:
        args.append(Shell('"${KERNEL_CONFIG_ARGS[@]}"'))  # see kernel_config_prelude
    if devices.gpu_visibility:
        args += ["-e", devices.gpu_visibility]  # from the job (Slurm's GPU binding); absent if unset there
    return args


def device_prelude(devices: DeviceAccess) -> list[str]:
    """The job lines ``device_args`` reads: the kernel configuration's mount, the optional /dev/infiniband."""
    lines = (
        kernel_config_prelude(
            "KERNEL_CONFIG_ARGS=()", 'KERNEL_CONFIG_ARGS=(-v "$KERNEL_CONFIG_SRC:$KERNEL_CONFIG:ro")'
        )
        if devices.kernel_config
        else []
    )
    if not devices.optional_rdma:
        return lines
    return [
        *lines,
        "IB_DEVICE_ARGS=()",
        "if [ -e /dev/infiniband ]; then IB_DEVICE_ARGS=(--device /dev/infiniband); fi",
    ]


@dataclass(frozen=True)
class DockerRuntime(RuntimeKind):
    image: str
    container_prefix: str
    mounts: Sequence[str]
    docker: str = "docker"
    python: str = "python3"
    # Unlimited locked memory for RDMA registration. Engines without GPUs or RDMA (vendor "none") run with the
    # node's own limit, as in the venv runtime: a daemon may refuse to raise it ("error setting rlimit type
    # 8: operation not permitted", seen with the local cluster's per-node dockerd), and nothing is pinned.
    lock_memory: bool = True
    name: ClassVar[str] = "docker"
    in_image: ClassVar[bool] = True
    node_images: ClassVar[bool] = True
    mounts_rdma_libs: ClassVar[bool] = True  # rdma_args
    # How the client asks for every NVIDIA GPU.
    nvidia_gpus: ClassVar[tuple[str, ...]] = ("--gpus", "all")
    # `image inspect`'s Go template of the image's id, as "sha256:<digest>" in JSON.
    image_id_template: ClassVar[str] = "{{json .Id}}"

    @classmethod
    def build(cls, config: ClusterConfig, spec: RuntimeSpec) -> DockerRuntime:
        return cls(
            spec.image, spec.container_prefix, spec.mounts, docker=spec.docker, lock_memory=spec.lock_memory
        )

    @classmethod
    def store_cli(cls, config: ClusterConfig, node: str, docker_host: str) -> DockerCLI | None:
        return DockerCLI(docker_host)

    @classmethod
    def mount_problem(cls, key: str, path: str) -> str | None:
        """Every container mounts these paths with ``-v PATH:PATH``: a ':' in one would be read as the
        separator (the rest becoming the target or the options)."""
        if ":" not in path:
            return None
        return (
            f"{key}: {path!r} contains ':', which {cls.name} -v SOURCE:TARGET[:OPTIONS] would split "
            f"(RUNTIME={cls.name} mounts it into every container): use a path without ':'"
        )

    def container_name(self, name: str) -> str:
        return f"{self.container_prefix}-{name}"

    def _run(self) -> list[Arg]:
        return [self.docker, "run", "--rm", "--init"]

    def _base(self, name: str, devices: DeviceAccess) -> list[Arg]:
        # --init: the container's PID 1 is an init that forwards the client's SIGTERM to the process, which
        # (python during a model load) may have no handler for it; a PID 1 without one ignores it.
        args: list[Arg] = [*self._run(), "--name", self.container_name(name)]
        args += ["--network", "host", "--ipc", "host"]
        if self.lock_memory:
            args += ["--cap-add", "IPC_LOCK", "--ulimit", "memlock=-1"]
        args += device_args(devices, self.nvidia_gpus)
        for mount in self.mounts:
            args += ["-v", f"{mount}:{mount}"]
        return args

    def wrap(
        self,
        name: str,
        argv: Sequence[Arg],
        env: Mapping[str, Arg],
        devices: DeviceAccess,
        inherit: Sequence[str] = (),
    ) -> ProcessSpec:
        """``env`` must hold everything the process needs: a container does not inherit the job's exports.
        ``inherit`` names variables the job script exports (secrets such as etcd's client key): ``-e NAME``
        copies them from the docker client's environment, so their values never appear in its command line
        (which every user of the node can read in ps)."""
        args = self._base(name, devices)
        args += env_args({k: v for k, v in env.items() if k not in inherit})
        for key in sorted(inherit):
            args += ["-e", key]
        return ProcessSpec(
            name, [*args, self.image, *argv], {}, Container(self.container_name(name), self.docker)
        )

    def tool(
        self,
        argv: Sequence[str],
        env: Mapping[str, Arg] | None = None,
        devices: DeviceAccess | None = None,
        name: str | None = None,
    ) -> list[Arg]:
        """A short-lived command in the image; ``python`` means the image's Python. With ``devices`` it runs
        as the worker will (same devices, mounts and environment), else as a bare probe."""
        command = [self.python if argv[0] == "python" else argv[0], *argv[1:]]
        if devices is None:
            return [*self._run(), "--network", "host", *env_args(env or {}), self.image, *command]
        return [*self._base(name or "probe", devices), *env_args(env or {}), self.image, *command]

    def prelude(self, devices: DeviceAccess) -> list[str]:
        return device_prelude(devices)

    def image_prelude(self, images_dir: str, target: str, node_python: Sequence[str]) -> list[str]:
        """The image the workers run, as the node's image store has it, with the lock digest its label carries,
        to ``target`` (the run records that digest, not the checkout's)."""
        template = (
            '{"image": ' + json.dumps(self.image) + ', "id": ' + self.image_id_template + ", "
            '"lock_digest": {{if .Config.Labels}}{{json (index .Config.Labels "io.atomdyn.lock.digest")}}'
            '{{else}}""{{end}}}'
        )  # an image without any label has no Labels map, and `index` of nothing is an error
        inspect = [self.docker, "image", "inspect", "--format", template, self.image]
        return [
            "# The image the workers run and the lock its label names (read now, on this node).",
            f"mkdir -p {shlex.quote(images_dir)}",
            f"if ! {quoted(inspect)} >{shlex.quote(target + '.tmp')}; then",
            f"  log 'cannot inspect image {self.image} on this node'",
            "  exit 2",
            "fi",
            f"mv -f {shlex.quote(target + '.tmp')} {shlex.quote(target)}",
        ]
