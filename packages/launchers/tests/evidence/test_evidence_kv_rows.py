"""The zero-copy gate judges the rows UCX takes for KV-sized messages (issue 34, the zero-copy suspicion).

At UCX b56982d8 rc_verbs copies messages up to its bounce buffers' size (UCX_IB_SEG_SIZE, 8192 by default,
src/uct/ib/base/ib_iface.c) through them, so a correct run's protocol table has copy rows up to 8 KiB (put/bcopy
"copy-in", get/bcopy "copy-out"). A fixed 4 KiB floor counted those rows although no KV block of the model is that
small. The gate now takes the smallest KV message from the run's model profile (one block of one layer on one
rank: 32 KiB for Qwen3-8B in BF16) and judges the rows whose size range reaches it. The tables are in UCX's own
format (ucp_proto_select_elem_info, src/ucp/proto/proto_debug.c; rendered by evidence_helpers.ucx_table, which
draws the captured TCP tables byte for byte)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evidence_helpers import RC0, UCX_RC, UCX_TCP

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.evidence import logscan
from atomdyn_launchers.evidence.expectations import expectations_for
from atomdyn_launchers.evidence.gates import evaluate, kv_message_min
from atomdyn_launchers.evidence.signals import collect_signals

GET = "inter-node remote memory read by ucp_get*(multi) into host memory from host"
PUT = "inter-node remote memory write by ucp_put* from host memory to host"


def _with(run: Path, table: str, model: str) -> Path:
    """The atom run with one of the rc tables in its decode worker's log, recorded as a run of ``model``."""
    record = run / "run.json"
    data = json.loads(record.read_text())
    data["model_profile"] = model
    record.write_text(json.dumps(data))
    with open(run / "logs" / "decode.worker.log", "a") as out:
        out.write(UCX_RC[table].read_text())
    return run


def _zero_copy_gate(run: Path, expectations: GateExpectations) -> tuple[str, object]:
    signals = collect_signals(run)
    gate = next(r for r in evaluate(signals, expectations) if r.id == "kv_rows_not_zero_copy")
    return gate.verdict, signals.get("kv.rows_not_zero_copy")


EXPECTED = GateExpectations(kv_transport="rc", kv_zero_copy=True)


def test_the_smallest_kv_message_comes_from_the_model_profile() -> None:
    assert kv_message_min("qwen3-8b-bf16")[0] == 16 * 8 * 128 * 2 == 32 << 10
    # A profile without a KV shape (the large model's is not written down yet): the floor, said so.
    assert kv_message_min("qwen3.5-397b-mxfp4") == (
        4096,
        "no KV shape for model profile 'qwen3.5-397b-mxfp4': the 4096-byte floor",
    )
    # The CPU rehearsal's tiny model: 16 tokens x 2 heads x 32 x 2 B.
    assert kv_message_min("tiny-qwen3-bf16")[0] == 2048
    # No profile of that name (or none recorded): the 4 KiB floor, said so.
    assert kv_message_min("qwen3-8b") == (
        4096,
        "no KV shape for model profile 'qwen3-8b': the 4096-byte floor",
    )
    assert kv_message_min(None)[0] == logscan.KV_MESSAGE_MIN


def test_rc_bounce_buffer_copies_below_a_kv_block_pass(atom_run: Path) -> None:
    """A correct rc_verbs table: copy rows up to 8 KiB, zero-copy above; Qwen3-8B's KV moves zero-copy."""
    run = _with(atom_run, "bounce-buffers", "qwen3-8b-bf16")
    assert _zero_copy_gate(run, EXPECTED) == ("pass", [])
    signals = collect_signals(run)
    evaluate(signals, EXPECTED)
    assert signals.get("kv.message_min_bytes") == 32768
    assert "qwen3-8b-bf16: 16 tokens x 8 KV heads x 128 x 2 B" in str(signals.get("kv.message_min_source"))


def test_a_fixed_4k_floor_would_fail_the_same_correct_table(atom_run: Path) -> None:
    """What the gate did before for every run (and still does where the profile gives no KV shape): the copy
    rows reaching 8 KiB counted as KV rows."""
    run = _with(atom_run, "bounce-buffers", "qwen3-8b")
    verdict, rows = _zero_copy_gate(run, EXPECTED)
    assert verdict == "fail"
    assert rows == [f"{GET}: 0..8K | copy-out | {RC0}", f"{PUT}: 61..8K | copy-in | {RC0}"]


def test_kv_blocks_copied_through_bounce_buffers_fail_naming_the_row(atom_run: Path) -> None:
    """Bounce buffers raised to 64 KiB: Qwen3-8B's 32 KiB blocks are read by copy-out. The put table's 8 KiB
    copy row stays below a block."""
    run = _with(atom_run, "kv-copied", "qwen3-8b-bf16")
    verdict, rows = _zero_copy_gate(run, EXPECTED)
    assert verdict == "fail"
    assert rows == [f"{GET}: 0..64K | copy-out | {RC0}"]


@pytest.mark.parametrize(("model", "judged"), [("qwen3-8b-bf16", 1), ("tiny-qwen3-bf16", 1)])
def test_the_captured_tcp_tables_emulated_reads_are_kv_rows_for_any_model(
    atom_run: Path, model: str, judged: int
) -> None:
    """The real capture (UCX's TCP tables of NIXL transfers): reads by software emulation cover every size, so they
    are KV rows whatever the block size, and a run asking zero-copy of tcp fails on them."""
    record = atom_run / "run.json"
    data = json.loads(record.read_text())
    data["model_profile"] = model
    record.write_text(json.dumps(data))
    with open(atom_run / "logs" / "decode.worker.log", "a") as out:
        out.write(UCX_TCP.read_text())
    verdict, rows = _zero_copy_gate(atom_run, GateExpectations(kv_transport="tcp", kv_zero_copy=True))
    assert verdict == "fail"
    assert isinstance(rows, list) and len(rows) == judged and "software emulation" in rows[0]


def test_the_atom_engine_judges_its_runs_so() -> None:
    atom = expectations_for("atom")
    assert atom is not None and atom.kv_zero_copy and atom.kv_transport == "rc"
