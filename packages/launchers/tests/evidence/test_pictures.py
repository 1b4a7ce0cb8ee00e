"""A process draws each picture once: the same data gives the same bytes, other data another picture."""

from __future__ import annotations

from pathlib import Path

import pytest

from atomdyn_launchers.evidence import pictures
from atomdyn_launchers.evidence.signals import Signals


def _signals(tmp_path: Path, run_id: str, healthy_at: float, kv_mb: float) -> Signals:
    signals = Signals(tmp_path, run_id)
    signals.set("run.id", run_id)
    signals.events = [
        {"t": 100.0, "role": None, "event": "submitted"},
        {"t": healthy_at, "role": "decode", "event": "healthy"},
    ]
    signals.kv_points = [(0.0, kv_mb, 4), (1.5, kv_mb / 2, 9)]
    return signals


def _drawn(signals: Signals, out: Path) -> dict[str, bytes]:
    out.mkdir()
    return {name: (out / name).read_bytes() for name in pictures.draw(signals, out)}


def test_the_same_data_is_drawn_once_and_other_data_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pictures._DRAWN.clear()
    first = _drawn(_signals(tmp_path, "r1", 112.0, 8.0), tmp_path / "a")
    assert sorted(first) == ["kv_transfers.png", "timeline.png"]
    # Each datum the drawings read changes its picture: none is served from another's drawing.
    for other in (
        _signals(tmp_path, "r2", 112.0, 8.0),
        _signals(tmp_path, "r1", 113.0, 8.0),
        _signals(tmp_path, "r1", 112.0, 9.0),
    ):
        out = tmp_path / f"other{len(list(tmp_path.iterdir()))}"
        assert _drawn(other, out) != first
    drawing = []
    for name in ("_draw_timeline", "_draw_kv"):
        real = getattr(pictures, name)
        monkeypatch.setattr(pictures, name, lambda s, real=real: drawing.append(s) or real(s))
    assert _drawn(_signals(tmp_path, "r1", 112.0, 8.0), tmp_path / "again") == first
    assert drawing == []  # from what this process drew
    pictures._DRAWN.clear()
    assert _drawn(_signals(tmp_path, "r1", 112.0, 8.0), tmp_path / "fresh") == first  # deterministic
    assert len(drawing) == 2


def test_what_is_kept_is_bounded(tmp_path: Path) -> None:
    pictures._DRAWN.clear()
    for n in range(pictures._DRAWN_KEPT + 3):
        _drawn(_signals(tmp_path, f"r{n}", 112.0, 8.0), tmp_path / f"run{n}")
    assert len(pictures._DRAWN) == pictures._DRAWN_KEPT
