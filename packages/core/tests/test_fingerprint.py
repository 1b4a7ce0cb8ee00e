"""The fingerprint against this machine (no GPU tools) and against stand-in tools on PATH.

The stand-ins print what the real tools print: the nvidia-smi texts were captured on an H200 (driver 580);
amd-smi, rocm-smi and ibv_devinfo follow the formats of ROCm 6.x/7.x and rdma-core.
"""

from __future__ import annotations

import json
import os
import stat
import textwrap
from pathlib import Path

import pytest

from atomdyn_core.fingerprint import SCHEMA_VERSION, collect_fingerprint

NVIDIA_QUERY = "NVIDIA H200, 580.159.04, 143771\n"
NVIDIA_BANNER = """\
Mon Nov 30 00:38:17 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
|   0  NVIDIA H200                    On  |   00000000:00:06.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""
AMD_SMI_VERSION = (
    "AMDSMI Tool: 25.5.1+41065ee | AMDSMI Library version: 25.5.1 | ROCm version: 7.0.1 | "
    "amdgpu version: 6.14.14 | amd_hsmp version: N/A\n"
)
AMD_SMI_STATIC = json.dumps(
    {
        "gpu_data": [
            {
                "gpu": i,
                "asic": {"market_name": "AMD Instinct MI355X", "vendor_id": "0x1002", "device_id": "0x75a3"},
            }
            for i in range(2)
        ]
    }
)
ROCM_SMI = json.dumps(
    {
        "card0": {
            "Card Series": "AMD Instinct MI300X OAM",
            "Card Model": "0x74a1",
            "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
            "Card SKU": "M3000100",
            "GFX Version": "gfx942",
        }
    }
)
IBV_DEVINFO = """\
hca_id:\tionic_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t1.117.1-a-63
\tnode_guid:\t\t\t0690:81ff:fe3f:7e10
\tsys_image_guid:\t\t\t0690:81ff:fe3f:7e10
\tvendor_id:\t\t\t0x1dd8
\tvendor_part_id:\t\t\t4098
\thw_ver:\t\t\t\t0x0
\tboard_id:\t\t\tPOLLARA-1Q400P
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t4096 (5)
\t\t\tsm_lid:\t\t\t0
\t\t\tlink_layer:\t\tEthernet

"""


def _tool(bindir: Path, name: str, script: str) -> None:
    path = bindir / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _printing(bindir: Path, name: str, cases: dict[str, str]) -> None:
    """A stand-in that prints the text recorded for its argument list (the first word of "$*")."""
    lines = ['case "$*" in']
    for args, text in cases.items():
        (bindir / f"{name}.{len(lines)}.out").write_text(text)
        lines.append(f'  "{args}") cat "{bindir}/{name}.{len(lines)}.out" ;;')
    lines += ['  *) echo "unexpected arguments: $*" >&2; exit 2 ;;', "esac"]
    _tool(bindir, name, "\n".join(lines) + "\n")


@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


def _env(bindir: Path) -> dict[str, str]:
    # Only the stand-ins (plus the shell utilities they use) are found.
    return {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(bindir)}


def test_this_machine_gives_a_partial_fingerprint_without_failing(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))  # no tools at all
    fp = collect_fingerprint(env=env, rocm_path=tmp_path / "no-rocm")
    assert fp["schema_version"] == SCHEMA_VERSION
    assert fp["partial"] is True
    assert fp["accelerator"] is None and fp["amd"] is None and fp["nvidia"] is None and fp["rdma"] == []
    for tool in ("amd-smi", "rocm-smi", "nvidia-smi", "ibv_devinfo", "rocm_version_file"):
        assert fp["probes"][tool] == "absent"
    assert fp["kernel"] == os.uname().release
    assert len(fp["python"]["freeze_sha256"]) == 64 and fp["python"]["distributions"] > 0
    json.dumps(fp)  # serialisable as is


def test_amd_node_with_amd_smi_and_ionic_nic(bindir: Path, tmp_path: Path) -> None:
    _printing(bindir, "amd-smi", {"version": AMD_SMI_VERSION, "static --asic --json": AMD_SMI_STATIC})
    _printing(bindir, "ibv_devinfo", {"": IBV_DEVINFO})
    rocm = tmp_path / "rocm"
    (rocm / ".info").mkdir(parents=True)
    (rocm / ".info" / "version").write_text("7.0.1-42\n")
    env = dict(
        _env(bindir), ATOMDYN_IMAGE="atomdyn/atom-dynamo:0.1.0", ATOMDYN_IMAGE_ID="sha256:" + "ab" * 32
    )
    fp = collect_fingerprint(env=env, rocm_path=rocm)
    assert fp["accelerator"] == "amd"
    assert fp["amd"]["gpus"] == ["AMD Instinct MI355X", "AMD Instinct MI355X"]
    assert fp["amd"]["rocm_version"] == "7.0.1-42"  # the installed tree wins over the tool's claim
    assert fp["amd"]["amd_smi"]["AMDSMI Library version"] == "25.5.1"
    assert fp["amd"]["amd_smi"]["ROCm version"] == "7.0.1"
    assert fp["rdma"] == [
        {
            "device": "ionic_0",
            "transport": "InfiniBand (0)",
            "fw_ver": "1.117.1-a-63",
            "vendor_id": "0x1dd8",
            "vendor_part_id": "4098",
            "hw_ver": "0x0",
            "board_id": "POLLARA-1Q400P",
            "ports": [
                {"port": "1", "state": "PORT_ACTIVE (4)", "active_mtu": "4096 (5)", "link_layer": "Ethernet"}
            ],
        }
    ]
    assert "0690:81ff" not in json.dumps(fp)  # GUIDs identify hardware: left out
    assert fp["container"]["image"] == "atomdyn/atom-dynamo:0.1.0"
    assert fp["container"]["image_id"] == "sha256:" + "ab" * 32
    assert fp["probes"]["amd-smi"] == "ok" and fp["probes"]["ibv_devinfo"] == "ok"
    assert fp["probes"]["nvidia-smi"] == "absent" and fp["partial"] is True


def test_older_rocm_with_rocm_smi_only(bindir: Path, tmp_path: Path) -> None:
    _printing(bindir, "rocm-smi", {"--showproductname --json": ROCM_SMI})
    fp = collect_fingerprint(env=_env(bindir), rocm_path=tmp_path)
    assert fp["accelerator"] == "amd"
    assert fp["amd"]["gpus"] == ["AMD Instinct MI300X OAM"]
    assert fp["amd"]["gfx"] == ["gfx942"]
    assert fp["probes"]["amd-smi"] == "absent"


def test_nvidia_node_from_captured_h200_output(bindir: Path, tmp_path: Path) -> None:
    _printing(
        bindir,
        "nvidia-smi",
        {
            "--query-gpu=name,driver_version,memory.total --format=csv,noheader,nounits": NVIDIA_QUERY,
            "": NVIDIA_BANNER,
        },
    )
    fp = collect_fingerprint(env=_env(bindir), rocm_path=tmp_path)
    assert fp["accelerator"] == "nvidia"
    assert fp["nvidia"] == {
        "gpus": [{"name": "NVIDIA H200", "driver": "580.159.04", "memory_mib": "143771"}],
        "driver": "580.159.04",
        "cuda_version": "13.0",
    }
    assert fp["amd"] is None


def test_misbehaving_tools_are_recorded_not_raised(bindir: Path, tmp_path: Path) -> None:
    _tool(bindir, "amd-smi", "echo 'amdsmi: driver not loaded' >&2\nexit 1\n")
    _tool(bindir, "rocm-smi", "printf '\\377\\376garbage{not json'\n")
    _tool(bindir, "nvidia-smi", "exec tail -f /dev/null\n")  # hangs like a wedged driver
    _tool(bindir, "ibv_devinfo", "echo 'No IB devices found'\n")
    fp = collect_fingerprint(env=_env(bindir), rocm_path=tmp_path, timeout_s=1.0)
    assert fp["probes"]["amd-smi"] == "error: exit 1: amdsmi: driver not loaded"
    assert fp["probes"]["rocm-smi"] == "error: output not understood"
    assert fp["probes"]["nvidia-smi"] == "error: timed out after 1 s"
    assert fp["probes"]["ibv_devinfo"] == "ok" and fp["rdma"] == []
    assert fp["accelerator"] is None and fp["partial"] is True


def test_tool_that_is_not_executable_is_recorded(bindir: Path, tmp_path: Path) -> None:
    _tool(bindir, "nvidia-smi", "")
    (bindir / "nvidia-smi").write_bytes(b"\x7fELF garbage")  # executable bit, but not a program
    fp = collect_fingerprint(env=_env(bindir), rocm_path=tmp_path)
    assert fp["probes"]["nvidia-smi"].startswith("error: ")
    assert fp["nvidia"] is None


ROCMINFO = """\
ROCk module version 6.12.12 is loaded
=====================
HSA Agents
==========
*******
Agent 1
*******
  Name:                    AMD EPYC 9575F 64-Core Processor
  Marketing Name:          AMD EPYC 9575F 64-Core Processor
  Device Type:             CPU
*******
Agent 2
*******
  Name:                    gfx950
  Uuid:                    GPU-0123456789abcdef
  Marketing Name:          AMD Instinct MI355X
  Vendor Name:             AMD
  Device Type:             GPU
  ISA Info:
    ISA 1
      Name:                    amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-
*******
Agent 3
*******
  Name:                    gfx950
  Marketing Name:          AMD Instinct MI355X
  Device Type:             GPU
"""


def test_the_rocm_runtime_is_a_probe_of_its_own(bindir: Path, tmp_path: Path) -> None:
    """rocminfo's GPU agents (issue 36, item 2): the evidence needs them to agree with amd-smi's names."""
    _printing(bindir, "amd-smi", {"version": AMD_SMI_VERSION, "static --asic --json": AMD_SMI_STATIC})
    _printing(bindir, "rocminfo", {"": ROCMINFO})
    fp = collect_fingerprint(env=_env(bindir), rocm_path=tmp_path)
    assert fp["amd"]["runtime"] == {"marketing_names": ["AMD Instinct MI355X"] * 2, "gfx": ["gfx950"]}
    assert fp["probes"]["rocminfo"] == "ok"


def test_rocminfo_without_a_gpu_agent_is_not_understood(bindir: Path, tmp_path: Path) -> None:
    _printing(bindir, "rocminfo", {"": ROCMINFO.split("Agent 2")[0]})
    fp = collect_fingerprint(env=_env(bindir), rocm_path=tmp_path)
    assert "runtime" not in (fp["amd"] or {}) and fp["probes"]["rocminfo"] == "error: output not understood"
