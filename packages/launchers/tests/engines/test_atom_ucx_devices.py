"""The atom engine's UCX devices: tcp:aux must keep a device after UCX_NET_DEVICES filtering (issue 34, defect 1).

At UCX b56982d8 tcp's devices are netdevs (device type NET, src/uct/tcp/tcp_iface.c) and UCX_NET_DEVICES filters
every NET device (src/ucp/core/ucp_context.c, ucp_is_resource_in_device_list): with the RDMA device alone in the
list, tcp has no resource and RC endpoints made from a worker address find no auxiliary transport. The job reads
the netdev under the RDMA port's GID from sysfs and adds it; here a fake sysfs names a netdev of this machine, and
the real ``ucx_info`` (Debian's ucx-utils) shows tcp keeps a device with what the job computed, and none without.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import ClusterConfigError, parse_cluster_env
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines import EngineError, get_engine
from atomdyn_launchers.engines import atom as atom_engine
from atomdyn_launchers.engines.base import RoleContext, RolePlan
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.runtimes import DockerRuntime, VenvRuntime
from atomdyn_launchers.sbatch import render_arg

IN_CI = os.environ.get("CI") == "true"
IPV4_GID = "0000:0000:0000:0000:0000:ffff:0a01:0005"  # 10.1.0.5, as sysfs prints an IPv4 RoCE v2 GID
LINK_LOCAL_GID = "fe80:0000:0000:0000:0a00:0000:0000:0005"


def _ctx(mode: str = "decode", **changes: object) -> RoleContext:
    ctx = RoleContext(
        run_id="20260101T000000Z-disagg-atom",
        role=mode,
        mode=mode,
        with_frontend=False,
        index=0,
        model=get_model("qwen3-8b-bf16"),
        model_path="/shared/models/qwen3-8b",
        etcd_endpoint="http://10.1.2.3:2379",
        namespace="atomdyn-test",
        home_dir="/shared/runs/r/home/x",
        ports=Ports.for_role(0),
        runtime=VenvRuntime(Path("/opt/venv")),
        run_dir="/shared/runs/r",
        node_python=("/opt/venv/bin/python",),
        ucx_net_devices="ionic_0:1",
    )
    return replace(ctx, **changes)  # type: ignore[arg-type]


def _port(root: Path, device: str, port: int, gids: dict[int, tuple[str, str, str]]) -> None:
    """A fake sysfs RDMA port: GID index -> (type, gid, netdev), as /sys/class/infiniband lays them out."""
    base = root / device / "ports" / str(port)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    for index, (kind, gid, netdev) in gids.items():
        (base / "gids" / str(index)).write_text(gid + "\n")
        (base / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
        (base / "gid_attrs" / "ndevs" / str(index)).write_text(netdev + "\n")


def _worker_env(plan: RolePlan) -> dict[str, str]:
    return {k: render_arg(v) for k, v in plan.processes[0].env.items() if k.startswith("UCX_")}


def _expanded_net_devices(plan: RolePlan, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The lines of the job that compute what UCX_NET_DEVICES reads (from the tcp:aux comment to the line
    that logs the result; none when the plan has none), run in bash, then the worker's UCX_NET_DEVICES as the
    job expands it."""
    lines = list(plan.prelude)
    start = next((i for i, line in enumerate(lines) if line.startswith("# tcp:aux")), None)
    block: list[str] = []
    if start is not None:
        end = next(i for i, line in enumerate(lines) if i > start and line.startswith('log "tcp:aux on'))
        block = lines[start : end + 1]
    value = plan.processes[0].env["UCX_NET_DEVICES"]
    script = tmp_path / "devices.sh"
    script.write_text("\n".join(['log() { echo "$*" >&2; }', *block, f"printf '%s' {render_arg(value)}", ""]))
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False)


def _local_netdev() -> str:
    """A netdev of this machine with an IPv4 address: the default route's, else any but loopback, else lo."""
    route = subprocess.run(
        ["ip", "-4", "route", "show", "default"], capture_output=True, text=True, check=False
    )
    found = re.search(r"\bdev (\S+)", route.stdout)
    if found:
        return found.group(1)
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False
    ).stdout
    names = [line.split()[1] for line in out.splitlines() if len(line.split()) > 1]
    return next((n for n in names if n != "lo"), "lo")


def test_tcp_aux_gets_the_netdev_under_the_rdma_ports_gid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _port(
        tmp_path, "ionic_0", 1, {0: ("IB/RoCE v1", LINK_LOCAL_GID, "ens1"), 1: ("RoCE v2", IPV4_GID, "ens1")}
    )
    monkeypatch.setattr(atom_engine, "SYSFS_IB", str(tmp_path), raising=False)
    plan = get_engine("atom").plan(_ctx())
    env = _worker_env(plan)
    assert env["UCX_TLS"] == "rc_verbs,self,tcp:aux"
    done = _expanded_net_devices(plan, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ionic_0:1,ens1"
    assert "tcp:aux on ens1, the netdev under ionic_0:1" in done.stderr
    # The checks before the engine (the RDMA check, NIXL's doctor) run with the same UCX_NET_DEVICES: the lines
    # that compute it come first.
    first_check = next(i for i, line in enumerate(plan.prelude) if "atomdyn_launchers.job.rdma" in line)
    assert plan.prelude.index("UCX_AUX_NETDEV=''") < first_check
    # Two RDMA devices on one netdev (a bond, say): the netdev once.
    _port(tmp_path, "ionic_1", 1, {1: ("RoCE v2", IPV4_GID, "ens1")})
    both = get_engine("atom").plan(_ctx(ucx_net_devices="ionic_0:1,ionic_1:1"))
    assert _expanded_net_devices(both, tmp_path).stdout == "ionic_0:1,ionic_1:1,ens1"


def test_gid_auto_takes_the_first_ipv4_roce_v2_gids_netdev(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gids = {
        0: ("IB/RoCE v1", LINK_LOCAL_GID, "ens1"),
        1: ("RoCE v2", LINK_LOCAL_GID, "ens1"),
        2: ("IB/RoCE v1", IPV4_GID, "ens1.100"),
        3: ("RoCE v2", IPV4_GID, "ens1.100"),
    }
    _port(tmp_path, "ionic_0", 1, gids)
    monkeypatch.setattr(atom_engine, "SYSFS_IB", str(tmp_path))
    plan = get_engine("atom").plan(_ctx(ucx_gid_index="auto"))
    assert "UCX_IB_GID_INDEX" not in _worker_env(plan)
    assert _expanded_net_devices(plan, tmp_path).stdout == "ionic_0:1,ens1.100"


def test_a_port_without_that_gid_fails_the_role_naming_the_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _port(tmp_path, "ionic_0", 1, {0: ("IB/RoCE v1", LINK_LOCAL_GID, "ens1")})
    monkeypatch.setattr(atom_engine, "SYSFS_IB", str(tmp_path))
    done = _expanded_net_devices(get_engine("atom").plan(_ctx()), tmp_path)
    assert done.returncode == 3
    assert f"no netdev under GID 1 of {tmp_path}/ionic_0/ports/1 for tcp:aux" in done.stderr
    assert "UCX_IB_GID_INDEX" in done.stderr and "ATOM_UCX_AUX_NETDEV" in done.stderr
    auto = _expanded_net_devices(get_engine("atom").plan(_ctx(ucx_gid_index="auto")), tmp_path)
    assert auto.returncode == 3 and "GID auto (the first IPv4 RoCE v2 GID)" in auto.stderr


def test_a_named_aux_netdev_is_added_as_it_is(tmp_path: Path) -> None:
    atom = get_engine("atom")
    plan = atom.plan(_ctx(ucx_aux_netdev="eth0"))
    assert _worker_env(plan)["UCX_NET_DEVICES"] == "ionic_0:1,eth0"
    assert not any(line.startswith("# tcp:aux") for line in plan.prelude)
    listed = atom.plan(_ctx(ucx_net_devices="ionic_0:1,eth0", ucx_aux_netdev="eth0"))
    assert _worker_env(listed)["UCX_NET_DEVICES"] == "ionic_0:1,eth0"
    # ud wireup (rc_v: rc_verbs plus ud_verbs:aux on the RDMA device itself): nothing is added.
    ud = atom.plan(_ctx(ucx_wireup="ud"))
    assert _worker_env(ud)["UCX_NET_DEVICES"] == "ionic_0:1"
    assert not any(line.startswith("# tcp:aux") for line in ud.prelude)
    # An aggregated worker moves no KV: no UCX settings at all.
    assert "UCX_NET_DEVICES" not in atom.plan(_ctx("agg")).processes[0].env
    with pytest.raises(EngineError, match="names no RDMA device with its port"):
        atom.plan(_ctx(ucx_net_devices="ionic_0"))


def test_the_container_gets_the_expanded_devices(tmp_path: Path) -> None:
    runtime = DockerRuntime("img:1", "atomdyn-r", ["/shared"])
    plan = get_engine("atom").plan(_ctx(runtime=runtime))
    argv = [render_arg(a) for a in plan.processes[0].argv]
    assert 'UCX_NET_DEVICES=ionic_0:1,"$UCX_AUX_NETDEV"' in argv


def test_the_cluster_key() -> None:
    base = (
        "SLURM_ACCOUNT=a\nSLURM_PARTITION=p\nSLURM_QOS=q\nPRIMARY_NODE=n1\nPREFILL_NODE=n1\nDECODE_NODE=n2\n"
        "SHARED_DIR=/s\nMODEL_PATH=/m\nENGINE_PROFILE=atom\nRUNTIME=venv\n"
    )
    assert parse_cluster_env(base, "t.env").atom_ucx_aux_netdev == "roce"
    assert parse_cluster_env(base + "ATOM_UCX_AUX_NETDEV=eno1\n", "t.env").atom_ucx_aux_netdev == "eno1"
    with pytest.raises(ClusterConfigError, match="ATOM_UCX_AUX_NETDEV"):
        parse_cluster_env(base + "ATOM_UCX_AUX_NETDEV=ionic_0:1\n", "t.env")


UCX_INFO = shutil.which("ucx_info")


@pytest.mark.skipif(UCX_INFO is None and not IN_CI, reason="ucx_info (Debian's ucx-utils) is not installed")
def test_real_ucx_keeps_tcp_a_device_with_the_jobs_net_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UCX's own context and endpoint (``ucx_info -e -u t -P inter``) with UCX_TLS=tcp and the UCX_NET_DEVICES the
    job computes: tcp has a device. The RDMA device does not exist here, which UCX only warns about; with it
    alone (what the jobs set before) UCX finds no tcp device and no context is made."""
    assert UCX_INFO is not None, "ucx_info is missing: CI installs ucx-utils (requirements/apt.txt)"
    netdev = _local_netdev()
    _port(tmp_path, "ionic_0", 1, {1: ("RoCE v2", IPV4_GID, netdev)})
    monkeypatch.setattr(atom_engine, "SYSFS_IB", str(tmp_path), raising=False)
    plan = get_engine("atom").plan(_ctx())
    devices = _expanded_net_devices(plan, tmp_path).stdout

    def ucx_info(net_devices: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "UCX_TLS": "tcp",
            "UCX_NET_DEVICES": net_devices,
        }
        return subprocess.run(
            [UCX_INFO, "-e", "-u", "t", "-P", "inter"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = ucx_info(devices)
    assert done.returncode == 0, f"UCX_NET_DEVICES={devices}: {done.stdout}{done.stderr}"
    assert re.search(r"^#\s+tag_send", done.stdout, re.M), done.stdout
    # What the job set before (the RDMA device alone): UCX refuses, as on a node with the real device tcp:aux
    # had nothing to run on.
    alone = ucx_info("ionic_0:1")
    assert alone.returncode != 0 and "no usable transports/devices" in alone.stdout + alone.stderr
