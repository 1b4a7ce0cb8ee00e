"""The cross-node probe's parts: the line rate read from sysfs, etcd as Dynamo's environment configures it,
the command line's refusals; and both sides for real, two processes exchanging metadata through a real etcd
on loopback, UCX on TCP (the launchers' tests run the pair as Slurm jobs on the local cluster's nodes)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nixl_compat.crossnode.etcd import Etcd, EtcdError
from nixl_compat.crossnode.linerate import device_rate_gbit, line_rate

PROBE = [sys.executable, "-m", "nixl_compat.crossnode"]
SHAPE = ["--layers", "2", "--kv-heads", "2", "--head-dim", "32", "--blocks", "8", "--transfer-blocks", "1,4"]


def _sysfs(root: Path) -> Path:
    port = root / "infiniband" / "ionic_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")  # what an RDMA port's rate file holds
    for name, speed in (("eth0", "100000\n"), ("veth1", "-1\n")):
        (root / "net" / name).mkdir(parents=True)
        (root / "net" / name / "speed").write_text(speed)
    return root


def test_line_rate_is_read_from_the_device(tmp_path: Path) -> None:
    sys_root = _sysfs(tmp_path)
    assert device_rate_gbit("ionic_0:1", sys_root) == 400.0
    assert device_rate_gbit("eth0", sys_root) == 100.0
    assert device_rate_gbit("veth1", sys_root) is None  # -1: the driver does not know
    assert device_rate_gbit("mlx5_9:1", sys_root) is None
    both = line_rate("ionic_0:1,eth0", None, sys_root)
    assert both["gbit"] == 500.0 and both["devices"] == ["ionic_0:1", "eth0"]
    assert line_rate("ionic_0:1,veth1", None, sys_root)["gbit"] is None  # one unknown: no sum is claimed


def test_a_netdev_listed_for_tcp_aux_adds_no_line_rate(tmp_path: Path) -> None:
    """The atom jobs add the netdev under the RoCE port to UCX_NET_DEVICES so that tcp:aux has a device (issue
    34, defect 1): it carries the wireup only, so it is no part of the KV's line rate (often the same NIC)."""
    sys_root = _sysfs(tmp_path)
    atom = line_rate("ionic_0:1,eth0", None, sys_root, tls="rc_verbs,self,tcp:aux")
    assert atom["gbit"] == 400.0 and atom["devices"] == ["ionic_0:1"] and atom["aux_devices"] == ["eth0"]
    # tcp as a data transport: the netdev counts.
    assert line_rate("ionic_0:1,eth0", None, sys_root, tls="rc_verbs,tcp")["gbit"] == 500.0
    assert line_rate("ionic_0:1,eth0", None, sys_root, tls="^cma")["gbit"] == 500.0
    # Only netdevs listed (the CPU rehearsal's tcp): they are the data devices whatever UCX_TLS says.
    assert line_rate("eth0", None, sys_root, tls="tcp:aux,self")["devices"] == ["eth0"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "ETCD_ENDPOINTS is not set"),
        ({"ETCD_ENDPOINTS": "etcd-host:2379"}, "is not an http:// or https:// URL"),
    ],
)
def test_etcd_configuration_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(EtcdError, match=message):
        Etcd.from_env(env)


def test_an_unreachable_etcd_is_named() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once it is closed
    etcd = Etcd.from_env({"ETCD_ENDPOINTS": f"http://127.0.0.1:{port}"})
    with pytest.raises(EtcdError, match=f"127.0.0.1:{port}"):
        etcd.get("k")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transfer-blocks", "1,99"], "must lie in 1..8"),
        (["--timeout", "-1"], "not a positive number of seconds"),
        (["--dtype-bytes", "3"], "invalid choice"),
    ],
)
def test_bad_probe_arguments_are_usage_errors(args: list[str], message: str) -> None:
    done = subprocess.run(
        [*PROBE, "--role", "target", "--key-prefix", "p/", *SHAPE, *args], capture_output=True, text=True
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def etcd_endpoint(tmp_path: Path) -> Iterator[str]:
    exe = shutil.which("etcd")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("etcd is not installed (.ci/run installs etcd-server)")
        pytest.skip("etcd is not installed")
    client, peer = _free_port(), _free_port()
    url = f"http://127.0.0.1:{client}"
    server = subprocess.Popen(
        [exe, "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                Etcd.from_env({"ETCD_ENDPOINTS": url}).get("ready")
                break
            except EtcdError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)  # polling etcd's port until it answers, up to the deadline
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_both_sides_move_and_verify_kv_blocks_through_a_real_etcd(tmp_path: Path, etcd_endpoint: str) -> None:
    env = {
        **os.environ,
        "ETCD_ENDPOINTS": etcd_endpoint,
        "UCX_TLS": "tcp,self",
        "http_proxy": "http://nowhere:1",
    }
    common = [*SHAPE, "--key-prefix", "run/nixl/", "--iterations", "3", "--large-mib", "2", "--timeout", "30"]
    target = subprocess.Popen(
        [*PROBE, "--role", "target", *common, "--json", str(tmp_path / "target.json")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    initiator = subprocess.run(
        [*PROBE, "--role", "initiator", *common, "--json", str(tmp_path / "initiator.json")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out, _ = target.communicate(timeout=60)
    assert initiator.returncode == 0, initiator.stdout + initiator.stderr
    assert target.returncode == 0, out
    report = json.loads((tmp_path / "initiator.json").read_text())
    assert report["ok"] and report["verified"] and report["stage"] == "done"
    assert [(s["blocks"], s["bytes"], s["descriptors"]) for s in report["series"]] == [
        (1, 8192, 4),
        (4, 32768, 16),
    ]
    assert report["large"]["bytes"] == 2 << 20 and report["large"]["verified"]
    assert report["environment"]["UCX_TLS"] == "tcp,self"
    assert json.loads((tmp_path / "target.json").read_text())["ok"]


def test_an_initiator_without_a_target_fails_naming_what_it_waited_for(
    tmp_path: Path, etcd_endpoint: str
) -> None:
    env = {**os.environ, "ETCD_ENDPOINTS": etcd_endpoint}
    done = subprocess.run(
        [*PROBE, "--role", "initiator", *SHAPE, "--key-prefix", "none/", "--timeout", "1",
         "--json", str(tmp_path / "i.json")],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    report = json.loads((tmp_path / "i.json").read_text())
    assert report["stage"] == "metadata" and "no target's metadata in etcd (none/target)" in report["error"]
