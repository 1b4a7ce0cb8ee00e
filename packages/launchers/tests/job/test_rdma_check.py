"""The in-container RDMA check, read from `ibv_devinfo -v` text in rdma-core's format (tests/fixtures/ibv_devinfo:
written from the documented format; no RDMA device exists here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from atomdyn_launchers.job.rdma import RdmaDevice, check_devices, parse_devinfo

FIXTURES = Path(__file__).parents[1] / "fixtures" / "ibv_devinfo"


def _devices(name: str) -> list[RdmaDevice]:
    return parse_devinfo((FIXTURES / name).read_text())


def test_devices_ports_gids_and_max_srq_are_read() -> None:
    (ionic,) = _devices("ionic.txt")
    assert ionic.name == "ionic_0" and ionic.max_srq == 0 and ionic.fields["vendor_id"] == "0x1dd8"
    (port,) = ionic.ports
    assert (port.port, port.state, port.link_layer) == (1, "PORT_ACTIVE (4)", "Ethernet")
    assert [(g.index, g.gid, g.kind) for g in port.gids] == [
        (0, "fe80::690:81ff:fe30:2a48", "RoCE v2"),
        (1, "::ffff:10.10.1.11", "RoCE v2"),
    ]
    mlx0, mlx1 = _devices("mlx5.txt")
    assert mlx0.max_srq == 8388608 and len(mlx0.ports[0].gids) == 4 and mlx0.ports[0].usable
    assert not mlx1.ports[0].usable
    assert _devices("none.txt") == []


def test_a_nic_without_srq_fails_rc_verbs_naming_max_srq() -> None:
    problems = check_devices(_devices("ionic.txt"), ["ionic_0:1"], need_srq=True)
    assert len(problems) == 1
    assert problems[0].startswith("ionic_0 reports max_srq 0: UCX's rc_verbs transport needs shared receive")
    # Without rc_verbs the same NIC is fine.
    assert check_devices(_devices("ionic.txt"), ["ionic_0:1"], need_srq=False) == []


def test_named_devices_must_exist_and_be_active() -> None:
    devices = _devices("mlx5.txt")
    assert check_devices(devices, ["mlx5_0:1"], need_srq=True) == []
    assert check_devices(devices, ["mlx5_1:1"])[0].startswith("mlx5_1:1 is not usable: state PORT_DOWN (1)")
    assert check_devices(devices, ["mlx5_7:1"])[0] == (
        "UCX_NET_DEVICES names mlx5_7:1, but no RDMA device mlx5_7 is visible here"
    )
    assert check_devices(devices, ["mlx5_0:2"]) == ["mlx5_0 has no port 2"]


def test_no_visible_device_names_the_provider_mounts() -> None:
    (problem,) = check_devices(_devices("none.txt"), ["ionic_0:1"], need_srq=True)
    assert "no RDMA device is visible" in problem and "/etc/libibverbs.d" in problem


def test_command_writes_the_report_and_fails_the_role(tmp_path: Path) -> None:
    out = tmp_path / "prefill.json"
    argv = [sys.executable, "-m", "atomdyn_launchers.job.rdma", str(FIXTURES / "ionic.txt")]
    done = subprocess.run(
        [*argv, "--json", str(out), "--need-srq", "--net-devices", "ionic_0:1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "max_srq 0" in done.stderr
    report = json.loads(out.read_text())
    assert report["ok"] is False and report["devices"][0]["max_srq"] == 0
    assert report["devices"][0]["ports"][0]["gids"][1]["gid"] == "::ffff:10.10.1.11"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "atomdyn_launchers.job.rdma",
            str(FIXTURES / "mlx5.txt"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and json.loads(out.read_text())["ok"] is True


def test_the_configured_gid_index_must_name_an_ipv4_roce_v2_gid_on_the_port() -> None:
    # ionic puts its IPv4 RoCE v2 GID at index 1 (the default); mlx5 here at index 3, with RoCE v1 and a
    # link-local RoCE v2 GID before it: index 1 there would not route between the nodes.
    assert check_devices(_devices("ionic.txt"), ["ionic_0:1"], gid_index="1") == []
    assert check_devices(_devices("ionic.txt"), ["ionic_0:1"], gid_index="0") == [
        "ionic_0:1 GID[0] is fe80::690:81ff:fe30:2a48 (RoCE v2), not an IPv4 RoCE v2 GID (UCX_IB_GID_INDEX=0); "
        "IPv4 RoCE v2 GIDs at: 1"
    ]
    assert check_devices(_devices("mlx5.txt"), ["mlx5_0:1"], gid_index="1") == [
        "mlx5_0:1 GID[1] is fe80::ba3f:d2ff:fe47:11c2 (RoCE v2), not an IPv4 RoCE v2 GID (UCX_IB_GID_INDEX=1); "
        "IPv4 RoCE v2 GIDs at: 3"
    ]
    assert check_devices(_devices("mlx5.txt"), ["mlx5_0:1"], gid_index="3") == []
    assert check_devices(_devices("ionic.txt"), ["ionic_0:1"], gid_index="7") == [
        "ionic_0:1 has no GID[7] (UCX_IB_GID_INDEX=7); IPv4 RoCE v2 GIDs at: 1"
    ]
    # auto: UCX picks; nothing to refuse, the report says which indexes it could pick.
    assert check_devices(_devices("mlx5.txt"), ["mlx5_0:1"], gid_index="auto") == []
    # Without UCX_NET_DEVICES, UCX may use any active port: the index must be right on one of them.
    assert check_devices(_devices("mlx5.txt"), None, gid_index="3") == []
    assert len(check_devices(_devices("mlx5.txt"), None, gid_index="1")) == 1  # mlx5_1 is down: one named


def test_the_report_records_the_gid_index_and_the_candidates(tmp_path: Path) -> None:
    out = tmp_path / "decode.json"
    done = subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.job.rdma", str(FIXTURES / "mlx5.txt"), "--json", str(out),
         "--net-devices", "mlx5_0:1", "--gid-index", "1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and "not an IPv4 RoCE v2 GID (UCX_IB_GID_INDEX=1)" in done.stderr
    report = json.loads(out.read_text())
    assert report["gid_index"] == "1" and report["devices"][0]["ports"][0]["ipv4_gid_indexes"] == [3]
