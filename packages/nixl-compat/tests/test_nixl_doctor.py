"""The doctor's report and each of its trap warnings, from real two-process self-tests."""

from __future__ import annotations

from pathlib import Path

from nixl_helpers import doctor, env_for, make_fake_torch, make_nixl_rocm

from nixl_compat.doctor import NVIDIA_DRIVER, _ucx_warnings, nvidia_warnings


def warnings(report: dict[str, object]) -> str:
    found = report["warnings"]
    assert isinstance(found, list)
    return "\n".join(found)


def test_healthy_cpu_host_reports_cma_and_no_warnings() -> None:
    report = doctor(env_for(), "--device", "cpu")
    assert report["_exit"] == 0
    assert report["platform"] == "rehearsal (CPU, DRAM), not MI355X"
    assert "lock_digest" in report and "fingerprint" in report
    assert report["backend"]["module"] == "nixl_cu13" and report["backend"]["version"] == "1.5.1"
    assert report["backend"]["gpu_device_api"] is True, "nixl-cu13 1.5.1's UCX carries the device API"
    assert report["ucx"]["version"].startswith("1.")
    assert "DRAM_SEG" in report["ucx"]["ucx_mem_types"]
    dram = report["selftest"]["DRAM"]
    assert dram["ok"] and dram["write_verified"] and dram["read_verified"]
    bulk = {t for p in dram["protocols"] if "ucp_put" in p["operation"] for t in p["transports"]}
    assert bulk == {"cma/memory"}
    assert report["warnings"] == []


def test_tcp_fallback_and_unexpected_interface_are_flagged() -> None:
    report = doctor(env_for(UCX_TLS="tcp,self"), "--device", "cpu", "--expect-net-device", "eth7")
    text = warnings(report)
    assert "bulk transfers (put/get) went over TCP (tcp/lo)" in text
    assert "UCX used network device(s) lo; expected only eth7" in text
    assert report["selftest"]["DRAM"]["ok"], "TCP is slow, not broken: the data still arrives"


def test_unset_net_devices_is_flagged_when_a_network_transport_carries_data() -> None:
    env = env_for(UCX_TLS="tcp,self")
    del env["UCX_NET_DEVICES"]
    text = warnings(doctor(env, "--device", "cpu"))
    assert "UCX_NET_DEVICES is unset and UCX picked" in text


def test_rocm_host_traps(tmp_path: Path) -> None:
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip="6.4.43482", cuda=None), version="1.4.2")
    report = doctor(env_for(root, UCX_TLS="rc,tcp,self"), "--device", "cpu")
    text = warnings(report)
    assert report["backend"]["module"] == "nixl_rocm"
    assert report["selftest"]["DRAM"]["ok"], "real transfer through the shim's nixl_rocm branch"
    assert "`import nixl` (the meta package) would load nixl_cu13 here, not nixl_rocm" in text
    assert "nixl_rocm 1.4.2 is older than 1.5.0: vLLM 0.33 refuses it" in text
    assert "UCX_TLS=rc,tcp,self names no ROCm transport" in text
    assert "ships no ROCm transport module" in text


def test_forced_cuda_backend_on_rocm_host(tmp_path: Path) -> None:
    root = make_fake_torch(tmp_path, hip="6.4.43482", cuda=None)
    report = doctor(env_for(root, NIXL_COMPAT_BACKEND="nixl_cu13"), "--device", "cpu")
    assert "CUDA backend nixl_cu13 on a ROCm host (forced: True)" in warnings(report)


def test_unrelated_pypi_rixl_is_flagged(tmp_path: Path) -> None:
    dist = tmp_path / "rixl-0.2.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rixl\nVersion: 0.2.0\n")
    report = doctor(env_for(tmp_path), "--device", "cpu")
    assert "PyPI's `rixl` is an unrelated project" in warnings(report)


def test_no_backend_is_an_error_with_reasons(tmp_path: Path) -> None:
    report = doctor(env_for(NIXL_COMPAT_BACKEND="nixl_cu12"), "--device", "cpu")
    assert report["_exit"] == 1
    assert "nixl_cu12: missing: not installed" in report["backend"]["error"]


def test_cuda_torch_without_nvidia_driver_or_gpu_is_flagged(tmp_path: Path) -> None:
    driver = tmp_path / "driver-nvidia"
    assert "no NVIDIA kernel driver is loaded" in "\n".join(nvidia_warnings("cuda", driver))
    driver.mkdir()
    (driver / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.00\n")
    assert "the NVIDIA driver is loaded, but it lists no GPU" in "\n".join(nvidia_warnings("cuda", driver))
    (driver / "gpus" / "0000:18:00.0").mkdir(parents=True)
    assert nvidia_warnings("cuda", driver) == []
    assert nvidia_warnings("rocm", tmp_path / "absent") == nvidia_warnings("cpu", tmp_path / "absent") == []


def test_doctor_on_this_host_with_a_cuda_torch_names_the_missing_driver(tmp_path: Path) -> None:
    report = doctor(env_for(make_fake_torch(tmp_path / "t", hip=None, cuda="12.8")), "--device", "cpu")
    text = warnings(report)
    if (NVIDIA_DRIVER / "version").is_file():  # an NVIDIA host: the driver is there, the warning is not
        assert "no NVIDIA kernel driver is loaded" not in text
    else:
        assert "torch is a CUDA build but no NVIDIA kernel driver is loaded" in text
    assert report["selftest"]["DRAM"]["ok"], "host memory still moves"


def _rc_row(device: str) -> dict[str, object]:
    # One inter-node put row as the doctor's report keeps it (ucxinfo.ProtoChoice.as_dict).
    return {
        "scope": "inter-node",
        "operation": "remote memory write by ucp_put* from host memory to host",
        "size_range": "0..inf",
        "method": "zero-copy",
        "transports": [f"rc_verbs/{device}"],
    }


def test_an_expected_device_with_its_port_is_compared_whole() -> None:
    # UCX names the device it used with its port (ionic_0:1), and so does UCX_NET_DEVICES: the same text is no
    # surprise; another port of the same NIC is one.
    assert _ucx_warnings([_rc_row("ionic_0:1")], ("ionic_0:1",), None) == []
    assert _ucx_warnings([_rc_row("ionic_0:1")], ("ionic_0",), None) == []
    assert _ucx_warnings([_rc_row("ionic_0:2")], ("ionic_0:1",), None) == [
        "UCX used network device(s) ionic_0:2; expected only ionic_0:1"
    ]
