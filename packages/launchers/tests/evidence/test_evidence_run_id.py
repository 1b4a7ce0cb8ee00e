"""Run ids are plain names: a directory name, a link in summary.md and RESULTS.md, a cell of the README's table.

An id that could step out of the evidence root (``../x``), split a Markdown table (``x|y``) or a line (``a\\nb``,
a trailing newline) is refused wherever one is taken: from run.json (the directory's name is used instead) and
from the run directory's name (collect writes nothing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from evidence_helpers import MOCKER_RUN

from atomdyn_launchers.evidence.data import CollectError
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.evidence.summary import SAFE_RUN_ID, collect

PLAIN = ["20261130T004758Z-disagg-mocker", "20261201T140556Z-disagg-vllm-cpu", "run.2", "A_b-c"]
UNSAFE = [
    "x|y",
    "../x",
    "a/b",
    "a\nb",
    "20261130T004758Z-disagg-mocker\n",
    "a\r",
    ".hidden",
    "-x",
    "",
    "x y",
    "x]y(z)",
    "`x`",
    "r\u0661",  # an Arabic-Indic digit: \w would take it
    "x" * 129,
]


@pytest.mark.parametrize("run_id", PLAIN)
def test_plain_run_ids_are_taken(run_id: str) -> None:
    assert SAFE_RUN_ID.match(run_id)


@pytest.mark.parametrize("run_id", UNSAFE, ids=ascii)
def test_run_ids_that_are_no_plain_name_are_refused(run_id: str) -> None:
    assert not SAFE_RUN_ID.match(run_id)


def _with_run_id(run: Path, run_id: str) -> Path:
    record = json.loads((run / "run.json").read_text())
    record["run_id"] = run_id
    (run / "run.json").write_text(json.dumps(record))
    return run


@pytest.mark.parametrize("run_id", ["x|y", "../x", "a\nb", MOCKER_RUN.name + "\n"], ids=ascii)
def test_an_unsafe_run_id_in_run_json_gives_way_to_the_directory_name(
    mocker_run: Path, tmp_path: Path, run_id: str
) -> None:
    _with_run_id(mocker_run, run_id)
    signals = collect_signals(mocker_run)
    assert signals.get("run.id") == MOCKER_RUN.name
    assert any("is not a plain name" in p for p in signals.problems)
    out, summary = collect(mocker_run, tmp_path / "evidence")
    assert out == tmp_path / "evidence" / MOCKER_RUN.name and summary["run_id"] == MOCKER_RUN.name
    assert [p.name for p in (tmp_path / "evidence").iterdir()] == [MOCKER_RUN.name]
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("name", ["x|y", "a\nb", "run\n"], ids=ascii)
def test_a_run_directory_whose_name_is_no_plain_name_is_not_collected(
    mocker_run: Path, tmp_path: Path, name: str
) -> None:
    run = mocker_run.rename(mocker_run.parent / name)
    _with_run_id(run, name)
    with pytest.raises(CollectError, match="is not a plain name"):
        collect(run, tmp_path / "evidence")
    assert not (tmp_path / "evidence").exists() or not list((tmp_path / "evidence").iterdir())
