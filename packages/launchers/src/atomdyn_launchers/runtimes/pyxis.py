"""``RUNTIME=pyxis``: a role's processes as pyxis container steps of the job (``srun --container-image``) of the
image's enroot squashfs, imported once by ``nodes.prepare`` into the shared filesystem."""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from atomdyn_launchers.job import squashfs
from atomdyn_launchers.runtimes.base import RuntimeKind, RuntimeSpec, env_prefix, quoted
from atomdyn_launchers.runtimes.devices import GPU_VISIBILITY_VARS, DeviceAccess, kernel_config_prelude
from atomdyn_launchers.sbatch import Arg, ProcessSpec, Shell

if TYPE_CHECKING:
    from atomdyn_launchers.config.cluster import ClusterConfig


def device_mounts(devices: DeviceAccess) -> tuple[str, ...]:
    """What pyxis bind-mounts for the devices (``--container-mounts`` entries, SRC:DST[:FLAGS]). enroot has
    no AMD hook: ROCm's /dev/kfd and /dev/dri are bind-mounted like any path (the docker runtime passes
    them with ``--device``; a bind mount gives the same nodes, and access is the user's own on the host,
    so the user must be in the groups that own them, video/render, as ``--group-add video`` gives docker).
    NVIDIA GPUs come through enroot's nvidia hook instead (:func:`device_env`). RDMA: /dev/infiniband
    mounted (optional: by the prelude, when the node has it); the verbs provider libraries read-only."""
    mounts: list[str] = []
    if devices.vendor == "amd":
        mounts += ["/dev/kfd:/dev/kfd", "/dev/dri:/dev/dri"]
    if devices.rdma_required:
        mounts.append("/dev/infiniband:/dev/infiniband")
    if devices.rdma is not None:
        mounts += [f"{lib}:{lib}:ro" for lib in devices.rdma.provider_libs]
    return tuple(mounts)


def device_env(devices: DeviceAccess) -> dict[str, str]:
    """Variables a pyxis container gets for its devices. NVIDIA: enroot's hook (``98-nvidia.sh``) runs
    nvidia-container-cli with ``--device=$NVIDIA_VISIBLE_DEVICES`` and the capabilities of
    ``NVIDIA_DRIVER_CAPABILITIES`` (default: utility only), i.e. what ``docker run --gpus all`` gives;
    which GPUs the processes use is still the job's CUDA_VISIBLE_DEVICES. The provider libraries are named
    to libibverbs as in the docker runtime (RdmaMounts)."""
    env: dict[str, str] = {}
    if devices.vendor == "nvidia":
        env.update(NVIDIA_VISIBLE_DEVICES="all", NVIDIA_DRIVER_CAPABILITIES="compute,utility")
    if devices.rdma is not None and devices.rdma.drivers:
        env["RDMAV_DRIVERS"] = ":".join(devices.rdma.drivers)
    return env


def device_prelude(devices: DeviceAccess, lock_memory: bool) -> list[str]:
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
    if lock_memory and devices.vendor != "none":
        limits.append(("-l", "unlimited", "locked memory"))
    args = list(devices.container_args)
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
            limits.append(("-l", "unlimited" if soft == "-1" else str(int(soft) // 1024), "locked memory"))
    lines: list[str] = []
    if limits:
        lines.append("# The pyxis container inherits this job's limits (the docker runtime's --ulimit).")
    for option, value, what in limits:
        lines.append(
            f"ulimit -S {option} {value} 2>/dev/null || "
            f'echo "cannot raise the {what} limit to {value} (hard limit $(ulimit -H {option}))" >&2'
        )
    if devices.optional_rdma:
        lines += [
            "IB_MOUNT=''",
            "if [ -e /dev/infiniband ]; then IB_MOUNT=,/dev/infiniband:/dev/infiniband; fi",
        ]
    if devices.kernel_config:
        lines += kernel_config_prelude(
            "KERNEL_CONFIG_MOUNT=''", 'KERNEL_CONFIG_MOUNT=",$KERNEL_CONFIG_SRC:$KERNEL_CONFIG:ro"'
        )
    return lines


@dataclass(frozen=True)
class PyxisRuntime(RuntimeKind):
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
    lock_memory: bool = True
    name: ClassVar[str] = "pyxis"
    in_image: ClassVar[bool] = True
    node_images: ClassVar[bool] = False
    image_store: ClassVar[str] = "squashfs"
    mounts_rdma_libs: ClassVar[bool] = True  # device_mounts

    @classmethod
    def build(cls, config: ClusterConfig, spec: RuntimeSpec) -> PyxisRuntime:
        # The squashfs nodes.prepare imported from the image into the shared filesystem (job/squashfs.py).
        path = squashfs.squashfs_path(config.images_dir, spec.image)
        return cls(str(path), spec.mounts, lock_memory=spec.lock_memory)

    @classmethod
    def mount_problem(cls, key: str, path: str) -> str | None:
        """Every container's mounts are one ``--container-mounts=SRC:DST[:FLAGS][,SRC:DST...]``: a ':' or a
        ',' in a path would split it (pyxis's args.c)."""
        if ":" not in path and "," not in path:
            return None
        return (
            f"{key}: {path!r} contains ':' or ',', which pyxis --container-mounts=SRC:DST[:FLAGS][,...] "
            "would split (RUNTIME=pyxis mounts it into every container): use a path without them"
        )

    def _srun(self, names: Sequence[str], devices: DeviceAccess | None, mounts: bool = True) -> list[Arg]:
        args: list[Arg] = [self.srun, "--overlap", "--ntasks=1", "--nodes=1"]
        args.append(f"--container-image={self.image}")
        entries = [f"{m}:{m}" for m in self.mounts] if mounts else []
        entries += list(device_mounts(devices)) if devices is not None else []
        optional_ib = devices is not None and devices.optional_rdma
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
        prefix = env_prefix(env)
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
        full: dict[str, Arg] = {**device_env(devices), **{k: v for k, v in env.items() if k not in inherit}}
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
        full: dict[str, Arg] = {**(device_env(devices) if devices else {}), **(env or {})}
        outer, inner = self._split(full)
        srun = self._srun(list(outer), devices, mounts=devices is not None)
        return [*env_prefix(outer), *srun, *self._inner(command, devices, inner)]

    def prelude(self, devices: DeviceAccess) -> list[str]:
        return device_prelude(devices, self.lock_memory)

    def image_prelude(self, images_dir: str, target: str, node_python: Sequence[str]) -> list[str]:
        """The squashfs's import record (``nodes.prepare``: the image id and lock digest of the docker image it
        was imported from, its size and sha256), checked for its size on this node."""
        record = [*node_python, "-m", squashfs.MODULE, "record", self.image, "--out", target]
        return [
            "# The squashfs the workers run and the lock its image carried (recorded when nodes.prepare imported it).",
            f"mkdir -p {shlex.quote(images_dir)}",
            f"if ! {quoted(record)}; then",
            f"  log 'squashfs {self.image} is missing or not the one imported (run invoke nodes.prepare)'",
            "  exit 2",
            "fi",
        ]
