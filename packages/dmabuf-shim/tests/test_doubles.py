"""The test doubles model the dma-buf export and registration semantics of docs/mori-path.md; these tests pin that
model down (no shim involved)."""

from __future__ import annotations

import re
import subprocess

from conftest import Programs

MiB = 1024 * 1024
HSA_STATUS_ERROR_INVALID_ALLOCATION = 0x1003
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_CONTEXT = 201
IBV_WC_SUCCESS = 0
IBV_WC_REM_ACCESS_ERR = 10
EINVAL, EBADF = 22, 9


def test_hsa_export_covers_the_whole_allocation_and_returns_an_unaligned_offset(programs: Programs) -> None:
    r = programs.run(programs.probe, "hsa-export", preload=False)
    assert r.int("status") == 0
    assert r.int("fd_size") == 64 * MiB
    assert r.int("offset") == 32 * MiB + 100
    assert r.int("open") == 1 and r.int("close") == 0
    assert r.int("open_after_close") == 0, "closing the export must release the fd"
    assert r.int("host_status") == HSA_STATUS_ERROR_INVALID_ALLOCATION
    assert r.int("overrun_status") == HSA_STATUS_ERROR_INVALID_ALLOCATION
    assert (r.int("info_type"), r.int("info_base_delta"), r.int("info_size")) == (1, 0, 64 * MiB)
    assert r.int("host_info_type") == 0
    # pageable memory must be locked before the runtime copies from it; locked memory reports LOCKED (2)
    assert r.int("copy_unlocked") == 0x1001
    assert (r.int("lock"), r.int("locked_type"), r.int("copy"), r.int("copied")) == (0, 2, 0, 1)
    assert (r.int("unlock"), r.int("unlock_again")) == (0, 0x1001)
    assert r.int("status_string") == 1


def test_cuda_export_is_exactly_the_aligned_range_and_rejects_unaligned_pointers(programs: Programs) -> None:
    r = programs.run(programs.probe, "cuda-export", preload=False)
    assert r.int("before_init") == CUDA_ERROR_NOT_INITIALIZED
    assert r.int("no_context") == CUDA_ERROR_INVALID_CONTEXT
    assert (r.int("htod"), r.int("dtoh"), r.int("copied")) == (0, 0, 1)
    assert r.int("beyond") == CUDA_ERROR_INVALID_VALUE
    assert r.int("status") == 0 and r.int("fd_size") == MiB
    assert r.int("unaligned_status") == CUDA_ERROR_INVALID_VALUE
    assert r.int("open") == 1 and r.int("open_after") == 0
    assert (r.int("memtype_status"), r.int("memtype"), r.int("host_status")) == (
        0,
        2,
        CUDA_ERROR_INVALID_VALUE,
    )


def test_plain_registration_of_gpu_memory_fails_like_ionic(programs: Programs) -> None:
    r = programs.run(programs.probe, "plain-vram", preload=False)
    assert (r.int("vram_mr"), r.int("errno")) == (0, EINVAL)
    assert r.int("host_mr") == 1
    # UCX probes dma-buf support with fd -1 and expects EBADF
    assert (r.int("badfd_mr"), r.int("badfd_errno")) == (0, EBADF)


def test_dmabuf_mr_maps_the_exported_offset(programs: Programs) -> None:
    r = programs.run(programs.probe, "write", preload=False)
    assert r.int("wc_status") == IBV_WC_SUCCESS
    assert r.int("landed") == 1 and r.int("sentinel_intact") == 1
    assert r.int("mr_addr") == 32 * MiB, "rdma-core reports the dma-buf offset as mr->addr"
    assert r.int("read_status") == IBV_WC_SUCCESS and r.int("read_ok") == 1
    assert r.int("overrun_status") == IBV_WC_REM_ACCESS_ERR


def test_offset_zero_reproduces_the_sub_allocation_bug(programs: Programs) -> None:
    r = programs.run(programs.probe, "write-bug", preload=False)
    assert r.int("wc_status") == IBV_WC_SUCCESS, "the bug is silent: the write succeeds"
    assert r.int("landed") == 0 and r.int("sentinel_intact") == 0


def test_verbs_double_carries_rdma_core_symbol_versions(programs: Programs) -> None:
    out = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(programs.doubles["ibverbs"])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    versions = dict(re.findall(r"\b(ibv_reg_\w+)@+(IBVERBS_[\d.]+)", out))
    assert versions == {
        "ibv_reg_mr": "IBVERBS_1.1",
        "ibv_reg_mr_iova": "IBVERBS_1.7",
        "ibv_reg_mr_iova2": "IBVERBS_1.8",
        "ibv_reg_dmabuf_mr": "IBVERBS_1.12",
    }
    app = subprocess.run(
        ["readelf", "--dyn-syms", "-W", str(programs.reg_app)], capture_output=True, text=True, check=True
    ).stdout
    # the test program references the versioned symbols, as a program built against rdma-core does
    assert "ibv_reg_mr@IBVERBS_1.1" in app
    assert "ibv_reg_mr_iova2@IBVERBS_1.8" in app
    assert "ibv_reg_mr_iova@IBVERBS_1.7" in app
