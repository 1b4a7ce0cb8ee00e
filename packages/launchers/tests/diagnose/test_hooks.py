"""Where the diagnosis runs by itself: a failed rung of the ladder keeps it in certify.json and its report names
the first finding; the published report stays what its certify.json renders. (A failed run's run.json is shown
on the local cluster: tests/run/test_faults_quick.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from invoke.context import Context
from invoke.exceptions import Exit
from upstream_lines import line_of

from atomdyn_launchers.certify import nixl as certify_nixl
from atomdyn_launchers.certify import tasks as certify_tasks
from atomdyn_launchers.certify.ladder import diagnose_rung
from atomdyn_launchers.certify.nixl import CrossNode
from atomdyn_launchers.certify.rungs import RungResult
from atomdyn_launchers.config import cluster as cluster_config
from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.evidence.certify_report import published_texts, render, verify_certify
from atomdyn_launchers.evidence.probe import Check as ProbeCheck
from atomdyn_launchers.evidence.probe import ProbeVerdict
from atomdyn_launchers.job import node_check
from atomdyn_launchers.nodes.check import CheckReport
from atomdyn_launchers.run.stages.record import Outcome

HERE = Path(__file__).resolve().parent
VLLM_RUN = HERE.parent / "evidence/fixtures/vllm-cpu-disagg/20261201T124322Z-disagg-vllm-cpu"
CLIMB = next((HERE.parent / "evidence" / "fixtures" / "certify").glob("certify-*"))


def _failed_at_nixl(diagnosis: dict[str, object] | None) -> dict[str, object]:
    """The real climb's state, its NIXL rung failed with ``diagnosis``."""
    state = json.loads((CLIMB / "certify.json").read_text())
    nixl = state["rungs"][3]
    nixl.update(verdict="fail", detail="the probe's checks failed", diagnosis=diagnosis)
    state["rungs"] = state["rungs"][:4]
    state["stopped_at"] = "4 (nixl)"
    return {k: v for k, v in state.items() if k not in ("certified", "verdict")}


def test_a_rung_without_a_run_directory_has_no_diagnosis(tmp_path: Path) -> None:
    assert (
        diagnose_rung(RungResult("fail", "a node check failed", evidence=str(tmp_path / "node-check.json")))
        is None
    )
    assert diagnose_rung(RungResult("fail", "the lock does not verify")) is None


def test_a_rung_on_a_served_run_reads_its_logs_and_its_gates(tmp_path: Path) -> None:
    """The real vLLM-on-CPU run passed every gate: only the warm-up's 404s, a symptom."""
    run_dir = Path(shutil.copytree(VLLM_RUN, tmp_path / VLLM_RUN.name))
    found = diagnose_rung(RungResult("fail", "gates", evidence=str(run_dir)))
    assert found is not None and found["files_read"] == 7
    assert [f["id"] for f in found["findings"]] == ["dynamo-model-not-found"]


def test_the_report_names_the_first_finding_and_verifies_once_published(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "decode.decode.log").write_text(
        line_of("nixl-connect-failed") + "\n" + line_of("ucx-no-auxiliary-transport") + "\n"
    )
    state = _failed_at_nixl(diagnose_run(run_dir).to_json(limit=10))
    readme = render(state)
    assert (
        "Diagnosis of rung 4: `ucx-no-auxiliary-transport` (`logs/decode.decode.log:2`): UCX found no"
        in readme
    )
    assert "Fix: Allow a transport both nodes share for wireup" in readme
    bundle = tmp_path / f"certify-{state['certify_id']}"
    bundle.mkdir()
    state_text, readme_text = published_texts(state)
    (bundle / "certify.json").write_text(state_text)
    (bundle / "README.md").write_text(readme_text)
    assert "Diagnosis of rung 4" in readme_text
    verdict = verify_certify(bundle)
    assert not verdict.ok and verdict.intact is not False, verdict.text()  # not certified, every file intact
    assert "every file intact" in verdict.text()


def test_a_rung_with_nothing_known_says_so_in_the_report(tmp_path: Path) -> None:
    state = _failed_at_nixl(diagnose_run(tmp_path).to_json(limit=10))
    assert "Diagnosis of rung 4: no known signature (`invoke diagnose " in render(state)
    assert "Diagnosis of" not in render(_failed_at_nixl(None))


def test_a_preflight_rung_is_diagnosed_from_its_node_report(tmp_path: Path) -> None:
    """Rung 1's evidence is node-check.json: the node check's own words for a missing model path."""
    missing = tmp_path / "models" / "qwen3"
    check = node_check._model({"model_path": str(missing)})
    report = CheckReport(engine="vllm-cpu", runtime="venv", nodes={"node-a": [check]}, errors={})
    path = tmp_path / "node-check.json"
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    found = diagnose_rung(RungResult("fail", "node-a: model-path ...", evidence=str(path)))
    assert found is not None and found["first"] == "model-path-missing", found
    assert str(missing) in found["findings"][0]["line"]


def test_a_probe_the_launcher_passed_is_diagnosed_by_its_failed_verdict_checks(tmp_path: Path) -> None:
    run_dir = tmp_path / "probe-run"
    (run_dir / "nixl").mkdir(parents=True)
    (run_dir / "run.json").write_text(
        json.dumps({"result": "pass", "kind": "disagg", "probe": {"kind": "nixl-pair"}})
    )
    checks = [{"name": "bytes_arrived", "ok": True, "detail": "every byte"},
              {"name": "kv_forbidden_transport_rows", "ok": False, "detail": "1 row over tcp"}]  # fmt: skip
    (run_dir / "nixl" / "verdict.json").write_text(json.dumps({"passed": False, "checks": checks}))
    found = diagnose_rung(RungResult("fail", "the probe's checks failed", evidence=str(run_dir)))
    assert found is not None and found["first"] == "gate-kv-forbidden-transport"
    assert found["rerun"] == "invoke nixl.cross-node"


def test_a_work_directory_without_a_run_is_read_whole(tmp_path: Path) -> None:
    """A node check's work directory (check-<node>.out, what UCX answered there): every file is read."""
    (tmp_path / "check-node-a.out").write_text(line_of("ucx-transport-not-available") + "\n")
    found = diagnose_rung(RungResult("fail", "ucx refused", evidence=f"{tmp_path / 'missing'}, {tmp_path}"))
    assert found is not None and found["first"] == "ucx-transport-not-available"
    assert found["findings"][0]["file"] == "check-node-a.out"


def test_the_cross_node_task_prints_the_first_finding_of_a_failed_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "probe-run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "decode.probe.log").write_text(line_of("ucx-no-auxiliary-transport") + "\n")
    failed = CrossNode(
        Outcome("probe-run", run_dir, passed=False, failure="job 5 (decode) ended early"),
        ProbeVerdict(passed=False, checks=[ProbeCheck("bytes_arrived", False, "nothing arrived")]),
    )
    monkeypatch.setattr(certify_nixl, "cross_node", lambda *args, **kwargs: failed)
    monkeypatch.setattr(cluster_config, "resolve_cluster_config", lambda path: None)
    with pytest.raises(Exit) as raised:
        certify_tasks.nixl_cross_node(Context(), engine="mocker")
    assert raised.value.code == 1
    out = capsys.readouterr().out
    assert "diagnosis: ucx-no-auxiliary-transport (logs/decode.probe.log:1): UCX found no transport" in out
