"""What an upstream maintainer asks first: kernel, GPU runtime, NIC, driver, firmware, links, environment."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

COMMAND_TIMEOUT_S = 30.0

# Variables that change how the GPU runtime, the RDMA stack or the transfer libraries behave.
ENV_PREFIXES = (
    "HSA_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "AMD_",
    "GPU_",
    "CUDA_",
    "NVIDIA_",
    "UCX_",
    "NCCL_",
    "RCCL_",
    "NIXL_",
    "MORI_",
    "IBV_",
    "RDMAV_",
    "MLX5_",
    "IONIC_",
    "DMABUF_SHIM_",
)
ENV_NAMES = ("LD_PRELOAD", "LD_LIBRARY_PATH")


@dataclass(frozen=True)
class CommandOutput:
    argv: tuple[str, ...]
    returncode: int | None  # None: the tool is not installed or did not finish
    output: str


def run_command(argv: Sequence[str], search_path: str | None = None) -> CommandOutput:
    exe = shutil.which(argv[0], path=search_path)
    if exe is None:
        return CommandOutput(tuple(argv), None, f"{argv[0]}: not installed")
    try:
        proc = subprocess.run(
            [exe, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CommandOutput(tuple(argv), None, f"{argv[0]}: no answer within {COMMAND_TIMEOUT_S:.0f} s")
    text = proc.stdout + (("\n" + proc.stderr) if proc.stderr.strip() else "")
    return CommandOutput(tuple(argv), proc.returncode, text.strip())


def relevant_environment(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k in ENV_NAMES or k.startswith(ENV_PREFIXES)}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def os_release(root: Path = Path("/")) -> str | None:
    text = _read(root / "etc/os-release")
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def rocm_version(env: Mapping[str, str]) -> str | None:
    root = Path(env.get("ROCM_PATH", "/opt/rocm"))
    return _read(root / ".info/version")


def rdma_sysfs(
    root: Path = Path("/sys/class/infiniband"), modules: Path = Path("/sys/module")
) -> list[dict[str, str | None]]:
    """Per RDMA device: kernel driver, its module version, and firmware, straight from sysfs."""
    devices: list[dict[str, str | None]] = []
    if not root.is_dir():
        return devices
    for dev in sorted(root.iterdir()):
        driver_link = dev / "device" / "driver"
        driver = os.path.basename(os.readlink(driver_link)) if driver_link.is_symlink() else None
        module_version = _read(modules / driver / "version") if driver else None
        devices.append(
            {
                "name": dev.name,
                "driver": driver,
                "driver_version": module_version,
                "fw_ver": _read(dev / "fw_ver"),
                "node_type": _read(dev / "node_type"),
            }
        )
    return devices


def collect(env: Mapping[str, str], rdma_device: str | None) -> dict[str, object]:
    uname = platform.uname()
    devinfo_argv = ["ibv_devinfo"] + (["-d", rdma_device] if rdma_device else [])
    commands = [
        devinfo_argv,
        ["rdma", "link", "show"],
        ["rdma", "dev", "show"],
        ["nvidia-smi", "--query-gpu=name,driver_version,vbios_version", "--format=csv,noheader"],
        ["amd-smi", "version"],
    ]
    return {
        "kernel": f"{uname.system} {uname.release} {uname.version} {uname.machine}",
        "os": os_release(),
        "python": platform.python_version(),
        "rocm_version": rocm_version(env),
        "rdma_devices": rdma_sysfs(),
        "commands": [
            {"argv": list(c.argv), "returncode": c.returncode, "output": c.output}
            for c in (run_command(argv, env.get("PATH")) for argv in commands)
        ],
        "environment": relevant_environment(env),
    }
