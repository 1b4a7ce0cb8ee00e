"""The platform label needs the workers' logs to agree (issue 36, item 2): the vLLM platform each worker logged
(ROCm for MI355X, CUDA for H200, CPU for the rehearsal) and the model it loaded (the run's model profile). An
absent probe or a contradiction gives "unknown (...)" naming the probe, which the provenance gate fails.

The lines are real: the H200 runs' workers (evidence/20261204T183208Z-agg-single-vllm and
20261204T183531Z-disagg-vllm, collected with these lines kept), a CPU rehearsal worker
(fixtures/vllm-cpu-engine-lines); ATOM's plugin line is vLLM's format string with ATOM's plugin name
(evidence_helpers.atom_platform_lines).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from evidence_helpers import (  # noqa: F401  (atom_run, vllm_cpu_run: fixtures)
    FIXTURES,
    H200_FINGERPRINT,
    H200_LABEL,
    REPO,
    atom_platform_lines,
    atom_run,
    h200_cuda_attention_line,
    vllm_cpu_run,
)

from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.hardware import PROBE_NEEDLES, model_claim, read_worker_probes
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.evidence.summary import CollectError, collect, judged_summary, run_platform

H200_AGG = REPO / "evidence" / "20261204T183208Z-agg-single-vllm"
H200_DISAGG = REPO / "evidence" / "20261204T183531Z-disagg-vllm"
CPU_LINES = FIXTURES / "vllm-cpu-engine-lines" / "agg.worker.log"
CPU_LABEL = "rehearsal (CPU, vLLM, NIXL over TCP)"


def _h200_run(tmp_path: Path, bundle: Path = H200_AGG) -> Path:
    """The H200 run's collected data as a run directory."""
    run = tmp_path / "runs" / bundle.name
    shutil.copytree(bundle / "data", run)
    return run


def _label(run: Path) -> str:
    return run_platform(run, collect_signals(run))[0]


def _edit(path: Path, keep: object = None, add: list[str] | None = None) -> None:
    lines = path.read_text().splitlines()
    if callable(keep):
        lines = [line for line in lines if keep(line)]
    path.write_text("\n".join([*lines, *(add or [])]) + "\n")


def _without_probe_lines(line: str) -> bool:
    return not any(needle in line for needle in PROBE_NEEDLES)


@pytest.mark.parametrize("bundle", [H200_AGG, H200_DISAGG], ids=["agg", "disagg"])
def test_the_h200_bundles_label_h200_from_their_workers_logs(bundle: Path) -> None:
    summary, signals = judged_summary(bundle / "data", bundle.name)
    assert summary["platform"] == H200_LABEL
    probes = signals.get("workers.engine_probes")
    assert probes == {
        role: {
            "platforms": ["cuda", "gpu"],
            "models": [["/cluster/path-4/tiny-qwen3-bf16", "atomdyn/tiny-qwen3"]],
        }
        for role in (["agg"] if bundle is H200_AGG else ["decode", "prefill"])
    }


def test_an_h200_run_whose_worker_logged_no_platform_is_unknown_and_fails_provenance(tmp_path: Path) -> None:
    run = _h200_run(tmp_path)
    _edit(run / "logs" / "agg.worker.log", keep=_without_probe_lines)
    label = _label(run)
    assert label == "unknown (the agg worker's log: no vLLM platform logged), not MI355X"
    with pytest.raises(CollectError, match="no vLLM platform logged"):  # run.json's H200 is contradicted
        collect(run, tmp_path / "evidence", with_pictures=False)
    record = json.loads((run / "run.json").read_text())
    record["platform"] = label  # what the launcher now writes for such a run
    (run / "run.json").write_text(json.dumps(record))
    _, summary = collect(run, tmp_path / "evidence", with_pictures=False)
    provenance = next(g for g in summary["gates"] if g["id"] == "provenance")
    assert summary["platform"] == label and provenance["verdict"] == "fail"


def test_an_h200_worker_without_cudas_own_line_is_unknown(tmp_path: Path) -> None:
    """device_config=cuda is what vLLM's CUDA and ROCm platforms both print: it alone names neither."""
    run = _h200_run(tmp_path)
    _edit(run / "logs" / "agg.worker.log", keep=lambda line: "attention backend out of" not in line)
    assert _label(run) == (
        "unknown (the agg worker's log: vLLM logged a GPU device but neither CUDA's nor ROCm's platform), "
        "not MI355X"
    )


def test_an_h200_worker_that_also_logged_rocm_is_a_contradiction(tmp_path: Path) -> None:
    run = _h200_run(tmp_path)
    _edit(run / "logs" / "agg.worker.log", add=atom_platform_lines()[:1])
    assert (
        _label(run) == "unknown (the agg worker's log: vLLM logged the platforms cuda, gpu, rocm), not MI355X"
    )


def test_a_worker_that_loaded_another_model_than_the_profile_is_unknown(tmp_path: Path) -> None:
    run = _h200_run(tmp_path)
    record = json.loads((run / "run.json").read_text())
    record["model_profile"] = "smollm2-135m-instruct"
    (run / "run.json").write_text(json.dumps(record))
    assert _label(run) == (
        "unknown (the agg worker served 'atomdyn/tiny-qwen3', not the profile's "
        "'atomdyn/smollm2-135m-instruct'), not MI355X"
    )
    record["model_profile"] = "a-profile-nobody-has"
    (run / "run.json").write_text(json.dumps(record))
    assert "the run's model profile is not known" in _label(run)


def test_the_atom_run_is_mi355x_only_with_its_workers_rocm_platform_and_model(
    atom_run: Path,  # noqa: F811
) -> None:
    assert _label(atom_run) == "MI355X"
    decode = atom_run / "logs" / "decode.worker.log"
    _edit(decode, keep=lambda line: "Platform plugin atom" not in line, add=[h200_cuda_attention_line()])
    assert _label(atom_run) == "unknown (the decode worker's vLLM platform is cuda, not rocm), not MI355X"


def test_an_mi355x_worker_that_loaded_another_directory_is_unknown(atom_run: Path) -> None:  # noqa: F811
    record = json.loads((atom_run / "run.json").read_text())
    record["config"]["MODEL_PATH"] = (
        "/lustre/orgs/acme-ml/models/Qwen3-8B"  # the run said; the workers loaded
    )
    (atom_run / "run.json").write_text(json.dumps(record))
    assert _label(atom_run) == (
        "unknown (the decode worker loaded '/lustre/orgs/acme-ml/models/Qwen3.5-397B-A17B-MXFP4', not model "
        "profile qwen3.5-397b-mxfp4's), not MI355X"
    )


def test_the_vllm_engine_on_mi355x_nodes_is_unknown(atom_run: Path) -> None:  # noqa: F811
    """The vllm engine runs vLLM's CUDA platform: AMD GPUs under it are no claim it can make."""
    record = json.loads((atom_run / "run.json").read_text())
    record["engine_profile"] = "vllm"
    (atom_run / "run.json").write_text(json.dumps(record))
    assert _label(atom_run) == "unknown (the engine runs vLLM's cuda platform, not rocm), not MI355X"


def test_the_cpu_rehearsal_is_cpu_from_its_workers_real_lines(vllm_cpu_run: Path) -> None:  # noqa: F811
    record = json.loads((vllm_cpu_run / "run.json").read_text())
    record["model_profile"] = "smollm2-135m-instruct"  # the model the fixture's real lines loaded
    (vllm_cpu_run / "run.json").write_text(json.dumps(record))
    for role in ("prefill", "decode"):
        _edit(vllm_cpu_run / "logs" / f"{role}.{role}.log", add=CPU_LINES.read_text().splitlines())
    assert _label(vllm_cpu_run) == CPU_LABEL
    _edit(vllm_cpu_run / "logs" / "decode.decode.log", add=[h200_cuda_attention_line()])
    assert _label(vllm_cpu_run) == (
        "unknown (the decode worker's log: vLLM logged the platforms cpu, cuda), not MI355X"
    )


def test_a_rehearsal_collected_before_the_lines_were_kept_stays_a_rehearsal(vllm_cpu_run: Path) -> None:  # noqa: F811
    """The committed CPU rehearsal bundles' data/ holds no such line (collect kept only the gates' lines): a
    rehearsal claims no hardware, so its label stays; any hardware label needs the lines."""
    assert _label(vllm_cpu_run) == CPU_LABEL


def test_the_launcher_labels_from_the_workers_logs_as_the_evidence_does(tmp_path: Path) -> None:
    """What the record stage writes into run.json: the fingerprints and the workers' logs (read_worker_probes)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(H200_AGG / "data" / "logs" / "agg.worker.log", logs / "agg.worker.log")
    fingerprint = json.loads(H200_FINGERPRINT.read_text())
    vllm = get_engine("vllm")
    claim = model_claim("tiny-qwen3-bf16", "/cluster/path-4/tiny-qwen3-bf16")
    assert vllm.platform_of({"agg": fingerprint}, read_worker_probes(logs, ["agg"]), claim) == H200_LABEL
    (logs / "agg.worker.log").unlink()
    assert vllm.platform_of({"agg": fingerprint}, read_worker_probes(logs, ["agg"]), claim) == (
        "unknown (the agg worker's log: no vLLM platform logged), not MI355X"
    )
    assert vllm.platform_of({"agg": fingerprint}, {}, claim) == (
        "unknown (the agg worker's log was not read for its vLLM platform), not MI355X"
    )
