"""The evidence committed under evidence/ verifies, and the README's result table is what it generates.

Only what git tracks is judged: a user's own run collected into a checkout (``invoke evidence.collect RUN
--evidence evidence``) is not the project's evidence until it is committed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from evidence_helpers import REPO

from atomdyn_launchers.evidence import results
from atomdyn_launchers.evidence.summary import SCHEMA_VERSION
from atomdyn_launchers.evidence.verify import verify_evidence

EVIDENCE = REPO / "evidence"


def committed(evidence: Path) -> list[Path]:
    """The evidence directories under ``evidence`` whose summary.json git tracks (every one outside a git
    checkout, as in an unpacked source archive)."""
    done = subprocess.run(
        ["git", "ls-files", "-z", "--", "*/summary.json"], cwd=evidence, capture_output=True, text=True
    )
    found = sorted(evidence.glob("*/summary.json"))
    if done.returncode != 0:
        return [p.parent for p in found]
    tracked = {(evidence / rel).resolve() for rel in done.stdout.split("\0") if rel}
    return [p.parent for p in found if p.resolve() in tracked]


COLLECTED = committed(EVIDENCE)
CURRENT = [
    p
    for p in COLLECTED
    if json.loads((p / "summary.json").read_text()).get("schema_version") == SCHEMA_VERSION
]


def test_runs_are_collected_in_the_current_format() -> None:
    assert CURRENT, "no evidence/ directory holds a current summary"


@pytest.mark.parametrize("evidence_dir", CURRENT, ids=[p.name for p in CURRENT])
def test_committed_evidence_verifies(evidence_dir: Path) -> None:
    verdict = verify_evidence(evidence_dir)
    assert verdict.intact and verdict.ok, verdict.text()
    summary = json.loads((evidence_dir / "summary.json").read_text())
    assert summary["lock_digest"].startswith("sha256:") and summary["platform"]


def test_only_committed_evidence_is_judged(tmp_path: Path) -> None:
    for name in ("20261201T000000Z-disagg-mocker", "20261202T000000Z-disagg-mocker"):
        (tmp_path / "evidence" / name).mkdir(parents=True)
        (tmp_path / "evidence" / name / "summary.json").write_text("{}")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "add", "evidence/20261201T000000Z-disagg-mocker"], cwd=tmp_path, check=True)
    assert [p.name for p in committed(tmp_path / "evidence")] == ["20261201T000000Z-disagg-mocker"]


def test_readme_table_is_generated_from_the_evidence() -> None:
    summaries, skipped = results.load_summaries(EVIDENCE, names={p.name for p in COLLECTED})
    assert {s["_dir"] for s in summaries} == {p.name for p in CURRENT}
    assert len(skipped) == len(COLLECTED) - len(CURRENT)
    readme = (REPO / "README.md").read_text()
    begin, end = readme.index(results.GLANCE_BEGIN), readme.index(results.GLANCE_END)
    shown = readme[begin + len(results.GLANCE_BEGIN) + 1 : end]
    assert shown == results.glance_table(summaries, "evidence"), "run `invoke evidence.report`"


def test_a_two_node_kind_run_on_one_host_is_not_called_two_node() -> None:
    """The H200 P/D run put both roles on one machine (two Slurm nodes of it): its roles' fingerprints name one
    host, so the table says so. The rehearsal's P/D run's roles saved two hosts' fingerprints; the mock run saved
    none (the collector's), so its kind's name stands."""
    names = {
        "20261204T183531Z-disagg-vllm",
        "20261202T201441Z-disagg-vllm-cpu",
        "20261201T123510Z-disagg-mocker",
    }
    summaries, _ = results.load_summaries(EVIDENCE, names)
    by_run = {s["run_id"]: s for s in summaries}
    assert results.role_hosts(by_run["20261204T183531Z-disagg-vllm"]) == {"host-3"}
    assert (
        results.capability_name(by_run["20261204T183531Z-disagg-vllm"])
        == "Disaggregated prefill/decode on one host"
    )
    assert results.role_hosts(by_run["20261202T201441Z-disagg-vllm-cpu"]) == {"host-1", "host-2"}
    assert (
        results.capability_name(by_run["20261202T201441Z-disagg-vllm-cpu"])
        == "Two-node disaggregated prefill/decode"
    )
    assert results.role_hosts(by_run["20261201T123510Z-disagg-mocker"]) is None
    assert (
        results.capability_name(by_run["20261201T123510Z-disagg-mocker"])
        == "Two-node disaggregated prefill/decode"
    )
