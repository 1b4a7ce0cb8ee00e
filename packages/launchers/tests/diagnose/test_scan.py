"""The diagnosis of a run directory or a log: ranking, the fallback when nothing is known, bounded reading, the
invoke task. The log lines are upstream format strings with their placeholders filled (upstream_lines.py) or
lines of real runs (the committed fixtures and evidence); the project's own lines are shown on the local cluster
(tests/run/test_faults_quick.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from invoke.context import Context
from invoke.exceptions import Exit
from upstream_lines import line_of

from atomdyn_launchers.diagnose.scan import NO_SIGNATURE, diagnose_log, diagnose_run, rerun_command, safely
from atomdyn_launchers.diagnose.tasks import diagnose

ROOT = Path(__file__).resolve().parents[4]
H200_LOG = ROOT / "evidence" / "h200-nixl-kv-bench" / "run.log"
MOCKER_LOG = (
    Path(__file__).resolve().parents[1]
    / "evidence/fixtures/mocker-disagg/20261130T004758Z-disagg-mocker/logs/decode.worker.log"
)
CAPTURED = Path(__file__).resolve().parent / "fixtures" / "captured.txt"
VLLM_RUN = (
    Path(__file__).resolve().parents[1] / "evidence/fixtures/vllm-cpu-disagg/20261201T124322Z-disagg-vllm-cpu"
)


def _run_dir(tmp_path: Path, logs: dict[str, list[str]], run: dict[str, object] | None = None) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    for name, lines in logs.items():
        (run_dir / "logs" / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    if run is not None:
        (run_dir / "run.json").write_text(json.dumps(run), encoding="utf-8")
    return run_dir


def test_the_cause_ranks_before_the_symptoms_that_follow_it(tmp_path: Path) -> None:
    """vLLM's engine core dies of a KV cache too small: the symptom lines come first in the log, the cause
    (the ValueError) in another; the cause is named first, with its file and line number."""
    run_dir = _run_dir(tmp_path, {
        "agg.slurm.out": [line_of("vllm-engine-core-init-failed")],
        "agg.worker.log": ["", line_of("vllm-engine-core-failed"), "ValueError: " + line_of("vllm-kv-cache-too-small")],
    }, {"kind": "agg-single", "engine_profile": "vllm-cpu", "result": "fail"})  # fmt: skip
    found = diagnose_run(run_dir)
    ids = [f.entry.id for f in found.findings]
    assert ids[0] == "vllm-kv-cache-too-small", ids
    assert set(ids[1:]) == {"vllm-engine-core-init-failed", "vllm-engine-core-failed"}
    first = found.findings[0]
    assert (first.file, first.line_no) == ("logs/agg.worker.log", 3)
    text = found.text()
    assert (
        "1. vllm-kv-cache-too-small (vLLM)" in text and "logs/agg.worker.log:3: ValueError: To serve" in text
    )
    assert "fix: Raise --gpu-memory-utilization" in text
    assert text.rstrip().endswith("rerun: invoke agg.run --nodes 1 --engine vllm-cpu")


def _captured(entry: str) -> str:
    return next(
        row.split("\t", 1)[1] for row in CAPTURED.read_text().splitlines() if row.startswith(entry + "\t")
    )


def test_a_role_that_outlived_a_recorded_run_is_no_dead_launcher(tmp_path: Path) -> None:
    """The fault suite's slurmd killed: the stop could not reach the node, the launcher recorded the hard cancel
    and removed its key, and the role left behind logged the launcher gone (both lines from that real run). The
    launcher was not gone: the headline comes first, the role's line is a symptom; without run.json it is the
    cause."""
    logs = {"prefill.register.log": [_captured("launcher-gone")]}
    failure = "jobs did not stop cleanly: prefill (CANCELLED, exit 0:0)"
    recorded = diagnose_run(
        _run_dir(tmp_path / "a", logs, {"kind": "disagg", "result": "fail", "failure": failure})
    )
    assert [f.entry.id for f in recorded.findings] == ["jobs-not-stopped-cleanly", "launcher-gone"], (
        recorded.text()
    )
    assert recorded.to_json()["findings"][1]["causal"] is False
    assert "launcher-gone (launcher, a symptom)" in recorded.text()
    unrecorded = diagnose_run(_run_dir(tmp_path / "b", logs))
    assert unrecorded.first is not None and unrecorded.first.entry.id == "launcher-gone"


def test_ucx_refusing_a_device_comes_before_nixl_failing_to_connect(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, {"decode.decode.log": [
        line_of("nixl-error-status"), line_of("nixl-connect-failed"), line_of("ucx-network-device-not-available"),
    ]}, {"kind": "disagg", "engine_profile": "atom", "probe": {"kind": "nixl-pair"}})  # fmt: skip
    found = diagnose_run(run_dir).to_json()
    assert [f["id"] for f in found["findings"]] == [
        "ucx-network-device-not-available", "nixl-connect-failed", "nixl-error-status"]  # fmt: skip
    assert found["first"] == "ucx-network-device-not-available" and found["rerun"] == "invoke nixl.cross-node"
    assert (
        found["findings"][0]["line_no"] == 3
        and found["findings"][0]["rung_command"] == "invoke nixl.cross-node"
    )


def test_job_states_and_failed_gates_are_signatures_too(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, {}, {"kind": "disagg", "jobs": [
        {"role": "prefill", "job_id": 7, "state": "COMPLETED", "exit_code": "0:0"},
        {"role": "decode", "job_id": 8, "state": "TIMEOUT", "exit_code": "0:1"}]})  # fmt: skip
    found = diagnose_run(run_dir, failed_gates=[("kv_forbidden_transport_rows", "2 rows over tcp")])
    assert [f.entry.id for f in found.findings] == ["slurm-time-limit", "gate-kv-forbidden-transport"]
    assert found.findings[0].line == "job 8 (decode): TIMEOUT, exit 0:1"
    assert found.findings[1].location == "gates"


def test_nothing_known_says_so_and_shows_the_first_error_lines_of_each_log(tmp_path: Path) -> None:
    """A real mock-engine worker log: no signature, and its first error lines shown as they are."""
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    shutil.copy(MOCKER_LOG, run_dir / "logs" / "decode.worker.log")
    found = diagnose_run(run_dir)
    assert not found.known and found.findings == []
    text = found.text()
    assert NO_SIGNATURE in text
    shown = found.error_lines["logs/decode.worker.log"]
    assert shown[0].startswith("56: ") and "Failed to unregister EventPublisher" in shown[0]
    assert found.to_json()["error_lines"] == found.error_lines


def test_a_passed_runs_warm_up_404s_are_a_symptom_and_counts_of_zero_failures_no_error() -> None:
    """A real vLLM-on-CPU P/D run that passed: the frontend's 404s before the model registered are known, as a
    symptom; vLLM's "Num failed transfers=0" is not an error line."""
    found = diagnose_run(VLLM_RUN)
    assert [f.entry.id for f in found.findings] == ["dynamo-model-not-found"]
    assert not found.findings[0].entry.causal and found.findings[0].location == "logs/decode.frontend.log:3"
    assert not any("Num failed transfers=0" in line for lines in found.error_lines.values() for line in lines)
    assert found.files_read == 7


@pytest.mark.parametrize(
    "entry,line",
    [
        tuple(row.split("\t", 1))
        for row in CAPTURED.read_text().splitlines()
        if row and not row.startswith("#")
    ],
)
def test_a_line_captured_from_a_real_run_is_diagnosed_as_its_entry(
    tmp_path: Path, entry: str, line: str
) -> None:
    log = tmp_path / "captured.log"
    log.write_text(line + "\n", encoding="utf-8")
    found = diagnose_log(log)
    assert found.first is not None and found.first.entry.id == entry, found.text()
    assert (
        rerun_command(json.loads((VLLM_RUN / "run.json").read_text()))
        == "invoke disagg.run --engine vllm-cpu"
    )


def test_a_real_h200_log_is_diagnosed_with_the_same_line_numbers_whatever_the_block() -> None:
    whole = diagnose_log(H200_LOG)
    small = diagnose_log(H200_LOG, block=128)  # blocks end inside lines all through the file
    assert whole.first is not None and whole.first.entry.id == "nixl-error-status"
    assert whole.first.line_no == 38 and "nixlNotFoundError: NIXL_ERR_NOT_FOUND" in whole.first.line
    assert whole.first.count == 6
    assert small.first is not None and (small.first.line_no, small.first.count) == (38, 6)
    assert whole.rerun == "invoke nixl.cross-node"
    cut = diagnose_log(H200_LOG, block=32)  # every line longer than a block: cut, never held whole
    assert cut.files_read == 1 and all(len(f.line) <= 32 for f in cut.findings)


def test_links_in_the_logs_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text(line_of("ucx-no-usable-transports") + "\n", encoding="utf-8")
    run_dir = _run_dir(tmp_path, {"decode.decode.log": []})
    (run_dir / "logs" / "linked.log").symlink_to(outside)
    found = diagnose_run(run_dir)
    assert not found.known and found.files_read == 1


def test_a_diagnosis_never_fails_its_caller(tmp_path: Path) -> None:
    assert safely(tmp_path / "missing")["known"] is False  # type: ignore[index]
    run_dir = _run_dir(tmp_path, {"a.log": [line_of("vllm-no-kv-cache-memory")] * 30})
    found = safely(run_dir, run={"failure": None, "jobs": "not a list"})
    assert (
        found is not None
        and found["first"] == "vllm-no-kv-cache-memory"
        and found["findings"][0]["count"] == 30
    )


def test_the_task_prints_text_or_json_and_refuses_what_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "worker.log"
    shutil.copy(H200_LOG, log)
    diagnose(Context(), str(log), json=True)
    assert json.loads(capsys.readouterr().out)["first"] == "nixl-error-status"
    diagnose(Context(), str(MOCKER_LOG))
    assert NO_SIGNATURE in capsys.readouterr().out
    diagnose(Context(), str(VLLM_RUN))
    assert "1. dynamo-model-not-found (Dynamo, a symptom)" in capsys.readouterr().out
    for bad, log_flag in ((tmp_path / "nothing", False), (tmp_path, True)):
        with pytest.raises(Exit) as raised:
            diagnose(Context(), str(bad), log=log_flag)
        assert raised.value.code == 2


def _captured(entry: str) -> str:
    rows = (
        row.split("\t", 1) for row in CAPTURED.read_text().splitlines() if row and not row.startswith("#")
    )
    return next(line for name, line in rows if name == entry)


def test_among_equals_the_earlier_line_comes_first_across_logs(tmp_path: Path) -> None:
    """Two causes of one weight in two logs, the later one in the log read first: the lines' own times
    (NIXL's glog prefix, captured from the local cluster's probe) order them; UCX's own comes first anyway."""
    later, earlier = _captured("nixl-ucx-endpoint-create-failed"), _captured("nixl-ucx-unreachable")
    run_dir = _run_dir(tmp_path, {"a.log": [later], "b.log": [earlier]})
    assert [f.entry.id for f in diagnose_run(run_dir).findings] == [
        "nixl-ucx-unreachable", "nixl-ucx-endpoint-create-failed"]  # fmt: skip
    (run_dir / "logs" / "c.log").write_text(_captured("ucx-no-transport-to-peer") + "\n")
    found = diagnose_run(run_dir).findings
    assert found[0].entry.id == "ucx-no-transport-to-peer" and found[0].at is not None
    assert found[0].at < found[1].at  # type: ignore[operator]  # UCX's epoch and NIXL's glog time agree


@pytest.mark.parametrize(
    "log,ranked",
    [
        ("vllm-kv-cache-too-small.log", ["vllm-kv-cache-too-small", "vllm-engine-core-failed",
                                         "vllm-engine-core-init-failed"]),
        ("ucx-tls-unknown.log", ["ucx-transport-not-available"]),
        ("ucx-net-device-absent.log", ["ucx-network-device-not-available", "ucx-no-transport-to-peer",
                                       "nixl-ucx-unreachable", "nixl-ucx-endpoint-create-failed"]),
        ("ucx-no-usable-transport.log", ["ucx-network-device-not-available", "ucx-transport-not-available",
                                         "ucx-no-usable-transports", "nixl-ucx-context-failed",
                                         "nixl-backend-creation-failed"]),
    ],
)  # fmt: skip
def test_real_failures_are_diagnosed_cause_first(log: str, ranked: list[str]) -> None:
    """The rehearsal's own vLLM with a KV cache too small for the model's length: the cause before the engine
    core's symptoms (which come first in the log). Its own NIXL and UCX, started with a misspelt transport, an
    absent device, or both: UCX's own refusal first, in the order UCX printed it, then NIXL's consequences, the
    NIXL_ERR status last."""
    found = diagnose_log(CAPTURED.parent / log)
    ids = [f.entry.id for f in found.findings]
    assert ids[: len(ranked)] == ranked, found.text()
    assert ids[-1] == "nixl-error-status" or len(ids) == len(ranked)


def test_an_evidence_bundle_is_read_through_its_data() -> None:
    """A committed bundle of a real rehearsal run: its data/ is what is read (the run passed: nothing known)."""
    bundle = ROOT / "evidence" / "20261201T123510Z-disagg-mocker"
    found = diagnose_run(bundle)
    assert found.target.endswith("20261201T123510Z-disagg-mocker/data") and found.files_read >= 1
    assert found.rerun == "invoke disagg.run --engine mocker"
