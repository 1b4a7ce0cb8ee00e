"""Descriptor arithmetic of the bench: vLLM's layer-major cache, a block-contiguous one, coalescing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nixl_compat.bench import layout as L
from nixl_compat.bench.memory import HostBuffer
from nixl_compat.bench.spec import BenchSpec, UcxConfig, default_configs, expand_presets
from nixl_compat.bench.stats import summarize


def test_qwen3_8b_block_is_72_descriptors_of_32_kib() -> None:
    shape = L.KVShape()
    assert shape.chunk_bytes == 32 * 1024
    assert shape.chunks_per_block == 72
    assert shape.block_bytes == 2.25 * 2**20


@pytest.mark.parametrize("layout", L.LAYOUTS)
def test_block_descriptors_tile_the_cache_exactly(layout: L.Layout) -> None:
    shape = L.KVShape(layers=3, kv_heads=2, head_dim=4, block_tokens=2)
    descs = L.block_descs(shape, layout, 5, list(range(5)))
    covered = np.zeros(L.cache_bytes(shape, 5), dtype=np.int64)
    for off, length in descs.tolist():
        covered[off : off + length] += 1
    assert (covered == 1).all(), "every byte of the cache belongs to exactly one descriptor"
    regions = L.regions(shape, layout, 5)
    idx = L.region_of(descs, regions)
    ends = regions[idx, 0] + regions[idx, 1]
    assert (descs[:, 0] + descs[:, 1] <= ends).all(), "a descriptor crosses a registered region"


def test_layer_major_block_cannot_coalesce_but_consecutive_blocks_do() -> None:
    shape, n = L.KVShape(), 64
    regions = L.regions(shape, "layer-major", n)
    one_s, one_d = L.block_descs(shape, "layer-major", n, [0]), L.block_descs(shape, "layer-major", n, [9])
    assert len(L.coalesce(one_s, one_d, regions)[0]) == 72
    src = L.block_descs(shape, "layer-major", n, [0, 1, 2, 3])
    dst = L.block_descs(shape, "layer-major", n, [10, 11, 12, 13])
    cs, cd = L.coalesce(src, dst, regions)
    assert len(cs) == 72 and (cs[:, 1] == 4 * shape.chunk_bytes).all()
    assert int(cs[:, 1].sum()) == int(src[:, 1].sum()) == int(cd[:, 1].sum())


def test_coalescing_stops_at_registration_boundaries() -> None:
    """All 64 blocks of a layer-major cache are adjacent across layers; one descriptor per region remains."""
    shape, n = L.KVShape(), 64
    every = L.block_descs(shape, "layer-major", n, list(range(n)))
    regions = L.regions(shape, "layer-major", n)
    assert len(L.coalesce(every, every)[0]) == 1  # without bounds it would straddle all 72 registrations
    cs, _ = L.coalesce(every, every, regions)
    assert cs.tolist() == regions.tolist()


def test_block_contiguous_block_is_one_descriptor_and_reversed_blocks_stay_apart() -> None:
    shape, n = L.KVShape(), 8
    regions = L.regions(shape, "block-contiguous", n)
    s, d = L.block_descs(shape, "block-contiguous", n, [2]), L.block_descs(shape, "block-contiguous", n, [5])
    cs, cd = L.coalesce(s, d, regions)
    assert cs.tolist() == [[2 * shape.block_bytes, shape.block_bytes]]
    assert cd.tolist() == [[5 * shape.block_bytes, shape.block_bytes]]
    s2 = L.block_descs(shape, "block-contiguous", n, [0, 1])
    d2 = L.block_descs(shape, "block-contiguous", n, [7, 6])
    assert len(L.coalesce(s2, d2, regions)[0]) == 2


def test_split_and_bad_input() -> None:
    lanes = L.split(100, 1000, 3)
    assert lanes[0, 0] == 100 and int(lanes[:, 1].sum()) == 1000
    assert (lanes[1:, 0] == lanes[:-1, 0] + lanes[:-1, 1]).all()
    with pytest.raises(ValueError, match="lanes"):
        L.split(0, 10, 0)
    with pytest.raises(ValueError, match="outside a cache of 4 blocks"):
        L.block_descs(L.KVShape(), "layer-major", 4, [4])
    with pytest.raises(ValueError, match="layers must be positive"):
        L.KVShape(layers=0)


def test_digest_sees_a_single_changed_byte() -> None:
    buf = HostBuffer(3 * 4096)
    buf.fill(3)
    descs = np.array([[0, 4096], [8192, 4096]], dtype=np.int64)
    before = buf.digest(descs)
    buf.array[8192 + 17] ^= 0xFF
    assert buf.digest(descs) != before
    assert buf.addr % (2 << 20) == 0, "DRAM buffers are 2 MiB aligned for transparent huge pages"


def test_spec_and_ucx_config_validation() -> None:
    assert UcxConfig.parse("x:UCX_TLS=cma,progress_thread=off") == UcxConfig(
        "x", (("UCX_TLS", "cma"),), False
    )
    assert UcxConfig.parse("t:threads=2").threads == 2
    split = UcxConfig.parse("s:threads=4,split=18,NIXL_UCX_SGL_ENABLE=1")
    assert split.backend_params() == {"num_threads": "4", "split_batch_size": "18"}
    assert split.env == (("NIXL_UCX_SGL_ENABLE", "1"),)
    assert UcxConfig("plain").backend_params() == {}
    with pytest.raises(ValueError, match="split=N needs threads=N"):
        UcxConfig.parse("s:split=4")
    with pytest.raises(ValueError, match="is not UCX_VAR=VALUE"):
        UcxConfig.parse("x:TLS=cma")
    gpu = expand_presets((UcxConfig("default"), UcxConfig("tuned")), "cuda")
    assert gpu[0] == UcxConfig("default")
    assert gpu[1].env == (("NIXL_UCX_SGL_ENABLE", "1"),) and not gpu[1].progress_thread
    assert expand_presets((UcxConfig("tuned", (("UCX_TLS", "tcp"),)),), "cpu")[0].env == (("UCX_TLS", "tcp"),)
    assert [c.name for c in default_configs("cpu")] == ["default", "tuned"]
    with pytest.raises(ValueError, match="empty name"):
        UcxConfig.parse(":UCX_TLS=cma")
    with pytest.raises(ValueError, match="block counts"):
        BenchSpec(num_blocks=4, block_counts=(8,))
    with pytest.raises(ValueError, match="unique"):
        BenchSpec(ucx=(UcxConfig("a"), UcxConfig("a")))
    stats = summarize([2e-3], [1e-6, 2e-6, 3e-6], 3000)
    assert stats["p50_us"] == 2.0 and stats["cold_us"] == 2000.0 and stats["gbps_p50"] == 1.5
    with pytest.raises(ValueError, match="warm"):
        summarize([1.0], [], 1)


def test_device_put_plan_cuts_descriptors_into_warp_slices() -> None:
    from nixl_compat.bench.device_put import SLICE_BYTES, slice_plan

    plan = slice_plan(np.array([SLICE_BYTES, 2 * SLICE_BYTES + 5, 7], dtype=np.int64))
    assert plan.tolist() == [
        [0, 0, SLICE_BYTES],
        [1, 0, SLICE_BYTES],
        [1, SLICE_BYTES, SLICE_BYTES],
        [1, 2 * SLICE_BYTES, 5],
        [2, 0, 7],
    ]
    block = slice_plan(np.full(72, 32 * 1024, dtype=np.int64))
    assert len(block) == 72 and block[:, 2].sum() == 72 * 32 * 1024, "a KV block: one warp per chunk"
    with pytest.raises(ValueError, match="slice size"):
        slice_plan(np.array([1]), 0)


def test_device_put_library_is_optional_but_a_wrong_path_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from nixl_compat.bench.device_put import LIB_ENV, device_put_lib

    monkeypatch.delenv(LIB_ENV, raising=False)
    assert device_put_lib() is None
    monkeypatch.setenv(LIB_ENV, str(tmp_path / "missing.so"))
    with pytest.raises(FileNotFoundError, match=r"build it with scripts/gpu/build_device_put\.sh"):
        device_put_lib()
