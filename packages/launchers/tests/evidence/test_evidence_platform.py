"""The platform from corroborating probes, names matched exactly, JSON read strictly (issue 36, item 2): each
case below came out MI355X (or was read) before this change."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from evidence_helpers import REPO, vllm_cpu_run  # noqa: F401  (a fixture)

from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.hardware import hardware_label
from atomdyn_launchers.evidence.summary import _fingerprints, collect

H200 = REPO / "evidence" / "20261204T183208Z-agg-single-vllm" / "data" / "fingerprints" / "agg.json"

MI355X: dict[str, Any] = {
    "schema_version": 1,
    "accelerator": "amd",
    "amd": {
        "amdgpu_driver": "6.12.12",
        "rocm_version": "7.0.1",
        "gpus": ["AMD Instinct MI355X"] * 8,
        "gfx": ["gfx950"],
        "runtime": {"marketing_names": ["AMD Instinct MI355X"] * 8, "gfx": ["gfx950"]},
    },
    "nvidia": None,
    "probes": {
        "amd-smi": "ok",
        "amd-smi static": "ok",
        "amdgpu_module": "ok",
        "rocminfo": "ok",
        "rocm-smi": "absent",
        "nvidia-smi": "absent",
    },
}


def _with(path: list[str], value: Any) -> dict[str, Any]:
    found = copy.deepcopy(MI355X)
    target = found
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return found


_DELETE = object()


def test_every_probe_agreeing_on_an_mi355x_is_an_mi355x() -> None:
    assert hardware_label(MI355X) == "MI355X"
    assert hardware_label(_with(["amd", "gpus"], ["AMD Instinct MI355X OAM"])) == "MI355X"  # rocm-smi's form


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param(["amd", "gpus"], ["AMD Instinct MI300X (not an MI355X)"], id="a-sentence-naming-it"),
        pytest.param(["amd", "gpus"], ["https://example.invalid/mi355x"], id="a-url"),
        pytest.param(["amd", "gpus"], ["MI300X\0MI355X"], id="a-nul"),
        pytest.param(["amd", "gpus"], ["AMD Instinct M\u0131355x"], id="dotless-i"),
        pytest.param(["amd", "gpus"], ["amd instinct mi355x"], id="lower-case"),
        pytest.param(["amd", "gpus"], {"0": "AMD Instinct MI355X"}, id="gpus-as-a-dict"),
        pytest.param(["amd", "gpus"], "AMD Instinct MI355X", id="gpus-as-a-string"),
        pytest.param(["amd", "gpus"], ["AMD Instinct MI355X", "AMD Instinct MI300X"], id="two-products"),
        pytest.param(["probes", "amd-smi static"], "absent", id="no-management-tool"),
        pytest.param(["probes", "amdgpu_module"], "absent", id="no-amdgpu-driver"),
        pytest.param(["amd", "amdgpu_driver"], _DELETE, id="no-amdgpu-version"),
        pytest.param(["probes", "rocminfo"], "error: exit 1", id="no-rocm-runtime"),
        pytest.param(["amd", "runtime"], _DELETE, id="runtime-missing"),
        pytest.param(["amd", "runtime", "gfx"], ["gfx942"], id="runtime-gfx-of-an-mi300x"),
        pytest.param(["amd", "gfx"], ["gfx942"], id="tool-gfx-of-an-mi300x"),
        pytest.param(
            ["amd", "runtime", "marketing_names"], ["AMD Instinct MI300X"], id="runtime-says-mi300x"
        ),
        pytest.param(["accelerator"], "nvidia", id="accelerator-contradicts"),
        pytest.param(["accelerator"], None, id="accelerator-none-with-gpus"),
        pytest.param(["nvidia"], {"gpus": [{"name": "NVIDIA H200"}]}, id="both-vendors"),
    ],
)
def test_a_contradiction_or_absent_probe_is_unknown(path: list[str], value: Any) -> None:
    label = hardware_label(_with(path, value))
    assert label.startswith("unknown (") and label.endswith("), not MI355X"), label


def test_the_issues_two_core_xeon_whose_own_probes_say_absent_is_unknown() -> None:
    forged = {
        "accelerator": "amd",
        "amd": {"gpus": ["AMD Instinct MI355X"]},
        "cpu": {"count": 2, "model": "Intel(R) Xeon(R) Processor"},
        "probes": {
            "amd-smi": "absent",
            "rocm-smi": "absent",
            "amdgpu_module": "absent",
            "rocminfo": "absent",
        },
    }
    assert hardware_label(forged).startswith("unknown (")


def test_the_committed_h200_fingerprint_keeps_its_label() -> None:
    assert hardware_label(json.loads(H200.read_text())) == "H200 (NVIDIA), not MI355X"


def test_an_nvidia_name_is_matched_exactly() -> None:
    h200 = json.loads(H200.read_text())
    h200["nvidia"]["gpus"][0]["name"] = "NVIDIA H200 (really an MI355X)"
    assert hardware_label(h200).startswith("unknown (")
    h200["nvidia"]["gpus"] = {"0": {"name": "NVIDIA H200"}}
    assert hardware_label(h200).startswith("unknown (")


def test_one_role_unknown_makes_the_runs_platform_unknown() -> None:
    atom = get_engine("atom")
    assert atom.platform_of({"prefill": MI355X, "decode": MI355X}) == "MI355X"
    label = atom.platform_of({"prefill": MI355X, "decode": _with(["probes", "rocminfo"], "absent")})
    assert label.startswith("unknown (")


@pytest.mark.parametrize(
    "text",
    [
        '{"accelerator": "nvidia", "accelerator": "amd"}',
        '{"accelerator": "amd", "cpu": {"memory_gib": NaN}}',
        '{"accelerator": "amd", "cpu": {"memory_gib": 1e999}}',
        '["not", "an", "object"]',
    ],
    ids=["duplicate-key", "nan", "overflow", "not-an-object"],
)
def test_a_fingerprint_the_strict_loader_refuses_is_unreadable(tmp_path: Path, text: str) -> None:
    (tmp_path / "fingerprints").mkdir()
    (tmp_path / "fingerprints" / "decode.json").write_text(text)
    found, source = _fingerprints(tmp_path)
    assert source == "saved by the run's jobs"
    assert list(found["decode"]) == ["error"] and found["decode"]["error"].startswith("unreadable: ")
    assert get_engine("atom").platform_of(found).startswith("unknown")


def test_collect_keeps_a_duplicate_key_as_the_text_it_was(vllm_cpu_run: Path, tmp_path: Path) -> None:  # noqa: F811
    """A lenient parse at collect merged the duplicate (the last value won) and wrote a clean document into data/."""
    decode = vllm_cpu_run / "fingerprints" / "decode.json"
    text = decode.read_text()
    decode.write_text(text.replace('"accelerator"', '"accelerator": "amd", "accelerator"', 1))
    out, summary = collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)
    assert summary["fingerprint"]["decode"]["error"].startswith("unreadable: ")
    assert (
        '"accelerator": "amd", "accelerator"' in (out / "data" / "fingerprints" / "decode.json").read_text()
    )
