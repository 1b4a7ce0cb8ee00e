"""``nox -s demo`` keeps a user's run with the user's runs: its evidence goes beside the run directory
(``<SHARED_DIR>/evidence``), never into the project's committed ``evidence/`` unless asked to publish there.
The cluster and the run are stood in for; the run directory is a real one (the recorded mocker run)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.rehearsal import demo
from atomdyn_launchers.run.stages.record import Outcome

MOCKER_RUN = next((Path(__file__).parents[1] / "evidence" / "fixtures" / "mocker-disagg").iterdir())


class _Cluster:
    downs = 0

    def __init__(self, config: object) -> None:
        pass

    def up(self, log: Any = None) -> Any:
        return type("Up", (), {"already_up": False})()

    def down(self) -> None:
        _Cluster.downs += 1


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shared = tmp_path / "shared"
    run_dir = shared / "runs" / MOCKER_RUN.name
    shutil.copytree(MOCKER_RUN, run_dir)
    monkeypatch.setattr(demo, "LocalCluster", _Cluster)
    monkeypatch.setattr(demo, "aggregated_reference_missing", lambda engine: False)
    monkeypatch.setattr(demo, "run", lambda options: Outcome(MOCKER_RUN.name, run_dir, True, None))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return shared


def test_the_demo_collects_beside_the_runs(shared: Path) -> None:
    line = demo.run_demo("mocker", None)
    assert line.startswith("demo PASSED") and _Cluster.downs >= 1
    assert (shared / "evidence" / MOCKER_RUN.name / "summary.json").is_file()
    assert not (Path.cwd() / "evidence").exists()  # the project's committed evidence is left alone


def test_the_demo_publishes_only_where_asked(shared: Path) -> None:
    demo.run_demo("mocker", None, Path("evidence"))
    assert (Path.cwd() / "evidence" / MOCKER_RUN.name / "summary.json").is_file()
    assert not (shared / "evidence").exists()
