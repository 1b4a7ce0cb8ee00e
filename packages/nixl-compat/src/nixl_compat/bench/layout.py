"""Where a KV block's bytes live in a paged cache, as NIXL descriptors (offset, length) from the base."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

Layout = Literal["layer-major", "block-contiguous"]
LAYOUTS: tuple[Layout, ...] = ("layer-major", "block-contiguous")
Descs = npt.NDArray[np.int64]  # shape (N, 2): offset, length


@dataclass(frozen=True)
class KVShape:
    """One attention cache: per layer a K and a V tensor of [blocks, block_tokens, kv_heads, head_dim]."""

    layers: int = 36
    kv_heads: int = 8
    head_dim: int = 128
    block_tokens: int = 16
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        for name in ("layers", "kv_heads", "head_dim", "block_tokens", "dtype_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"KV shape: {name} must be positive, got {getattr(self, name)}")

    @property
    def chunk_bytes(self) -> int:
        """One layer's K (or V) for one block: the unit vLLM's NixlConnector sends as one descriptor."""
        return self.block_tokens * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def chunks_per_block(self) -> int:
        return 2 * self.layers

    @property
    def block_bytes(self) -> int:
        return self.chunk_bytes * self.chunks_per_block


def cache_bytes(shape: KVShape, num_blocks: int) -> int:
    return shape.block_bytes * num_blocks


def regions(shape: KVShape, layout: Layout, num_blocks: int) -> Descs:
    """Registered regions: one per (layer, K|V) tensor for layer-major (as vLLM does), else one."""
    if layout == "layer-major":
        size = shape.chunk_bytes * num_blocks
        return np.array([[r * size, size] for r in range(shape.chunks_per_block)], dtype=np.int64)
    return np.array([[0, cache_bytes(shape, num_blocks)]], dtype=np.int64)


def block_descs(shape: KVShape, layout: Layout, num_blocks: int, block_ids: list[int]) -> Descs:
    """One descriptor per (block, layer, K|V), in vLLM's order: block by block, layer by layer."""
    bad = [b for b in block_ids if not 0 <= b < num_blocks]
    if bad:
        raise ValueError(f"block ids {bad} outside a cache of {num_blocks} blocks")
    chunk = shape.chunk_bytes
    rows: list[tuple[int, int]] = []
    for b in block_ids:
        for r in range(shape.chunks_per_block):
            if layout == "layer-major":
                rows.append((r * num_blocks * chunk + b * chunk, chunk))
            else:
                rows.append((b * shape.block_bytes + r * chunk, chunk))
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def region_of(descs: Descs, bounds: Descs) -> npt.NDArray[np.int64]:
    """Index of the registered region holding each descriptor's first byte."""
    return np.searchsorted(bounds[:, 0], descs[:, 0], side="right").astype(np.int64) - 1


def coalesce(src: Descs, dst: Descs, bounds: Descs | None = None) -> tuple[Descs, Descs]:
    """Merge descriptor pairs that are adjacent on BOTH sides; the bytes moved stay exactly the same.

    A merged descriptor must stay inside one registered region (`bounds`, same layout on both sides):
    NIXL finds no backend for a descriptor that straddles two registrations.
    """
    if src.shape != dst.shape:
        raise ValueError(f"source and target descriptor lists differ in shape: {src.shape} vs {dst.shape}")
    if len(src) == 0:
        return src, dst
    order = np.argsort(src[:, 0], kind="stable")
    s, d = src[order], dst[order]
    whole = np.array([[0, 0]], dtype=np.int64)
    rs, rd = (
        region_of(s, whole if bounds is None else bounds),
        region_of(d, whole if bounds is None else bounds),
    )
    out_s: list[list[int]] = [[int(s[0, 0]), int(s[0, 1])]]
    out_d: list[list[int]] = [[int(d[0, 0]), int(d[0, 1])]]
    for i, ((so, sl), (do, dl)) in enumerate(zip(s[1:].tolist(), d[1:].tolist(), strict=True), start=1):
        ps, pd = out_s[-1], out_d[-1]
        same_region = rs[i] == rs[i - 1] and rd[i] == rd[i - 1]
        if same_region and ps[0] + ps[1] == so and pd[0] + pd[1] == do:
            ps[1] += sl
            pd[1] += dl
        else:
            out_s.append([so, sl])
            out_d.append([do, dl])
    return np.array(out_s, dtype=np.int64), np.array(out_d, dtype=np.int64)


def split(offset: int, length: int, lanes: int) -> Descs:
    """One contiguous range as `lanes` descriptors, so the backend may move them in parallel."""
    if lanes <= 0 or lanes > length:
        raise ValueError(f"lanes must be in 1..{length}, got {lanes}")
    edges = [offset + (length * i) // lanes for i in range(lanes + 1)]
    return np.array([[a, b - a] for a, b in itertools.pairwise(edges)], dtype=np.int64)
