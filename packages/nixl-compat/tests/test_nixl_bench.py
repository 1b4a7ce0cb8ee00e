"""`nixl-compat bench --quick`: real two-process transfers through `rixl`, verified. Correctness only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nixl_helpers import env_for, run_cli


@pytest.mark.integration
def test_bench_quick_moves_verified_blocks_and_writes_json_and_plot(tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    proc = run_cli(
        [
            "bench",
            "--quick",
            "--ucx",
            "default",
            "--ucx",
            "tuned",
            "--ucx",
            "split:progress_thread=off,threads=2,split=2",
            "--json",
            str(out_json),
            "--plot",
            str(out_png),
        ],
        env_for(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out_json.read_text())
    assert doc["schema"] == "nixl-compat-bench/1" and doc["complete"]
    assert doc["platform"].startswith("rehearsal (CPU")
    assert doc["backend"]["module"] == "nixl_cu13"
    assert "fingerprint" in doc and "lock_digest" in doc
    assert [c["name"] for c in doc["configs"]] == ["default", "tuned", "split"]
    tuned = doc["configs"][1]
    assert tuned["env"] == {"UCX_CMA_SEG_SIZE": "4m"}, "a bare 'tuned' is the CPU's tuned settings"
    series = [s for c in doc["configs"] for s in c["series"]]
    assert not [s for s in series if "error" in s], [s["error"] for s in series if "error" in s]
    assert all(s["verified"] for s in series)
    paths = {(s["layout"], s["path"]) for s in series}
    for layout in ("layer-major", "block-contiguous"):
        assert {(layout, "naive"), (layout, "prepped"), (layout, "best")} <= paths
    one = {(s["layout"], s["path"]): s for s in series if s.get("blocks") == 1}
    assert one[("layer-major", "best")]["descriptors"] == 72
    assert one[("block-contiguous", "best")]["descriptors"] == 1
    assert one[("block-contiguous", "naive")]["bytes"] == 2359296
    for s in series + doc["configs"][0]["raw"]:
        assert 0 < s["p50_us"] <= s["p99_us"] and s["iterations"] >= 1
    assert {g["layout"] for g in doc["goals"]} >= {"layer-major", "block-contiguous"}
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "goal [default, block-contiguous]" in proc.stdout
    assert "goal [tuned, layer-major]" in proc.stdout


def test_bench_rejects_bad_arguments_clearly() -> None:
    proc = run_cli(["bench", "--blocks", "1,x"], env_for())
    assert proc.returncode == 2 and "expected comma-separated integers" in proc.stderr
    proc = run_cli(["bench", "--num-blocks", "2", "--blocks", "4"], env_for())
    assert proc.returncode == 2 and "block counts [4] must be in 1..num_blocks (2)" in proc.stderr


def test_json_still_written_when_matplotlib_is_missing(tmp_path: Path) -> None:
    blocker = tmp_path / "block"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('matplotlib is absent here')\n")
    out_json, out_png = tmp_path / "b.json", tmp_path / "b.png"
    proc = run_cli(["bench", "--quick", "--json", str(out_json), "--plot", str(out_png)], env_for(blocker))
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out_json.read_text())
    assert doc["complete"] and [c["name"] for c in doc["configs"]] == ["default", "tuned"]
    assert not out_png.exists()
    assert "no plot: matplotlib is not installed" in proc.stderr


def test_invoke_collection_maps_exit_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    from invoke.context import Context
    from invoke.exceptions import Exit

    from nixl_compat.invoke_tasks import ns

    assert set(ns.task_names) == {"doctor", "bench"}
    monkeypatch.setenv("NIXL_COMPAT_BACKEND", "nixl_cu12")  # not installed: the doctor must fail
    with pytest.raises(Exit) as failed:
        ns["doctor"](Context(), device="cpu")
    assert failed.value.code == 1
