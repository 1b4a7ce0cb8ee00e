"""What a worker's devices are, in no runtime's syntax: the GPU vendor, the one variable that selects its GPUs, the
RDMA devices and verbs provider libraries, the engine's own container settings. An engine declares them; each
runtime (``docker``, ``podman``, ``pyxis``) turns them into its own options and job lines, the venv runtime
into none.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


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

    @property
    def drivers(self) -> tuple[str, ...]:
        """``RDMAV_DRIVERS``'s entries: what libibverbs is told to load, one per provider library."""
        return tuple(name for lib in self.providers if (name := self.driver_name(lib)) is not None)


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

    @property
    def optional_rdma(self) -> bool:
        """/dev/infiniband passed only when the node has it (NVLink-only hosts have none): decided by the job."""
        return not self.rdma_required and self.vendor != "none" and self.rdma_optional

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


def kernel_config_prelude(empty: str, mount: str) -> list[str]:
    """Job lines that find the node's kernel configuration and mount it read-only where UCX reads it in the
    container, ``/boot/config-<release>``: UCX decides ROCm dma-buf support from that file alone
    (``uct_rocm_base_is_dmabuf_supported``: CONFIG_DMABUF_MOVE_NOTIFY=y and CONFIG_PCI_P2PDMA=y), and no
    runtime mounts /boot. ``empty`` and ``mount``: the runtime's assignments of its mount variable, without and
    with the file (``$KERNEL_CONFIG_SRC`` the node's, ``$KERNEL_CONFIG`` where it goes). A node without the file
    gets no mount, and the job says what UCX will then decide."""
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
