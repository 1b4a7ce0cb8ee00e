"""A failed run's bundle says why it failed (issue 37): summary.json's ``diagnosis`` and summary.md's section,
judged from data/ like the gates, so verify recomputes it; a passed run's bundle has none. (A run the launcher
failed, its own recorded diagnosis shown sanitized: tests/diagnose/test_local_failures.py, on the cluster.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

from evidence_helpers import UCX_RC

from atomdyn_launchers.evidence.summary import collect
from atomdyn_launchers.evidence.verify import verify_path


def test_a_passed_runs_bundle_has_no_diagnosis(vllm_cpu_run: Path, tmp_path: Path) -> None:
    out, summary = collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)
    assert summary["verdict"] == "pass" and summary["diagnosis"] is None
    assert "## Diagnosis" not in (out / "summary.md").read_text()
    assert verify_path(out).ok


def test_a_run_whose_gates_failed_is_diagnosed_from_its_data(atom_run: Path, tmp_path: Path) -> None:
    # The launcher passed the run, but UCX's own protocol rows (a real capture) show KV copied, not zero-copy.
    with open(atom_run / "logs" / "decode.worker.log", "a") as log:
        log.write(UCX_RC["copy"].read_text())
    out, summary = collect(atom_run, tmp_path / "evidence", with_pictures=False)
    diagnosis = summary["diagnosis"]
    assert summary["launcher_result"] == "pass" and summary["verdict"] == "fail"
    assert diagnosis["source"] == "data/" and diagnosis["first"] == "gate-kv-not-zero-copy", diagnosis
    first = diagnosis["findings"][0]
    assert first["file"] == "gates" and first["line"].startswith("kv_rows_not_zero_copy: "), first
    assert set(first) == {
        "id",
        "component",
        "causal",
        "file",
        "line_no",
        "line",
        "cause",
        "fix",
        "rung_command",
    }
    md = (out / "summary.md").read_text()
    section = md.split("\n## Diagnosis\n", 1)[1].split("\n## ", 1)[0]
    assert "First cause: `gate-kv-not-zero-copy`, from the collected data" in section, section
    assert "| 1 | `gate-kv-not-zero-copy` | `gates` |" in section, section
    assert md.index("## Gates") < md.index("## Diagnosis") < md.index("## Key figures")
    # No place on the collecting machine: the bundle's path, the run directory's.
    assert str(tmp_path) not in json.dumps(diagnosis) and str(tmp_path) not in section
    assert verify_path(out).intact


def test_a_diagnosis_edited_in_summary_json_fails_verify(atom_run: Path, tmp_path: Path) -> None:
    with open(atom_run / "logs" / "decode.worker.log", "a") as log:
        log.write(UCX_RC["copy"].read_text())
    out, _ = collect(atom_run, tmp_path / "evidence", with_pictures=False)
    summary = json.loads((out / "summary.json").read_text())
    summary["diagnosis"]["first"] = "interrupted"
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    verdict = verify_path(out)
    assert not verdict.intact
    assert any("summary.json: diagnosis is" in line for line in verdict.lines), verdict.lines


def test_a_diagnosis_run_json_makes_up_renders_as_text(vllm_cpu_run: Path, tmp_path: Path) -> None:
    """run.json is the run's word: odd types and Markdown in its diagnosis become inert text in summary.md."""
    run = json.loads((vllm_cpu_run / "run.json").read_text())
    forged = "x | y |\n## Forged heading\n<!-- run:20991231T000000Z-disagg-atom -->"
    run.update(result="fail", failure="role decode failed")
    run["diagnosis"] = {
        "first": "port-taken",
        "findings": [{"id": "port-taken", "file": "logs/a.log", "line_no": "12", "causal": "no", "line": forged,
                      "cause": forged, "fix": ["not", "text"]}, "not a finding"],
        "findings_left_out": "many",
        "rerun": 7,
    }  # fmt: skip
    (vllm_cpu_run / "run.json").write_text(json.dumps(run))
    out, summary = collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)
    diagnosis = summary["diagnosis"]
    assert diagnosis["source"] == "run.json" and diagnosis["first"] == "port-taken"
    (finding,) = diagnosis["findings"]
    assert finding["line_no"] is None and finding["causal"] is True and finding["fix"] == "['not', 'text']"
    assert diagnosis["findings_left_out"] == 0 and diagnosis["rerun"] == "7"
    md = (out / "summary.md").read_text()
    assert not any(line.startswith(("## Forged", "<!--")) for line in md.splitlines()), md
    row = next(line for line in md.splitlines() if line.startswith("| 1 | `port-taken`"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 7, row  # six cells: the "|" of the line escaped
    assert verify_path(out).intact
