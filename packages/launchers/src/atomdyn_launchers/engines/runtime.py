"""Where a role's processes run: the venv's Python directly, ``docker run`` or ``podman run`` of the built
image, or a pyxis container step (``srun --container-image=<squashfs>``) of the same image imported by enroot.

A runtime wraps an engine's command line; it knows nothing about engines. What differs per GPU vendor (which
devices a container gets, which variable selects GPUs) is data the engine hands it (:class:`DeviceAccess`).
"""

from __future__ import annotations

import itertools
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
    # The node's kernel configuration mounted read-only at /boot/config-<release> (UCX's ROCm dma-buf check
    # reads only that file), when the node has it: see kernel_config_prelude.
    kernel_config: bool = False

    def docker_args(self, nvidia_gpus: Sequence[str] = ("--gpus", "all")) -> list[Arg]:
        """``nvidia_gpus``: how the client asks for every NVIDIA GPU (podman: a CDI device, see PodmanRuntime)."""
        args: list[Arg] = list(self.container_args)
        if self.vendor == "amd":
            args += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
        elif self.vendor == "nvidia":
            args += list(nvidia_gpus)
        if self.rdma_required:
            # The RDMA path is the point of this engine: a node without /dev/infiniband fails loudly here.
            args += ["--device", "/dev/infiniband"]
        elif self.vendor != "none" and self.rdma_optional:
            args.append(Shell('"${IB_DEVICE_ARGS[@]}"'))  # NVLink-only hosts have none; see prelude()
        if self.rdma is not None:
            args += self.rdma.args()
        if self.kernel_config:
            args.append(Shell('"${KERNEL_CONFIG_ARGS[@]}"'))  # see kernel_config_prelude
        if self.gpu_visibility:
            args += ["-e", self.gpu_visibility]  # from the job (Slurm's GPU binding); absent if unset there
        return args

    def prelude(self) -> list[str]:
        lines = kernel_config_prelude("docker") if self.kernel_config else []
        if self.rdma_required or self.vendor == "none" or not self.rdma_optional:
            return lines
        return [
            *lines,
            "IB_DEVICE_ARGS=()",
            "if [ -e /dev/infiniband ]; then IB_DEVICE_ARGS=(--device /dev/infiniband); fi",
        ]

    def pyxis_mounts(self) -> tuple[str, ...]:
        """What pyxis bind-mounts for the devices (``--container-mounts`` entries, SRC:DST[:FLAGS]). enroot has
        no AMD hook: ROCm's /dev/kfd and /dev/dri are bind-mounted like any path (the docker runtime passes
        them with ``--device``; a bind mount gives the same nodes, and access is the user's own on the host,
        so the user must be in the groups that own them, video/render, as ``--group-add video`` gives docker).
        NVIDIA GPUs come through enroot's nvidia hook instead (:meth:`pyxis_env`). RDMA: /dev/infiniband
        mounted (optional: by the prelude, when the node has it); the verbs provider libraries read-only."""
        mounts: list[str] = []
        if self.vendor == "amd":
            mounts += ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"]
        if self.rdma_required:
            mounts.append("/dev/infiniband:/dev/infiniband")
        if self.rdma is not None:
            mounts += [f"{lib}:{lib}:ro" for lib in self.rdma.provider_libs]
        return tuple(mounts)

    def pyxis_env(self) -> dict[str, str]:
        """Variables a pyxis container gets for its devices. NVIDIA: enroot's hook (``98-nvidia.sh``) runs
        nvidia-container-cli with ``--device=$NVIDIA_VISIBLE_DEVICES`` and the capabilities of
        ``NVIDIA_DRIVER_CAPABILITIES`` (default: utility only), i.e. what ``docker run --gpus all`` gives;
        which GPUs the processes use is still the job's CUDA_VISIBLE_DEVICES. The provider libraries are named
        to libibverbs as in the docker runtime (RdmaMounts)."""
        env: dict[str, str] = {}
        if self.vendor == "nvidia":
            env.update(NVIDIA_VISIBLE_DEVICES="all", NVIDIA_DRIVER_CAPABILITIES="compute,utility")
        if self.rdma is not None:
            drivers = [n for lib in self.rdma.providers if (n := self.rdma.driver_name(lib)) is not None]
            if drivers:
                env["RDMAV_DRIVERS"] = ":".join(drivers)
        return env

    def pyxis_optional_rdma(self) -> bool:
        return not self.rdma_required and self.vendor != "none" and self.rdma_optional

    def pyxis_prelude(self, lock_memory: bool) -> list[str]:
        """The job's limits, which a pyxis container inherits from its step (srun propagates the submitting
        shell's limits, and enroot sets none of its own): what the docker runtime gives with ``--ulimit``,
        raised here as soft limits (a hard limit below one is the site's: the job then says so and goes on,
        as the engine may still start). No seccomp profile: the only filter in pyxis and enroot is the remapped
        root's (``seccomp_filter.h``, from enroot's ``enroot-nsenter.c``: chown and setuid-family calls return
        success, nothing is denied), which pyxis installs only with --container-remap-root (its
        ``pyxis_slurmstepd.c``), never passed; so ATOM's ``--security-opt seccomp=unconfined`` has nothing
        to undo; its ``--cap-add SYS_PTRACE`` has no pyxis
        equivalent (the container is the user's own processes: the host's ptrace policy applies). Then the
        optional /dev/infiniband mount, as the docker runtime's IB_DEVICE_ARGS."""
        limits: list[tuple[str, str, str]] = []
        if lock_memory and self.vendor != "none":
            limits.append(("-l", "unlimited", "locked memory"))
        args = list(self.container_args)
        for flag, value in itertools.pairwise(args):
            if flag != "--ulimit":
                continue
            name, _, amount = value.partition("=")
            soft = amount.split(":", 1)[0]
            if name == "stack":
                limits.append(("-s", str(int(soft) // 1024), "stack (KiB)"))
            elif name == "nofile":
                limits.append(("-n", soft, "open files"))
            elif name == "memlock" and ("-l", "unlimited", "locked memory") not in limits:
                limits.append(
                    ("-l", "unlimited" if soft == "-1" else str(int(soft) // 1024), "locked memory")
                )
        lines: list[str] = []
        if limits:
            lines.append("# The pyxis container inherits this job's limits (the docker runtime's --ulimit).")
        for option, value, what in limits:
            lines.append(
                f"ulimit -S {option} {value} 2>/dev/null || "
                f'echo "cannot raise the {what} limit to {value} (hard limit $(ulimit -H {option}))" >&2'
            )
        if self.pyxis_optional_rdma():
            lines += [
                "IB_MOUNT=''",
                "if [ -e /dev/infiniband ]; then IB_MOUNT=,/dev/infiniband:/dev/infiniband; fi",
            ]
        if self.kernel_config:
            lines += kernel_config_prelude("pyxis")
        return lines

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


# Where UCX looks for the kernel's configuration (``/boot/config-<uname -r>``, src/uct/rocm/base/rocm_base.c at the
# pinned UCX), and the other place distributions install it (RHEL, Fedora: /lib/modules/<release>/config); a test
# points both elsewhere.
BOOT_DIR = "/boot"
MODULES_DIR = "/lib/modules"


def kernel_config_prelude(runtime: str) -> list[str]:
    """Job lines that find the node's kernel configuration and mount it read-only where UCX reads it in the
    container, ``/boot/config-<release>``: UCX decides ROCm dma-buf support from that file alone
    (``uct_rocm_base_is_dmabuf_supported``: CONFIG_DMABUF_MOVE_NOTIFY=y and CONFIG_PCI_P2PDMA=y), and no
    runtime mounts /boot. ``runtime``: "docker" (docker and podman: ``KERNEL_CONFIG_ARGS``, -v options) or
    "pyxis" (``KERNEL_CONFIG_MOUNT``, a ``,SRC:DST:ro`` entry of --container-mounts). A node without the file
    gets no mount, and the job says what UCX will then decide."""
    if runtime == "pyxis":
        empty, mount = "KERNEL_CONFIG_MOUNT=''", 'KERNEL_CONFIG_MOUNT=",$KERNEL_CONFIG_SRC:$KERNEL_CONFIG:ro"'
    else:
        empty, mount = (
            "KERNEL_CONFIG_ARGS=()",
            'KERNEL_CONFIG_ARGS=(-v "$KERNEL_CONFIG_SRC:$KERNEL_CONFIG:ro")',
        )
    boot, modules = shlex.quote(BOOT_DIR), shlex.quote(MODULES_DIR)
    return [
        "# UCX decides ROCm dma-buf support from /boot/config-<release> alone (src/uct/rocm/base/rocm_base.c):",
        "# the node's kernel configuration, read-only, where the container's UCX reads it.",
        f'KERNEL_CONFIG={boot}/config-"$(uname -r)"',
        "KERNEL_CONFIG_SRC=''",
        f'for candidate in "$KERNEL_CONFIG" {modules}/"$(uname -r)"/config; do',
        '  if [ -r "$candidate" ]; then KERNEL_CONFIG_SRC=$candidate; break; fi',
        "done",
        empty,
        'if [ -n "$KERNEL_CONFIG_SRC" ]; then',
        f"  {mount}",
        "else",
        '  echo "no kernel configuration at $KERNEL_CONFIG: UCX will find no ROCm dma-buf support" >&2',
        "fi",
    ]


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

    def _run(self) -> list[Arg]:
        return [self.docker, "run", "--rm", "--init"]

    def _devices(self, devices: DeviceAccess) -> list[Arg]:
        return devices.docker_args()

    def _base(self, name: str, devices: DeviceAccess) -> list[Arg]:
        # --init: the container's PID 1 is an init that forwards the client's SIGTERM to the process, which
        # (python during a model load) may have no handler for it; a PID 1 without one ignores it.
        args: list[Arg] = [*self._run(), "--name", self.container_name(name)]
        args += ["--network", "host", "--ipc", "host"]
        if self.lock_memory:
            args += ["--cap-add", "IPC_LOCK", "--ulimit", "memlock=-1"]
        args += self._devices(devices)
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
            return [*self._run(), "--network", "host", *_env_args(env or {}), self.image, *command]
        return [*self._base(name or "probe", devices), *_env_args(env or {}), self.image, *command]

    def prelude(self, devices: DeviceAccess) -> list[str]:
        return devices.prelude()


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
    name: str = "podman"

    def _run(self) -> list[Arg]:
        return [self.docker, "run", "--rm", "--init", "--pull=never"]

    def _devices(self, devices: DeviceAccess) -> list[Arg]:
        return devices.docker_args(nvidia_gpus=("--device", "nvidia.com/gpu=all"))


@dataclass(frozen=True)
class PyxisRuntime:
    """A role's process as a pyxis container step of the job: ``srun --overlap --ntasks=1 --nodes=1
    --container-image=<squashfs> --container-mounts=<the docker runtime's mounts> --container-env=<names>
    <command>`` (the job is pinned to its node by sbatch; the step shares the job's resources).

    From pyxis's option table (``args.c``) and tests (``tests/env.bats``, ``tests/env_vars.bats``), upstream
    NVIDIA/pyxis: ``--container-image`` takes an enroot URI or a path to a squashfs file on the node (here the
    squashfs ``nodes.prepare`` imported with ``enroot import`` into SHARED_DIR/images); ``--container-mounts``
    takes ``SRC:DST[:FLAGS]`` entries separated by ``,`` (flags joined by ``+``); ``--container-env`` names
    variables whose values come from the step's own environment (srun's, i.e. the job's, plus the ``env``
    prefix below) and override the image's: without it every exported variable is passed too, but the
    image's own value of it wins. ``--no-container-mount-home`` (docker mounts no home either),
    ``--no-container-remap-root`` (the user's own uid, as the files it writes on the shared filesystem need;
    pyxis installs its seccomp filter only with remap-root), ``--no-container-entrypoint`` (the command runs
    as given: the project's Dockerfiles set no entrypoint; whether a base image's would matter is for the first
    pyxis site to see).

    Stopping: the job script's ``srun`` is its child like ``docker run`` is, but the container's processes
    belong to the step, not to a daemon: srun forwards the script's SIGTERM to the step's task, and a
    step ends with its srun; nothing is left to stop by name (no :class:`Container`)."""

    image: str  # the squashfs path on the shared filesystem (or an enroot URI)
    mounts: Sequence[str]
    srun: str = "srun"
    python: str = "python3"
    name: str = "pyxis"
    lock_memory: bool = True

    def _srun(self, names: Sequence[str], devices: DeviceAccess | None, mounts: bool = True) -> list[Arg]:
        args: list[Arg] = [self.srun, "--overlap", "--ntasks=1", "--nodes=1"]
        args.append(f"--container-image={self.image}")
        entries = [f"{m}:{m}" for m in self.mounts] if mounts else []
        entries += list(devices.pyxis_mounts()) if devices is not None else []
        optional_ib = devices is not None and devices.pyxis_optional_rdma()
        optional = ['"$IB_MOUNT"'] if optional_ib else []
        if devices is not None and devices.kernel_config:
            if not entries:
                raise ValueError(
                    "the kernel configuration's mount comes after other mounts (a GPU's devices)"
                )
            optional.append('"$KERNEL_CONFIG_MOUNT"')
        if entries and optional:
            args.append(Shell(shlex.quote("--container-mounts=" + ",".join(entries)) + "".join(optional)))
        elif optional_ib:  # nothing else to mount: the option only when the node has /dev/infiniband
            args.append(Shell('${IB_MOUNT:+"--container-mounts=${IB_MOUNT#,}"}'))
        elif entries:
            args.append("--container-mounts=" + ",".join(entries))
        args += ["--no-container-mount-home", "--no-container-remap-root", "--no-container-entrypoint"]
        if names:
            args.append("--container-env=" + ",".join(sorted(set(names))))
        return args

    @staticmethod
    def _split(env: Mapping[str, Arg]) -> tuple[dict[str, Arg], dict[str, Arg]]:
        """(set on srun and named in --container-env, set by ``env`` inside the container). The dynamic
        loader's variables (LD_PRELOAD of the dma-buf helper, LD_DEBUG of the provider check) only inside:
        on srun they would act on srun itself, a host program (the helper's path is the image's)."""
        outer = {k: v for k, v in env.items() if not k.startswith("LD_")}
        return outer, {k: v for k, v in env.items() if k.startswith("LD_")}

    @staticmethod
    def _inner(argv: Sequence[Arg], devices: DeviceAccess | None, env: Mapping[str, Arg]) -> list[Arg]:
        """The command in the container. A pyxis container gets every variable of the step, and a step
        with GPUs gets Slurm's GPU variables again: the vendor's selection variable alone stays, as in the
        job (DeviceAccess.selection_prelude)."""
        var = devices.gpu_visibility if devices is not None else None
        unset: list[Arg] = []
        for other in GPU_VISIBILITY_VARS if var else ():
            if other != var:
                unset += ["-u", other]
        prefix = _env_prefix(env)
        if not unset and not prefix:
            return list(argv)
        return ["env", *unset, *prefix[1:], *argv]

    def wrap(
        self,
        name: str,
        argv: Sequence[Arg],
        env: Mapping[str, Arg],
        devices: DeviceAccess,
        inherit: Sequence[str] = (),
    ) -> ProcessSpec:
        """``env`` must hold everything the process needs (as for docker). Its values are set on srun (the
        ``env`` prefix the job script writes) and named in ``--container-env``; ``inherit`` (secrets the job
        script exports) only named, so their values never appear on a command line."""
        full: dict[str, Arg] = {**devices.pyxis_env(), **{k: v for k, v in env.items() if k not in inherit}}
        outer, inner = self._split(full)
        command = [*self._srun([*outer, *inherit], devices), *self._inner(argv, devices, inner)]
        return ProcessSpec(name, command, outer)

    def tool(
        self,
        argv: Sequence[str],
        env: Mapping[str, Arg] | None = None,
        devices: DeviceAccess | None = None,
        name: str | None = None,
    ) -> list[Arg]:
        """A short-lived command in the image as a step of the job; with ``devices`` as the worker will run
        (same mounts, devices and environment), else bare (no mounts)."""
        command: list[Arg] = [self.python if argv[0] == "python" else argv[0], *argv[1:]]
        full: dict[str, Arg] = {**(devices.pyxis_env() if devices else {}), **(env or {})}
        outer, inner = self._split(full)
        srun = self._srun(list(outer), devices, mounts=devices is not None)
        return [*_env_prefix(outer), *srun, *self._inner(command, devices, inner)]

    def prelude(self, devices: DeviceAccess) -> list[str]:
        return devices.pyxis_prelude(self.lock_memory)


Runtime = VenvRuntime | DockerRuntime | PodmanRuntime | PyxisRuntime
# The runtimes whose processes run in the image: their environment is complete, the job's exports aside.
CONTAINER_RUNTIMES = (DockerRuntime, PodmanRuntime, PyxisRuntime)


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
