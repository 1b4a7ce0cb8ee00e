"""The evidence committed under evidence/ verifies, and the README's result table is what it generates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evidence_helpers import REPO

from atomdyn_launchers.evidence import results
from atomdyn_launchers.evidence.summary import SCHEMA_VERSION
from atomdyn_launchers.evidence.verify import verify_evidence

EVIDENCE = REPO / "evidence"
COLLECTED = sorted(p.parent for p in EVIDENCE.glob("*/summary.json"))
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


def test_readme_table_is_generated_from_the_evidence() -> None:
    summaries, skipped = results.load_summaries(EVIDENCE)
    assert {s["_dir"] for s in summaries} == {p.name for p in CURRENT}
    assert len(skipped) == len(COLLECTED) - len(CURRENT)
    readme = (REPO / "README.md").read_text()
    begin, end = readme.index(results.GLANCE_BEGIN), readme.index(results.GLANCE_END)
    shown = readme[begin + len(results.GLANCE_BEGIN) + 1 : end]
    assert shown == results.glance_table(summaries, "evidence"), "run `invoke evidence.report`"
