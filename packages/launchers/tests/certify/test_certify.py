"""The bring-up ladder on the local cluster with the mock engine (CI's climb; the real-engine climb is in
test_certify_real_engine.py): every rung in order, a report that says "certified", a resume that reuses what
passed for the same key, a forced failure at the NIXL rung that stops the ladder there, named, and where the
accuracy rung's runs come from."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from clusterinfra import require_vllm_cpu_venv

from atomdyn_launchers.certify.ladder import Certification, CertifyError, climb, config_digest, plan_lines
from atomdyn_launchers.certify.report import publish
from atomdyn_launchers.certify.rungs import RUNG_NAMES
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.config.recipes import Accuracy, load_recipe
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.evidence import cli as evidence_cli
from atomdyn_launchers.run.options import Flags, LaunchOptions, resolve

pytestmark = pytest.mark.integration
PROBE = ProbeOptions(blocks=16, transfer_blocks=(1, 4), iterations=5, large_mib=8, timeout_s=60.0)


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    require_vllm_cpu_venv(local_cluster_config)
    return local_cluster_config


def _verdicts(cert: Certification) -> dict[str, str]:
    return {r["name"]: r["verdict"] for r in cert.rungs}


def test_the_mock_engines_climb_is_certified_and_a_resume_reuses_what_passed(
    config: ClusterConfig, tmp_path: Path
) -> None:
    options = LaunchOptions(kind="disagg", engine="mocker", runs_root=tmp_path / "runs")
    root = tmp_path / "runs" / "certify"
    cert = climb(config, options, PROBE, root=root)
    assert cert.certified, cert.to_json()
    verdicts = _verdicts(cert)
    assert list(verdicts) == list(RUNG_NAMES)
    assert (
        verdicts["images"] == verdicts["validate"] == verdicts["benchmark"] == "not needed"
    )  # venv, no recipe
    assert all(verdicts[n] == "pass" for n in ("preflight", "nixl", "agg-single", "agg-two", "disagg"))
    rows = {r["name"]: r for r in cert.rungs}
    assert rows["nixl"]["platform"].startswith("rehearsal (CPU")  # the probe ran as vllm-cpu's workers
    assert "not MI355X" in rows["disagg"]["platform"] or rows["disagg"]["platform"].startswith("rehearsal")
    assert cert.key["lock_digest"].startswith("sha256:") and cert.key["config_digest"] == config_digest(
        config, options
    )
    state = json.loads((Path(cert.directory) / "certify.json").read_text())
    assert state["certified"] and state["verdict"].startswith("certified on ")
    readme = (Path(cert.directory) / "README.md").read_text()
    assert readme.count("\n| ") == 1 + len(RUNG_NAMES) and "**certified on " in readme
    published = publish(cert, tmp_path / "evidence")
    assert (published / "README.md").read_text().count("| pass |") == 5
    assert evidence_cli.verify([published]) == 0  # recomputed from its certify.json

    again = climb(config, options, PROBE, root=root, resume=True)
    assert again.certified
    reused = _verdicts(again)
    assert reused["preflight"] == "pass" and reused["images"] == "not needed"  # always climbed: the key
    assert all(reused[n] == "reused" for n in ("nixl", "agg-single", "agg-two", "disagg")), reused
    assert again.elapsed_s < cert.elapsed_s

    later = climb(config, options, PROBE, root=root, start="disagg")
    assert _verdicts(later)["agg-two"] == "reused" and _verdicts(later)["disagg"] == "pass"


def test_a_failure_at_the_nixl_rung_stops_the_ladder_there(config: ClusterConfig, tmp_path: Path) -> None:
    unreachable = replace(config, ucx_net_devices=tuple((n, "lo") for n, _ in config.node_addrs))
    options = LaunchOptions(kind="disagg", engine="mocker", runs_root=tmp_path / "runs")
    cert = climb(unreachable, options, replace(PROBE, timeout_s=20.0), root=tmp_path / "certify")
    assert not cert.certified
    assert [r["name"] for r in cert.rungs] == ["preflight", "images", "validate", "nixl"]  # later rungs unrun
    nixl = cert.rungs[-1]
    assert nixl["verdict"] == "fail" and "UCX_NET_DEVICES=lo" in nixl["detail"], nixl
    assert cert.stopped_at == "4 (nixl)" and cert.rerun is not None and "--from nixl" in cert.rerun
    assert "nixl.cross-node" in cert.rerun
    assert "not certified: stopped at rung 4 (nixl)" in (Path(cert.directory) / "README.md").read_text()


def test_resume_without_an_earlier_climb_and_an_unknown_rung_are_named(
    config: ClusterConfig, tmp_path: Path
) -> None:
    options = LaunchOptions(kind="disagg", engine="mocker", runs_root=tmp_path / "runs")
    with pytest.raises(CertifyError, match="nothing to resume"):
        climb(config, options, PROBE, root=tmp_path / "certify", resume=True)
    (tmp_path / "certify").mkdir()
    with pytest.raises(CertifyError, match=r"unknown rung 'nope'"):
        climb(config, options, PROBE, root=tmp_path / "certify", start="nope")


def test_the_dry_run_plans_every_rung_with_its_cost(config: ClusterConfig) -> None:
    lines = plan_lines(config, LaunchOptions(kind="disagg", engine="mocker"), PROBE)
    assert "nothing submitted" in lines[0]
    assert [line.split()[1] for line in lines[1:-1]] == list(RUNG_NAMES)
    # venv: no validation; the UCX check's 300 + the probe's 2 x 60 + 120
    assert "at most 0 s" in lines[3] and "at most 540 s" in lines[4]


def test_the_accuracy_rung_judges_rungs_5_and_7_and_runs_its_own_where_they_were_reused(
    config: ClusterConfig, tmp_path: Path
) -> None:
    """With a recipe's accuracy check, rungs 5 and 7 ask it and rung 8 judges their runs, starting nothing; a
    climb from rung 8 (rungs 5-7 reused) makes the aggregated and P/D runs itself."""
    recipe = load_recipe(Path(__file__).resolve().parents[4] / "recipes" / "rehearsal-1p1d.yaml")
    check = Accuracy(task="gsm8k", items=2, threshold=0.0, max_pd_difference=1.0, few_shot=1, max_tokens=16)
    recipe = replace(recipe, requests=4, accuracy=check)
    options = replace(resolve("disagg", None, Flags(), recipe), runs_root=tmp_path / "runs")
    root = tmp_path / "runs" / "certify"
    cert = climb(config, options, PROBE, root=root)
    assert cert.certified, cert.to_json()
    rows = {r["name"]: r for r in cert.rungs}
    assert rows["accuracy"]["evidence"] == f"{rows['agg-single']['evidence']}, {rows['disagg']['evidence']}"
    assert rows["accuracy"]["seconds"] < 5, rows["accuracy"]  # judged, nothing started
    for name in ("agg-single", "disagg"):
        assert (Path(rows[name]["evidence"]) / "accuracy" / "accuracy.json").is_file(), name
    assert not (Path(rows["agg-two"]["evidence"]) / "accuracy").exists()

    again = climb(config, options, PROBE, root=root, start="accuracy")
    assert again.certified, again.to_json()
    later = {r["name"]: r for r in again.rungs}
    assert later["agg-single"]["verdict"] == later["disagg"]["verdict"] == "reused"
    made = later["accuracy"]["evidence"].split(", ")
    assert len(made) == 2 and not set(made) & {rows["agg-single"]["evidence"], rows["disagg"]["evidence"]}
    assert [json.loads((Path(d) / "run.json").read_text())["kind"] for d in made] == ["agg-single", "disagg"]
