"""Every test here needs nixl_cu13: fail in CI, skip elsewhere, when it is missing."""

from __future__ import annotations

import pytest
from nixl_helpers import require_nixl


@pytest.fixture(autouse=True)
def _nixl_present() -> None:
    require_nixl()
