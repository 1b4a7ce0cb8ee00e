"""A fingerprint of the machine a run used: what hardware, drivers and software produced the evidence.

Knows AMD (amd-smi, rocm-smi, the ROCm version file, the amdgpu module) as well as NVIDIA (nvidia-smi),
RDMA NICs through ibv_devinfo, the container image and a digest of the installed Python distributions.
Every probe is optional: a missing tool, a tool that fails, hangs or prints garbage is recorded under
``probes`` and the fingerprint is marked partial; collecting never raises.
The result is raw (host names included): sanitize it before it leaves the run.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_VERSION", "collect_fingerprint"]

SCHEMA_VERSION = 1
_TOOL_TIMEOUT_S = 15.0
_MAX_OUTPUT = 1 << 20  # a tool that floods its output gets truncated, not buffered without bound


class _Probes:
    """Records the outcome of every probe: "ok", "absent" or "error: ..."."""

    def __init__(self, env: Mapping[str, str], timeout_s: float) -> None:
        self.env = dict(env)
        self.timeout_s = timeout_s
        self.status: dict[str, str] = {}

    def run(self, name: str, argv: list[str]) -> str | None:
        """Run a tool found on the environment's PATH; its stdout, or None (with the reason recorded)."""
        exe = shutil.which(argv[0], path=self.env.get("PATH", ""))
        if exe is None:
            self.status[name] = "absent"
            return None
        try:
            done = subprocess.run(
                [exe, *argv[1:]],
                env=self.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.status[name] = f"error: timed out after {self.timeout_s:g} s"
            return None
        except OSError as exc:
            self.status[name] = f"error: {exc.strerror or exc}"
            return None
        out = done.stdout[:_MAX_OUTPUT].decode("utf-8", errors="replace")
        if done.returncode != 0:
            err = done.stderr[:200].decode("utf-8", errors="replace").strip()
            self.status[name] = f"error: exit {done.returncode}" + (f": {err}" if err else "")
            return None
        self.status[name] = "ok"
        return out

    def read(self, name: str, path: Path) -> str | None:
        try:
            text = path.read_text(encoding="utf-8", errors="replace").strip()
        except FileNotFoundError:
            self.status[name] = "absent"
            return None
        except OSError as exc:
            self.status[name] = f"error: {exc.strerror or exc}"
            return None
        self.status[name] = "ok"
        return text

    def parsed(self, name: str, value: Any) -> Any:
        """Mark a probe whose output could not be understood."""
        if value in (None, [], {}) and self.status.get(name) == "ok":
            self.status[name] = "error: output not understood"
        return value


def _find_keys(obj: Any, keys: frozenset[str]) -> Iterator[tuple[str, Any]]:
    """Every (key, value) under ``obj`` whose key is in ``keys``: amd-smi and rocm-smi nest differently by version."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in keys:
                yield key, value
            yield from _find_keys(value, keys)
    elif isinstance(obj, list):
        for item in obj:
            yield from _find_keys(item, keys)


def _json(text: str | None) -> Any:
    if not text:
        return None
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        return json.loads(text[start:])
    except json.JSONDecodeError:
        return None


def _amd(probes: _Probes, rocm_path: Path) -> dict[str, Any]:
    amd: dict[str, Any] = {}
    version = probes.read("rocm_version_file", rocm_path / ".info" / "version")
    if version:
        amd["rocm_version"] = version.splitlines()[0]
    driver = probes.read("amdgpu_module", Path("/sys/module/amdgpu/version"))
    if driver:
        amd["amdgpu_driver"] = driver
    text = probes.run("amd-smi", ["amd-smi", "version"])
    if text:
        fields = dict(re.findall(r"([A-Za-z][\w ]*?(?:version|Tool)):\s*([^|\n]+)", text))
        info = {k.strip(): v.strip() for k, v in fields.items()}
        probes.parsed("amd-smi", info)
        amd["amd_smi"] = info
        if "ROCm version" in info and "rocm_version" not in amd:
            amd["rocm_version"] = info["ROCm version"]
        static = _json(probes.run("amd-smi static", ["amd-smi", "static", "--asic", "--json"]))
        names = [str(v) for _, v in _find_keys(static, frozenset({"market_name"}))]
        if probes.parsed("amd-smi static", names):
            amd["gpus"] = names
            gfx = sorted({str(v) for _, v in _find_keys(static, frozenset({"target_graphics_version"}))})
            if gfx:
                amd["gfx"] = gfx
    if "gpus" not in amd:
        shown = _json(probes.run("rocm-smi", ["rocm-smi", "--showproductname", "--json"]))
        names = [str(v) for _, v in _find_keys(shown, frozenset({"Card Series", "Card series"}))]
        if probes.parsed("rocm-smi", names):
            amd["gpus"] = names
            gfx = sorted({str(v) for _, v in _find_keys(shown, frozenset({"GFX Version"}))})
            if gfx:
                amd["gfx"] = gfx
    # The ROCm runtime's own view (HSA agents), a probe independent of the management tools above: the GPU
    # agents' marketing names and gfx targets. The evidence labels a platform only where the probes agree.
    runtime = _rocminfo_gpus(probes.run("rocminfo", ["rocminfo"]))
    if probes.parsed("rocminfo", runtime):
        amd["runtime"] = {
            "marketing_names": [agent.get("Marketing Name", "") for agent in runtime],
            "gfx": sorted({agent.get("Name", "") for agent in runtime}),
        }
    return amd


def _rocminfo_gpus(text: str | None) -> list[dict[str, str]]:
    """The GPU agents of ``rocminfo``'s output, each as its ``Name`` (the gfx target) and ``Marketing Name``."""
    agents: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for line in (text or "").splitlines():
        stripped = line.strip()
        if re.fullmatch(r"Agent \d+", stripped):
            current = {}
            agents.append(current)
            continue
        key, sep, value = stripped.partition(":")
        if current is not None and sep and key in ("Name", "Marketing Name", "Device Type"):
            current.setdefault(key, value.strip())
    return [a for a in agents if a.get("Device Type") == "GPU" and a.get("Name", "").startswith("gfx")]


def _nvidia(probes: _Probes) -> dict[str, Any]:
    nvidia: dict[str, Any] = {}
    text = probes.run(
        "nvidia-smi",
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"],
    )
    if text is None:
        return nvidia
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0]:
            gpus.append({"name": parts[0], "driver": parts[1], "memory_mib": parts[2]})
    if probes.parsed("nvidia-smi", gpus):
        nvidia["gpus"] = gpus
        nvidia["driver"] = gpus[0]["driver"]
    banner = probes.run("nvidia-smi banner", ["nvidia-smi"])
    found = re.search(r"CUDA Version:\s*([\d.]+)", banner or "")
    if found:
        nvidia["cuda_version"] = found.group(1)
    return nvidia


def _nics(probes: _Probes) -> list[dict[str, Any]]:
    """RDMA devices from ``ibv_devinfo``: name, firmware, board, ports. GUIDs are left out: they identify hardware."""
    text = probes.run("ibv_devinfo", ["ibv_devinfo"])
    if text is None:
        return []
    nics: list[dict[str, Any]] = []
    port: dict[str, str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "hca_id":
            nics.append({"device": value, "ports": []})
            port = None
        elif not nics:
            continue
        elif key in {"transport", "fw_ver", "board_id", "vendor_id", "vendor_part_id", "hw_ver"}:
            nics[-1][key] = value
        elif key == "port":
            port = {"port": value}
            nics[-1]["ports"].append(port)
        elif port is not None and key in {
            "state",
            "link_layer",
            "active_mtu",
            "active_speed",
            "active_width",
        }:
            port[key] = value
    if "No IB devices found" not in text:
        probes.parsed("ibv_devinfo", nics)
    return nics


def _container(env: Mapping[str, str]) -> dict[str, Any]:
    container: dict[str, Any] = {"in_container": Path("/.dockerenv").exists() or "container" in env}
    image = env.get("ATOMDYN_IMAGE")
    if image:
        container["image"] = image
    image_id = env.get("ATOMDYN_IMAGE_ID")
    if image_id:
        container["image_id"] = image_id
    return container


def _python() -> dict[str, Any]:
    """The interpreter and a digest of its installed distributions (what ``pip freeze`` would list)."""
    lines = sorted(
        {
            f"{(dist.metadata['Name'] or '?').lower().replace('_', '-')}=={dist.version}"
            for dist in importlib.metadata.distributions()
        }
    )
    return {
        "version": platform.python_version(),
        "implementation": sys.implementation.name,
        "distributions": len(lines),
        "freeze_sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest(),
    }


def _os_release() -> str | None:
    try:
        text = Path("/etc/os-release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
    return found.group(1) if found else None


def _cpu() -> dict[str, Any]:
    cpu: dict[str, Any] = {"machine": platform.machine(), "count": os.cpu_count()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu["model"] = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            kib = int(handle.readline().split()[1])
        cpu["memory_gib"] = round(kib / (1 << 20), 1)
    except (OSError, ValueError, IndexError):
        pass
    return cpu


def collect_fingerprint(
    env: Mapping[str, str] | None = None, rocm_path: Path | None = None, timeout_s: float = _TOOL_TIMEOUT_S
) -> dict[str, Any]:
    """Fingerprint this machine. Never raises because a tool is missing or misbehaves.

    ``env`` is the environment the probes run with (its ``PATH`` decides which tools are found);
    ``rocm_path`` defaults to ``$ROCM_PATH`` or ``/opt/rocm``.
    """
    env = dict(os.environ if env is None else env)
    probes = _Probes(env, timeout_s)
    rocm = rocm_path or Path(env.get("ROCM_PATH", "/opt/rocm"))
    fingerprint: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "hostname": socket.gethostname(),
        "os": _os_release(),
        "kernel": platform.release(),
        "cpu": _cpu(),
        "python": _python(),
        "container": _container(env),
    }
    amd = _amd(probes, rocm)
    nvidia = _nvidia(probes)
    nics = _nics(probes)
    fingerprint["amd"] = amd or None
    fingerprint["nvidia"] = nvidia or None
    fingerprint["rdma"] = nics
    if amd.get("gpus"):
        fingerprint["accelerator"] = "amd"
    elif nvidia.get("gpus"):
        fingerprint["accelerator"] = "nvidia"
    else:
        fingerprint["accelerator"] = None
    fingerprint["probes"] = dict(sorted(probes.status.items()))
    fingerprint["partial"] = any(status != "ok" for status in probes.status.values())
    return fingerprint


def main() -> int:
    """Print this machine's fingerprint as JSON (``python -m atomdyn_core.fingerprint``)."""
    print(json.dumps(collect_fingerprint(), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
