"""The UCX check's judgement of ucx_info's output: captured from Debian's UCX 1.13 here, and written from the
pinned UCX's print statements where this machine has no RDMA NIC or ROCm (fixtures/ucx_info/README.md says
which file comes from where)."""

from __future__ import annotations

from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import load_cluster_config
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.job import node_check, ucx_check, ucx_info
from atomdyn_launchers.nodes.check import worker_ucx
from atomdyn_launchers.runtimes import get_runtime

EXAMPLE = Path(__file__).parents[4] / "config" / "cluster.env.example"
FIXTURES = Path(__file__).parent / "fixtures" / "ucx_info"
ROCE = {"ionic_0:1": [1]}  # the port's RoCE v2 GIDs, as sysfs lists them on an MI355X node


def _verdict(
    name: str, env: dict[str, str] | None = None, roce: dict[str, list[int]] | None = None
) -> ucx_check.UcxVerdict:
    return ucx_check.judge_output((FIXTURES / name).read_text(), env or {}, roce)


def _variables(verdict: ucx_check.UcxVerdict) -> set[str]:
    return {p.variable for p in verdict.problems}


def test_tcp_with_its_devices_passes_and_reports_what_ucx_opened() -> None:
    verdict = _verdict("debian-1.13-tcp-ok.txt", {"UCX_TLS": "tcp,self"})
    assert verdict.ok, verdict.detail()
    assert verdict.summary.startswith("UCX 1.13.1: resources self/memory0, tcp/lo, tcp/eth0")
    assert "endpoint lanes tcp/lo, tcp/eth0" in verdict.summary


def test_net_devices_with_the_rdma_device_alone_leaves_tcp_no_device_named() -> None:
    # UCX makes its context (self alone) and only the endpoint fails: ucx_info -d would have listed tcp.
    verdict = _verdict("debian-1.13-tcp-net-devices-rdma-only.txt")
    assert not verdict.ok
    assert _variables(verdict) == {"UCX_NET_DEVICES"}
    text = verdict.detail()
    assert "UCX_TLS=tcp,self asks for tcp" in text and "UCX_NET_DEVICES=ionic_0:1 leaves it no device" in text
    assert "'ionic_0:1' not on this node as UCX sees it (UCX's devices: 'eth0'(tcp), 'lo'(tcp))" in text


def test_no_usable_transport_fails_naming_net_devices() -> None:
    verdict = _verdict("debian-1.13-no-usable.txt")
    assert _variables(verdict) == {"UCX_NET_DEVICES"}
    assert ucx_info.parse((FIXTURES / "debian-1.13-no-usable.txt").read_text()).failed == "context"


def test_the_tcp_aux_defect_fails_naming_net_devices_and_the_auxiliary() -> None:
    # Issue 34, defect 1: rc_verbs has its device, tcp:aux none; UCX itself makes the context.
    verdict = _verdict("pin-rc-verbs-tcp-aux-no-tcp.txt", roce=ROCE)
    assert [p.variable for p in verdict.problems] == ["UCX_NET_DEVICES"], verdict.detail()
    message = verdict.problems[0].message
    assert "asks for tcp (auxiliary: the wireup messages" in message
    assert "UCX_NET_DEVICES=ionic_0:1 leaves it no device" in message
    assert "self/memory0, rc_verbs/ionic_0:1" in message


def test_the_fixed_variables_pass_with_tcp_as_auxiliary() -> None:
    info = ucx_info.parse((FIXTURES / "pin-rc-verbs-tcp-aux-ok.txt").read_text())
    assert [(r.tl, r.device, r.aux) for r in info.resources] == [
        ("self", "memory0", False), ("tcp", "enp65s0", True), ("rc_verbs", "ionic_0:1", False),
    ]  # fmt: skip
    assert _verdict("pin-rc-verbs-tcp-aux-ok.txt", roce=ROCE).ok


def test_rocm_md_that_does_not_open_is_named_with_its_error_line() -> None:
    verdict = _verdict("pin-rocm-dmabuf-error.txt", roce=ROCE)
    assert "UCX_ROCM_COPY_DMABUF" in _variables(verdict)
    text = verdict.detail()
    assert "ROCm dmabuf support requested but not found (rocm_copy_md.c:428)" in text
    assert "/boot/config-$(uname -r)" in text
    # rocm_copy and rocm_ipc have no resource either: the ROCm transports of UCX_TLS are named too.
    assert "asks for rocm_copy" in text


def test_invalid_gid_index_is_named() -> None:
    verdict = _verdict("pin-invalid-gid.txt", roce={"ionic_0:1": [1]})
    assert "UCX_IB_GID_INDEX" in _variables(verdict)
    text = verdict.detail()
    assert "GID index 3 is not valid on ionic_0:1 (ib_device.c:1429)" in text
    assert "GID index 3 on ionic_0:1 is not a RoCE v2 GID (its RoCE v2 GIDs: 1)" in text


def test_gid_index_without_roce_v2_and_an_absent_port_are_named_from_sysfs() -> None:
    text = (FIXTURES / "pin-rc-verbs-tcp-aux-ok.txt").read_text()
    wrong_gid = ucx_check.judge_output(text, {}, {"ionic_0:1": [0, 2]})
    assert [p.variable for p in wrong_gid.problems] == ["UCX_IB_GID_INDEX"]
    no_port = ucx_check.judge_output(text, {}, {"ionic_1:1": [1]})
    assert [p.variable for p in no_port.problems] == ["UCX_NET_DEVICES"]
    assert "ionic_0:1 is not an RDMA port of this node (sysfs has: ionic_1:1)" in no_port.detail()


def test_aliases_expand_as_the_pinned_ucx_does() -> None:
    wanted = ucx_info.wanted_transports("rc_v,self,tcp:aux")
    assert [(w.tl, w.aux, w.alias) for w in wanted] == [
        ("rc_verbs", False, "rc_v"), ("ud_verbs", True, "rc_v"), ("self", False, None), ("tcp", True, None),
    ]  # fmt: skip
    assert ucx_info.wanted_transports("^tcp") == [] and ucx_info.wanted_transports("all") == []


def test_no_ucx_info_is_a_failure_not_a_pass(tmp_path: Path) -> None:
    code, text = ucx_check.run_ucx_info([str(tmp_path / "ucx_info")], {})
    verdict = ucx_check.judge_output(text, {"UCX_TLS": "tcp"})
    assert code is None and not verdict.ok and "cannot run" in verdict.detail()
    assert [p.variable for p in verdict.problems] == ["PATH"]


def test_the_nixl_wheels_own_ucx_through_ucpinfo_is_judged_the_same() -> None:
    # UCX 1.23.0 bundled in .venv-vllm-cpu's NIXL wheel, printed by UCX's own functions (nixl_compat.ucpinfo).
    ok = _verdict("nixl-wheel-1.23-tcp-ok.txt")
    assert ok.ok and ok.summary.startswith("UCX 1.23.0: resources self/memory, tcp/eth0, tcp/lo"), ok.summary
    broken = _verdict("nixl-wheel-1.23-tcp-net-devices-rdma-only.txt")
    assert _variables(broken) == {"UCX_NET_DEVICES"}
    assert "UCX_NET_DEVICES=ionic_0:1 leaves it no device" in broken.detail()


def test_a_venv_is_asked_through_its_own_ucx_first(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    labels = [label for _, label in ucx_check.venv_commands(str(tmp_path))]
    assert labels == [f"with the node's ucx_info ({tmp_path} has none)"]
    python = tmp_path / "bin" / "python"
    python.write_text("#!/bin/sh\necho 'no libucp' >&2\nexit 2\n")
    python.chmod(0o755)
    candidates = ucx_check.venv_commands(str(tmp_path))
    assert candidates[0][0] == [str(python), "-m", "nixl_compat.ucpinfo"]
    # A venv whose NIXL bundles no libucp: the node's ucx_info answers instead.
    answer = ucx_check.run_first(candidates, {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"})
    assert answer.found and answer.where.startswith("with the node's ucx_info")
    assert ucx_check.judge_output(answer.text, {}).ok


def test_in_an_image_its_ucx_info_answers_and_an_image_without_one_is_unknown(tmp_path: Path) -> None:
    # The script a container runs, here on this host: its ucx_info answers with the variables given.
    env = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "ionic_0:1"}
    answer = ucx_check.run_first([(ucx_check.in_image(), "in the image")], env)
    assert answer.found and _variables(ucx_check.judge_output(answer.text, env)) == {"UCX_NET_DEVICES"}
    # No ucx_info and no python3 with nixl_compat: nothing is asked, and the row says so (unknown, not pass).
    (tmp_path / "sh").symlink_to("/bin/sh")
    bare = {"PATH": str(tmp_path)}
    answer = ucx_check.run_first([(ucx_check.in_image(), "in the image")], {**env, **bare})
    assert not answer.found and ucx_check.NO_TOOL in answer.text
    spec = {
        "engine": "atom", "runtime": "venv", "runtime_facts": get_runtime("venv").node_facts(),
        "python_venv": str(tmp_path), "worker_venv": str(tmp_path),
        "ucx": {"env": {"n1": {"UCX_TLS": "tcp"}}, "shell": {}},
    }  # fmt: skip
    row = node_check._ucx(spec, get_engine("atom").node_needs("disagg"), "n1", "unix:///nowhere", tmp_path)
    assert row.status in (node_check.PASS, node_check.FAIL)  # this host has the node's ucx_info


def test_docker_runs_the_check_in_the_pd_workers_image_with_their_variables(tmp_path: Path) -> None:
    spec = {
        "engine": "atom", "runtime": "docker", "runtime_facts": get_runtime("docker").node_facts(),
        "images": {"nixl:1": None}, "shim_image": "nixl:1",
        "rdma_mounts": [], "python_venv": str(tmp_path),
    }  # fmt: skip
    env = {"UCX_TLS": "rc_verbs,self,tcp:aux", "UCX_NET_DEVICES": "ionic_0:1,enp65s0"}
    ((argv, where),) = node_check._ucx_commands(
        spec, get_engine("atom").node_needs("disagg"), "unix:///d", env
    )
    assert where == "in nixl:1"
    assert argv[argv.index("nixl:1") + 1 :] == ucx_check.in_image()
    assert "-e" in argv and "UCX_NET_DEVICES=ionic_0:1,enp65s0" in argv and "--network" in argv


def test_cli_judges_a_captured_output_and_exits_3_on_a_problem(tmp_path: Path) -> None:
    out = tmp_path / "ucx.json"
    bad = FIXTURES / "debian-1.13-tcp-net-devices-rdma-only.txt"
    assert (
        ucx_check.main([str(bad), "--json", str(out), "--env", "UCX_TLS=tcp,self", "--sysfs", str(tmp_path)])
        == 3
    )
    good = FIXTURES / "debian-1.13-tcp-ok.txt"
    assert ucx_check.main([str(good), "--json", str(out), "--sysfs", str(tmp_path)]) == 0


def test_the_real_ucx_info_here_agrees_with_the_captures() -> None:
    # Debian's ucx-utils (requirements/apt.txt): the same command with the broken variables, run for real.
    env = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "ionic_0:1"}
    _, text = ucx_check.run_ucx_info([ucx_check.TOOL, *ucx_check.ARGS], env)
    verdict = ucx_check.judge_output(text, env)
    assert _variables(verdict) == {"UCX_NET_DEVICES"}, verdict.detail()
    _, ok = ucx_check.run_ucx_info(
        [ucx_check.TOOL, *ucx_check.ARGS], {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}
    )
    assert ucx_check.judge_output(ok, {}).ok


def _port(root: Path, device: str, port: int, gids: dict[int, tuple[str, str, str]]) -> None:
    base = root / device / "ports" / str(port)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "state").write_text("4: ACTIVE\n")
    for index, (gid, kind, netdev) in gids.items():
        (base / "gids" / str(index)).write_text(gid + "\n")
        (base / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
        (base / "gid_attrs" / "ndevs" / str(index)).write_text(netdev + "\n")


def test_atom_workers_net_devices_computed_in_the_job_are_expanded_as_the_job_does(tmp_path: Path) -> None:
    # atom's P/D UCX_NET_DEVICES with the tcp wireup: the RDMA port and, read on the node, the netdev under its GID.
    _port(tmp_path, "ionic_0", 1, {
        0: ("fe80:0000:0000:0000:0202:c9ff:fe00:0001", "IB/RoCE v1", "enp65s0"),
        1: ("0000:0000:0000:0000:0000:ffff:0a00:000b", "RoCE v2", "enp65s0"),
    })  # fmt: skip
    config = load_cluster_config(EXAMPLE)
    nodes = [config.prefill_node, config.decode_node]
    planned = worker_ucx(config, get_engine("atom"), nodes, "disagg")
    assert planned is not None
    node = config.decode_node
    assert planned["env"][node]["UCX_TLS"] == "rc_verbs,self,tcp:aux"
    shell = planned["shell"][node]
    assert set(shell) == {"UCX_NET_DEVICES"}
    expanded = node_check.expand_job_values(shell, planned["env"][node], tmp_path)
    assert expanded == {"UCX_NET_DEVICES": "ionic_0:1,enp65s0"}
    # auto: the port's first IPv4 RoCE v2 GID, as the job's prelude picks it.
    assert node_check.aux_netdevs("ionic_0:1,", "auto", tmp_path) == "enp65s0"
    assert node_check.aux_netdevs("ionic_0:1,", "0", tmp_path) == ""  # index 0 is RoCE v1 here


def test_no_ucx_row_for_engines_or_runs_that_move_no_kv_through_ucx() -> None:
    config = load_cluster_config(EXAMPLE)
    nodes = [config.prefill_node]
    assert worker_ucx(config, get_engine("mocker"), nodes, "disagg") is None
    assert worker_ucx(config, get_engine("vllm-cpu"), nodes, "agg") is None
    planned = worker_ucx(config, get_engine("vllm-cpu"), nodes, None)
    assert planned is not None and planned["env"][nodes[0]]["UCX_TLS"] == "tcp,self"


def test_boot_config_is_required_only_where_the_workers_use_a_rocm_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rocm = {"ucx": {"env": {"n1": {"UCX_TLS": "rc_verbs,rocm_copy,rocm_ipc,rocm,sm,self,tcp:aux"}}}}
    host_vram = {"ucx": {"env": {"n1": {"UCX_TLS": "rc_verbs,self,tcp:aux"}}}}
    wanted = "/boot/config-6.8.0"
    monkeypatch.setattr(ucx_check, "boot_config", lambda: (None, wanted))
    missing = node_check._boot_config(rocm, "n1")
    assert (
        missing.status == node_check.FAIL
        and wanted in missing.detail
        and "UCX_TLS=rc_verbs,rocm" in missing.detail
    )
    assert node_check._boot_config(host_vram, "n1").status == node_check.NOT_NEEDED
    monkeypatch.setattr(ucx_check, "boot_config", lambda: ("/lib/modules/6.8.0/config", wanted))
    assert node_check._boot_config(rocm, "n1").status == node_check.PASS
    monkeypatch.setattr(ucx_check, "boot_config", lambda: (wanted, wanted))
    assert node_check._boot_config(rocm, "n1").detail.startswith(f"{wanted} present")
