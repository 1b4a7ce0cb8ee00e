"""Where a role's processes run: the venv's Python directly, or ``docker run`` of the built image.

A runtime wraps an engine's command line; it knows nothing about engines. What differs per GPU vendor (which
devices a container gets, which variable selects GPUs) is data the engine hands it (:class:`DeviceAccess`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from atomdyn_launchers.sbatch import Arg, Container, ProcessSpec, Shell


@dataclass(frozen=True)
class RdmaMounts:
    """The node's verbs provider libraries a container uses for its RDMA NICs (RDMA_PROVIDER_LIBS, e.g. ionic's
    ``libionic-rdmav34.so``), mounted read-only at their own paths and named to libibverbs by absolute path in
    ``RDMAV_DRIVERS``, so that the configured library is the one used.

    From rdma-core's libibverbs (``dynamic_driver.c``, ``init.c``): it reads the ``driver <name>`` lines of
    the *.driver files in its configuration directory, a path compiled in (``IBV_CONFIG_DIR``, no variable
    changes it); ``RDMAV_DRIVERS`` (``:``-separated) is loaded before those; a name starting with ``/`` is
    dlopened as that path plus the provider suffix (``-rdmav<ABI>.so``), a bare name from the built-in
    provider directory, then the loader's search path; and a device goes to the first registered provider
    that takes it, so the library named here wins over the image's own copy. The image's /etc/libibverbs.d
    is left as it is (the node's, ``config_dir``, is not mounted: over the image's it hid the image's own
    entries, e.g. ionic.driver); without provider libraries the image's providers are used. A library whose
    name has no provider suffix (a dependency) is only mounted."""

    config_dir: str = "/etc/libibverbs.d"  # the node's (RDMA_VERBS_CONFIG_DIR): not mounted, see above
    provider_libs: tuple[str, ...] = ()

    @staticmethod
    def driver_name(lib: str) -> str | None:
        """What libibverbs is told to load for ``lib``: its path without the provider suffix (libibverbs adds
        its own ``-rdmav<ABI>.so``, so a library built for another ABI is not loaded); None: no provider."""
        stem, sep, tail = lib.rpartition("-rdmav")
        abi = tail.removesuffix(".so")
        if not sep or abi == tail or not (abi.isascii() and abi.isdigit()) or any(c in lib for c in ":;"):
            return None
        return stem if stem.startswith("/") and stem.rsplit("/", 1)[-1].startswith("lib") else None

    @property
    def providers(self) -> tuple[str, ...]:
        """The configured libraries libibverbs loads as providers: the RDMA check expects each to be used."""
        return tuple(lib for lib in self.provider_libs if self.driver_name(lib) is not None)

    def args(self) -> list[Arg]:
        args: list[Arg] = []
        for lib in self.provider_libs:
            args += ["-v", f"{lib}:{lib}:ro"]
        drivers = [name for lib in self.providers if (name := self.driver_name(lib)) is not None]
        if drivers:
            args += ["-e", "RDMAV_DRIVERS=" + ":".join(drivers)]
        return args


@dataclass(frozen=True)
class DeviceAccess:
    """The devices a worker's container gets and the one variable that selects its GPUs.

    ``gpu_visibility`` is passed through from the job (Slurm's binding) and no other: ROCm applies
    ROCR_VISIBLE_DEVICES and then HIP_VISIBLE_DEVICES on what is left, so passing both filters twice.
    """

    vendor: str  # "amd" | "nvidia" | "none"
    gpu_visibility: str | None = None
    rdma_required: bool = False
    rdma: RdmaMounts | None = None
    # Not required: /dev/infiniband passed when the node has it (False: never, a worker that moves no KV).
    rdma_optional: bool = True
    # The engine's own container settings (security options, limits), in the order it documents them.
    container_args: tuple[str, ...] = ()

    def docker_args(self) -> list[Arg]:
        args: list[Arg] = list(self.container_args)
        if self.vendor == "amd":
            args += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
        elif self.vendor == "nvidia":
            args += ["--gpus", "all"]
        if self.rdma_required:
            # The RDMA path is the point of this engine: a node without /dev/infiniband fails loudly here.
            args += ["--device", "/dev/infiniband"]
        elif self.vendor != "none" and self.rdma_optional:
            args.append(Shell('"${IB_DEVICE_ARGS[@]}"'))  # NVLink-only hosts have none; see prelude()
        if self.rdma is not None:
            args += self.rdma.args()
        if self.gpu_visibility:
            args += ["-e", self.gpu_visibility]  # from the job (Slurm's GPU binding); absent if unset there
        return args

    def prelude(self) -> list[str]:
        if self.rdma_required or self.vendor == "none" or not self.rdma_optional:
            return []
        return [
            "IB_DEVICE_ARGS=()",
            "if [ -e /dev/infiniband ]; then IB_DEVICE_ARGS=(--device /dev/infiniband); fi",
        ]

    def selection_prelude(self) -> list[str]:
        """Leave exactly one GPU selection variable in the job: the vendor's. Slurm's GPU binding may set
        CUDA_VISIBLE_DEVICES only; on AMD its indices then become ROCR_VISIBLE_DEVICES."""
        var = self.gpu_visibility
        if var is None:
            return []
        others = [v for v in GPU_VISIBILITY_VARS if v != var]
        lines = [f"# GPU selection: {var} alone (the others would filter the same GPUs a second time)."]
        if var != "CUDA_VISIBLE_DEVICES":
            lines.append(
                f'if [ -z "${{{var}+x}}" ] && [ -n "${{CUDA_VISIBLE_DEVICES+x}}" ]; then '
                f'export {var}="$CUDA_VISIBLE_DEVICES"; fi'
            )
        lines.append(f"unset {' '.join(others)}")
        return lines


NO_DEVICES = DeviceAccess("none")
# Every variable that selects GPUs: ROCm reads the first two (HIP's on top of ROCR's) and also the third; HIP also
# applies GPU_DEVICE_ORDINAL (which Slurm's GPU environment can set) after ROCR_VISIBLE_DEVICES.
GPU_VISIBILITY_VARS = (
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)


@dataclass(frozen=True)
class VenvRuntime:
    venv: Path
    name: str = "venv"

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def wrap(
        self,
        name: str,
        argv: Sequence[Arg],
        env: Mapping[str, Arg],
        devices: DeviceAccess,
        inherit: Sequence[str] = (),
    ) -> ProcessSpec:
        """``inherit``: variables the job script exports (secrets): a process started from it has them."""
        return ProcessSpec(name, list(argv), dict(env))

    def tool(self, argv: Sequence[str], env: Mapping[str, Arg] | None = None) -> list[Arg]:
        """A short-lived command (a probe); ``env`` is added in front of it."""
        command: list[Arg] = [str(self.venv / "bin" / argv[0]), *argv[1:]]
        if argv[0] == "python":
            command[0] = self.python
        return [*_env_prefix(env), *command]

    def prelude(self, devices: DeviceAccess) -> list[str]:
        return []


@dataclass(frozen=True)
class DockerRuntime:
    image: str
    container_prefix: str
    mounts: Sequence[str]
    docker: str = "docker"
    python: str = "python3"
    name: str = "docker"
    # Unlimited locked memory for RDMA registration. Engines without GPUs or RDMA (vendor "none") run with the
    # node's own limit, as in the venv runtime: a daemon may refuse to raise it ("error setting rlimit type
    # 8: operation not permitted", seen with the local cluster's per-node dockerd), and nothing is pinned.
    lock_memory: bool = True

    def container_name(self, name: str) -> str:
        return f"{self.container_prefix}-{name}"

    def _base(self, name: str, devices: DeviceAccess) -> list[Arg]:
        # --init: the container's PID 1 is an init that forwards the client's SIGTERM to the process, which
        # (python during a model load) may have no handler for it; a PID 1 without one ignores it.
        args: list[Arg] = [self.docker, "run", "--rm", "--init", "--name", self.container_name(name)]
        args += ["--network", "host", "--ipc", "host"]
        if self.lock_memory:
            args += ["--cap-add", "IPC_LOCK", "--ulimit", "memlock=-1"]
        args += devices.docker_args()
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
        args += _env_args({k: v for k, v in env.items() if k not in inherit})
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
            return [
                self.docker,
                "run",
                "--rm",
                "--init",
                "--network",
                "host",
                *_env_args(env or {}),
                self.image,
                *command,
            ]
        return [*self._base(name or "probe", devices), *_env_args(env or {}), self.image, *command]

    def prelude(self, devices: DeviceAccess) -> list[str]:
        return devices.prelude()


Runtime = VenvRuntime | DockerRuntime


def _env_args(env: Mapping[str, Arg]) -> list[Arg]:
    args: list[Arg] = []
    for key, value in sorted(env.items()):
        args += [
            "-e",
            Shell(shlex.quote(f"{key}=") + value.text) if isinstance(value, Shell) else f"{key}={value}",
        ]
    return args


def _env_prefix(env: Mapping[str, Arg] | None) -> list[Arg]:
    if not env:
        return []
    out: list[Arg] = ["env"]
    for key, value in sorted(env.items()):
        out.append(
            Shell(shlex.quote(f"{key}=") + value.text) if isinstance(value, Shell) else f"{key}={value}"
        )
    return out
