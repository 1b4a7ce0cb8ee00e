"""The loopback against the shared doubles: offset 0 corrupts the sentinel, the exporter's offset lands."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import run_program

from mori_repro.exitcodes import ExitCode

MiB = 1 << 20
SUB_OFFSET = 32 * MiB


def _modes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in report["modes"]}


def _assert_misdirected_to_base(mode: dict[str, Any]) -> None:
    assert mode["registration"] == "ok"
    assert mode["reg_offset"] == 0
    assert mode["write"]["status"] == "IBV_WC_SUCCESS"
    assert mode["read"]["status"] == "IBV_WC_SUCCESS"
    assert mode["sentinel_intact"] is False
    assert mode["data_at_sub_allocation"] is False
    assert mode["landed_at"] == 0
    # the READ through the same wrong MR returns the data: a round-trip check alone would pass
    assert mode["readback_matches"] is True
    assert mode["fd_closed"] is True
    assert mode["outcome"] == "misdirected"


def _assert_correct(mode: dict[str, Any], reg_offset: int, landed_at: int = SUB_OFFSET) -> None:
    assert mode["registration"] == "ok"
    assert mode["reg_offset"] == reg_offset
    assert mode["write"]["status"] == "IBV_WC_SUCCESS"
    assert mode["read"]["status"] == "IBV_WC_SUCCESS"
    assert mode["sentinel_intact"] is True
    assert mode["data_at_sub_allocation"] is True
    assert mode["landed_at"] == landed_at
    assert mode["readback_matches"] is True
    assert mode["fd_closed"] is True
    assert mode["outcome"] == "correct"


@pytest.mark.parametrize("backend", ["hsa", "cuda"])
def test_offset_zero_corrupts_sentinel_and_exporter_offset_lands(
    backend: str, hsa_env: dict[str, str], cuda_env: dict[str, str]
) -> None:
    env = hsa_env if backend == "hsa" else cuda_env
    result = run_program(["--json", f"--backend={backend}"], env)
    assert result.returncode == ExitCode.BUG_REPRODUCED, result.stdout + result.stderr
    report = result.report()
    assert report["verdict"] == "bug-reproduced"
    assert report["gpu"]["backend"] == backend
    assert report["rdma"]["device"] == "ionic_dbl0"
    assert report["export"] == {
        "covers": "allocation",
        "fd_size": 64 * MiB,
        "offset": SUB_OFFSET,
        "object_starts_at": 0,
    }
    modes = _modes(report)
    _assert_misdirected_to_base(modes["offset-0"])
    _assert_correct(modes["exporter-offset"], SUB_OFFSET)
    assert report["summary"].startswith(
        "bug reproduced: with offset 0 the WRITE landed at allocation offset 0"
    )
    assert "with the exporter's offset (33554432) the data landed at the sub-allocation" in report["summary"]


def test_fix_mode_alone_confirms_the_fix(hsa_env: dict[str, str]) -> None:
    result = run_program(["--json", "--backend=hsa", "--mode=fix"], hsa_env)
    assert result.returncode == ExitCode.FIXED_CONFIRMED, result.stdout + result.stderr
    report = result.report()
    assert [m["name"] for m in report["modes"]] == ["exporter-offset"]
    _assert_correct(report["modes"][0], SUB_OFFSET)
    assert report["verdict"] == "fixed-behaviour-confirmed"


def test_bug_mode_alone_reproduces(hsa_env: dict[str, str]) -> None:
    result = run_program(["--json", "--backend=hsa", "--mode=bug"], hsa_env)
    assert result.returncode == ExitCode.BUG_REPRODUCED
    assert [m["name"] for m in result.report()["modes"]] == ["offset-0"]


def test_cuda_range_export_makes_offset_zero_right_for_aligned_chunks(cuda_env: dict[str, str]) -> None:
    """CUDA exports exactly the page range: the exporter's offset is 0 and both registrations land."""
    result = run_program(["--json", "--backend=cuda", "--cuda-export=range"], cuda_env)
    assert result.returncode == ExitCode.FIXED_CONFIRMED, result.stdout + result.stderr
    report = result.report()
    assert report["export"] == {
        "covers": "range",
        "fd_size": 1 * MiB,
        "offset": 0,
        "object_starts_at": SUB_OFFSET,
    }
    for mode in report["modes"]:
        _assert_correct(mode, 0)
    assert "offset 0 is harmless here" in report["summary"]


@pytest.mark.parametrize(
    ("backend", "extra", "exporter_offset", "fd_size"),
    [
        ("hsa", [], SUB_OFFSET + 256, 64 * MiB),
        ("cuda", ["--cuda-export=range"], 256, MiB + 4096),
    ],
)
def test_unaligned_chunk_offset_zero_is_rejected(
    backend: str,
    extra: list[str],
    exporter_offset: int,
    fd_size: int,
    hsa_env: dict[str, str],
    cuda_env: dict[str, str],
) -> None:
    """A chunk 256 bytes into a page: offset 0 and iova disagree in page offset, so registration fails."""
    env = hsa_env if backend == "hsa" else cuda_env
    result = run_program(["--json", f"--backend={backend}", f"--sub-offset={SUB_OFFSET + 256}", *extra], env)
    assert result.returncode == ExitCode.BUG_REPRODUCED, result.stdout + result.stderr
    report = result.report()
    assert report["export"]["offset"] == exporter_offset
    assert report["export"]["fd_size"] == fd_size
    modes = _modes(report)
    bug = modes["offset-0"]
    assert bug["registration"] == "failed"
    assert bug["reg_errno"] == 22  # EINVAL
    assert bug["outcome"] == "registration-rejected"
    assert (
        bug["sentinel_intact"] is True and bug["data_at_sub_allocation"] is False and bug["landed_at"] is None
    )
    fix = modes["exporter-offset"]
    _assert_correct(fix, exporter_offset, landed_at=SUB_OFFSET + 256)
    assert "the registration was rejected (errno 22" in report["summary"]


def test_human_output_shows_each_registration(hsa_env: dict[str, str]) -> None:
    result = run_program(["--backend=hsa"], hsa_env)
    assert result.returncode == ExitCode.BUG_REPRODUCED
    lines = result.stdout.splitlines()
    assert lines[0].startswith("mori-repro: bug reproduced: with offset 0")
    assert (
        "  offset-0 (bug): registration ok, WRITE IBV_WC_SUCCESS, READ IBV_WC_SUCCESS, sentinel CORRUPTED, "
        "data at sub-allocation NO (found at offset 0) -> misdirected" in lines
    )
    assert (
        "  exporter-offset (fix): registration ok, WRITE IBV_WC_SUCCESS, READ IBV_WC_SUCCESS, "
        "sentinel intact, data at sub-allocation yes -> correct" in lines
    )
    assert lines[-1] == "exit 10 (bug-reproduced)"


def test_wrong_gid_index_is_an_environment_problem(hsa_env: dict[str, str]) -> None:
    result = run_program(["--json", "--backend=hsa", "--gid-index=5"], hsa_env)
    assert result.returncode == ExitCode.ENVIRONMENT
    assert result.report()["environment"]["missing"] == [
        {"component": "rdma", "detail": "ionic_dbl0 port 1 has no GID at index 5"}
    ]


def test_unknown_rdma_device_lists_the_available_ones(hsa_env: dict[str, str]) -> None:
    result = run_program(["--json", "--backend=hsa", "--device=mlx5_9"], hsa_env)
    assert result.returncode == ExitCode.ENVIRONMENT
    assert result.report()["environment"]["missing"] == [
        {"component": "rdma", "detail": "RDMA device 'mlx5_9' not found (available: ionic_dbl0)"}
    ]


def test_gpu_present_but_no_rdma_device_still_reports_the_export(hsa_env: dict[str, str]) -> None:
    """With a (double) GPU runtime and the real libibverbs, only the RDMA device is missing."""
    env = dict(hsa_env)
    del env["MORI_REPRO_LIBIBVERBS"]  # the system's libibverbs: no devices here
    result = run_program(["--json", "--backend", "hsa"], env)
    assert result.returncode == 20
    report = result.report()
    assert report["environment"]["missing"] == [
        {"component": "rdma", "detail": "libibverbs found no RDMA device"}
    ]
    assert report["export"] == {
        "covers": "allocation",
        "fd_size": 64 << 20,
        "offset": 32 << 20,
        "object_starts_at": 0,
    }
    assert report["gpu"]["backend"] == "hsa"


def test_registration_refused_by_the_nic_is_not_blamed_on_the_offset(hsa_env: dict[str, str]) -> None:
    """Firmware refusing remote write fails both registrations: the fix is not confirmed (exit 11)."""
    env = dict(hsa_env, IBV_DOUBLE_REJECT_ACCESS="2")  # IBV_ACCESS_REMOTE_WRITE
    result = run_program(["--json", "--backend=hsa"], env)
    assert result.returncode == ExitCode.FIX_NOT_CONFIRMED, result.stdout + result.stderr
    report = result.report()
    assert report["verdict"] == "fix-not-confirmed"
    assert [m["outcome"] for m in report["modes"]] == ["registration-rejected", "registration-rejected"]
    assert report["summary"] == (
        "fix not confirmed: with the exporter's offset (33554432) the registration was rejected "
        "(errno 22, Invalid argument)"
    )
