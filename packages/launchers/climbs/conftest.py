"""The real engine's climb of the bring-up ladder (``nox -s climb``) reuses the test suite's local-cluster
fixtures; it is a directory of its own so that ``nox -s tests`` does not collect it: its P/D rung is exposed to
the rehearsal's KV transfer stalls (issue 26) a second time beside the real-engine tests, and under a loaded
machine those stalls failed it once here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path.insert(0, str(TESTS))

_spec = importlib.util.spec_from_file_location("atomdyn_launchers_climb_fixtures", TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fixtures)

local_cluster = _fixtures.local_cluster
local_cluster_config = _fixtures.local_cluster_config
