"""``python -m nixl_compat.ucpinfo``: without a libucp it says so and exits 2 (the UCX check then asks the
node's ucx_info); with the NIXL wheel's UCX it runs for real in the launchers' UCX check tests on the local
cluster (packages/launchers/tests/nodes/test_nodes_ucx.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nixl_compat import ucpinfo


def test_a_missing_library_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ucpinfo.main(["--libucp", str(tmp_path / "libucp.so.0")]) == 2
    assert f"cannot load {tmp_path / 'libucp.so.0'}" in capsys.readouterr().err


def test_no_wheel_no_library(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(ucpinfo, "WHEELS", ("no_such_nixl_wheel",))
    assert ucpinfo.wheel_libucp() is None
    assert ucpinfo.main([]) == 2
    assert "no libucp" in capsys.readouterr().err
