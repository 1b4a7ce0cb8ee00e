"""The run record: Slurm exit codes and states read one way, and the gate expectations an engine declares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.kinds import KINDS
from atomdyn_launchers.contract.rundir import (
    FAILED_STATES,
    SCHEMA_VERSION,
    TERMINAL_STATES,
    JobRecord,
    RunDir,
    RunRecord,
    base_state,
    format_exit_code,
    parse_exit_code,
)


@pytest.mark.parametrize(
    ("text", "code"),
    [("0:0", (0, 0)), ("1:0", (1, 0)), ("0:15", (0, 15)), (" 2:9 ", (2, 9)), ("3", (3, 0)), (4, (4, 0)),
     ("", None), (None, None), ("x:0", None), ("1:", None), (True, None)],
)  # fmt: skip
def test_exit_codes_parse_as_slurm_writes_them(text: object, code: tuple[int, int] | None) -> None:
    assert parse_exit_code(text) == code
    if code is not None and isinstance(text, str) and ":" in text:
        assert format_exit_code(code) == text.strip()


def test_states() -> None:
    assert base_state("CANCELLED by 0") == "CANCELLED" and base_state("COMPLETED+") == "COMPLETED"
    assert base_state(None) == "" and base_state("  ") == ""
    assert FAILED_STATES < TERMINAL_STATES and "COMPLETED" not in FAILED_STATES


def _job(**over: object) -> JobRecord:
    raw: dict[str, object] = {"role": "decode", "job_id": 7, "node_requested": "n2", "node_ran": "n2",
                              "state": "COMPLETED", "exit_code": "0:0", "derived_exit_code": "0:0"}  # fmt: skip
    raw.update(over)
    return JobRecord.from_json(raw)


def test_a_job_ended_cleanly_only_with_every_sign_of_it() -> None:
    assert _job().ended_cleanly
    assert _job(derived_exit_code=None).ended_cleanly  # no step record: ExitCode alone
    assert not _job(derived_exit_code="2:0").ended_cleanly  # a failed step that ExitCode hides
    assert not _job(exit_code="1:0").ended_cleanly
    assert not _job(exit_code="garbage").ended_cleanly
    assert not _job(state="NODE_FAIL").ended_cleanly
    assert not _job(state="OUT_OF_MEMORY").ended_cleanly
    assert not _job(state=None).ended_cleanly
    assert not _job(node_ran=None).ended_cleanly
    assert _job(job_id="7").job_id is None  # wrong types are dropped, not trusted


ATOM = GateExpectations(
    nixl_transfers=True,
    external_prefix_hits=True,
    kv_transport="rc",
    forbidden_kv_transports=("tcp",),
    kv_zero_copy=True,
    dmabuf_registrations=True,
    nixl_backend="nixl_rocm",
    doctor_required=True,
)


def test_expectations_of_aggregated_runs_drop_the_kv_path() -> None:
    assert ATOM.for_kind("disagg") is ATOM
    for kind in KINDS:
        if kind != "disagg":
            assert ATOM.for_kind(kind) == GateExpectations()
    mocker = GateExpectations(pd_worker_split=True, router_prefix_hits=True)
    assert mocker.for_kind("agg-two") == GateExpectations(router_prefix_hits=True)
    with pytest.raises(ValueError, match="unknown run kind 'p-d'"):
        ATOM.for_kind("p-d")


def test_contradictory_expectations_are_refused() -> None:
    with pytest.raises(ValueError, match="both expected and forbidden"):
        GateExpectations(kv_transport="tcp", forbidden_kv_transports=("tcp",))
    with pytest.raises(ValueError, match="kv_zero_copy needs kv_transport"):
        GateExpectations(kv_zero_copy=True)
    with pytest.raises(AttributeError):
        ATOM.kv_transport = "tcp"  # type: ignore[misc]


def test_run_json_round_trips_through_the_record(tmp_path: Path) -> None:
    rundir = RunDir.create(tmp_path, "disagg", "mocker")
    job = JobRecord("prefill", 3, "node1", "node1", "COMPLETED", "0:0", "0:0")
    path = rundir.write_run(
        kind="disagg", engine="mocker", model="m", runtime="venv", platform="rehearsal (CPU, mock engine)",
        lock_digest="sha256:" + "0" * 64, config={"PREFILL_NODE": "node1"}, jobs=[job], placement_verified=True,
        result="pass", failure=None, extra={"requests_total": 8, "requests_ok": 8, "registrations": {"prefill": {}}},
    )  # fmt: skip
    raw = json.loads(path.read_text())
    assert raw["schema_version"] == SCHEMA_VERSION and raw["engine_profile"] == "mocker"
    assert raw["requests_total"] == 8 and raw["registrations"] == {"prefill": {}}
    record = RunRecord.from_json(raw)
    assert record.jobs == [job] and record.requests_ok == 8 and record.engine == "mocker"
    assert record.to_json() == raw


def test_a_damaged_run_json_reads_back_without_raising() -> None:
    record = RunRecord.from_json({"jobs": ["x"], "config": 3, "requests_total": True, "placement_verified": "yes",
                                  "kind": 5})  # fmt: skip
    assert record.jobs is None and record.config == {} and record.requests_total is None
    assert record.placement_verified is None and record.kind is None and record.schema_version is None
