"""torch, imported only where a GPU is used; typed as Any so that type checks never need torch installed."""

from __future__ import annotations

import importlib
from typing import Any


def import_torch() -> Any:
    return importlib.import_module("torch")
