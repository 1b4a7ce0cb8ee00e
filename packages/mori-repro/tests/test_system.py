"""System facts for the bundle, from a sysfs-shaped tree the test lays out (no RDMA device exists here)."""

from __future__ import annotations

import os
from pathlib import Path

from mori_repro.report import render_markdown
from mori_repro.system import collect, rdma_sysfs, relevant_environment


def _fake_sysfs(tmp_path: Path) -> tuple[Path, Path]:
    classes = tmp_path / "class" / "infiniband"
    modules = tmp_path / "module"
    driver_dir = tmp_path / "bus" / "pci" / "drivers" / "ionic_rdma"
    driver_dir.mkdir(parents=True)
    (modules / "ionic_rdma").mkdir(parents=True)
    (modules / "ionic_rdma" / "version").write_text("25.06.4.003\n")
    for name, fw in (("ionic_0", "1.117.1-a-12\n"), ("ionic_1", "1.117.1-a-12\n")):
        dev = classes / name
        (dev / "device").mkdir(parents=True)
        (dev / "fw_ver").write_text(fw)
        (dev / "node_type").write_text("1: CA\n")
        os.symlink(driver_dir, dev / "device" / "driver")
    return classes, modules


def test_rdma_devices_report_driver_module_version_and_firmware(tmp_path: Path) -> None:
    classes, modules = _fake_sysfs(tmp_path)
    devices = rdma_sysfs(classes, modules)
    assert devices == [
        {
            "name": name,
            "driver": "ionic_rdma",
            "driver_version": "25.06.4.003",
            "fw_ver": "1.117.1-a-12",
            "node_type": "1: CA",
        }
        for name in ("ionic_0", "ionic_1")
    ]
    markdown = render_markdown({"verdict": "bug-reproduced", "exit_code": 10}, {"rdma_devices": devices})
    assert "- ionic_0: driver ionic_rdma 25.06.4.003, firmware 1.117.1-a-12" in markdown


def test_no_rdma_class_directory_means_no_devices(tmp_path: Path) -> None:
    assert rdma_sysfs(tmp_path / "absent", tmp_path) == []


def test_only_relevant_variables_are_kept() -> None:
    env = {"HSA_ENABLE_SDMA": "0", "UCX_TLS": "rc", "HOME": "/root", "LD_PRELOAD": "x.so", "MY_TOKEN": "s"}
    assert relevant_environment(env) == {"HSA_ENABLE_SDMA": "0", "LD_PRELOAD": "x.so", "UCX_TLS": "rc"}


def test_missing_tools_are_recorded_not_fatal() -> None:
    system = collect(dict(os.environ, PATH=os.fspath(Path("/nonexistent"))), None)
    commands = system["commands"]
    assert isinstance(commands, list)
    assert all(c["returncode"] is None and c["output"].endswith(": not installed") for c in commands)
