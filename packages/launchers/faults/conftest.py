"""The fault suite (``nox -s faults``) reuses the test suite's local-cluster fixtures and fault kit; it is a
directory of its own so that ``pytest`` over ``tests/`` (``nox -s tests``) never collects it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))  # faultkit

_spec = importlib.util.spec_from_file_location("atomdyn_launchers_test_fixtures", TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

local_cluster = _fixtures.local_cluster
local_cluster_config = _fixtures.local_cluster_config
