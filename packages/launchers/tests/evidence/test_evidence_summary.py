"""Collected evidence: its files, its sanitization, verify on evidence, RESULTS.md and the README table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from evidence_helpers import ATOM_RUN_ID, MOCKER_RUN
from invoke.context import Context
from invoke.exceptions import Exit

from atomdyn_launchers.evidence import invoke_tasks, results
from atomdyn_launchers.evidence.summary import collect
from atomdyn_launchers.evidence.verify import verify_path

SECRETS = ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "gpu-mi355x-017", "gpu-mi355x-018", "acme-ml", "10.42.7.19",
           "mi355x-prod", "/lustre/orgs")  # fmt: skip


def _all_text(directory: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in directory.rglob("*") if p.suffix in (".json", ".md", ".txt")
    )


def test_mocker_evidence_files_and_verify(mocker_run: Path, tmp_path: Path) -> None:
    run = json.loads((mocker_run / "run.json").read_text())
    run["config"].update(
        SLURM_ACCOUNT="rehearsal", SLURM_PARTITION="rehearsal"
    )  # as the local cluster names them
    (mocker_run / "run.json").write_text(json.dumps(run))
    out, summary = collect(mocker_run, tmp_path / "evidence")
    assert out == tmp_path / "evidence" / MOCKER_RUN.name
    assert summary["schema_version"] == 1 and summary["verdict"] == "pass"
    assert summary["platform"] == "rehearsal (CPU, mock engine)"
    assert summary["lock_digest"] == "sha256:" + "0" * 64
    assert summary["gates_passed"] == summary["gates_judged"] == 14
    assert summary["figures"]["requests_ok"] == 6 and summary["figures"]["completion_tokens"] == 144
    assert summary["fingerprint_source"].startswith("collected where evidence.collect ran")
    assert "python" in summary["fingerprint"]["collector"]
    assert summary["pictures"] == ["timeline.png"]
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["gates"] == summary["gates"]
    for gate in on_disk["gates"]:
        assert gate["excerpt"] and (out / gate["excerpt"]).read_text().strip()
    md = (out / "summary.md").read_text()
    assert "| verdict | **PASS** (14 of 14 gates) |" in md and "![timeline](timeline.png)" in md
    verdict = verify_path(out)
    assert verdict.ok, verdict.text()


def test_atom_evidence_is_sanitized_everywhere(atom_run: Path, tmp_path: Path) -> None:
    log = atom_run / "logs" / "decode.worker.log"
    log.write_text(
        log.read_text()
        + "INFO using HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 on gpu-mi355x-018 via 10.42.7.19\n"
        + "dmabuf-shim: reg fail backend=hsa path=dmabuf size=4096 offset=12 fd_closed=1 addr=0x7f3a42000000 "
        "iova=0x7f3a42000000 access=0xf errno=22 detail=on:gpu-mi355x-018\n"
    )
    fingerprints = atom_run / "fingerprints"
    fingerprints.mkdir()
    (fingerprints / "decode.json").write_text(json.dumps({"hostname": "gpu-mi355x-018", "kernel": "6.8.0"}))
    out, summary = collect(atom_run, tmp_path / "evidence")
    text = _all_text(out)
    for secret in SECRETS:
        assert secret not in text, secret
    assert summary["verdict"] == "fail"
    assert [g["id"] for g in summary["gates"] if g["verdict"] == "fail"] == ["dmabuf_failures"]
    assert summary["fingerprint"] == {"decode": {"hostname": "host-2", "kernel": "6.8.0"}}
    excerpt = (out / "excerpts" / "logs.dmabuf_fail.txt").read_text()
    assert (
        excerpt
        == "decode.worker.log:16: dmabuf-shim: reg fail backend=hsa path=dmabuf size=4096 offset=12 fd_closed=1 "
        "addr=0x7f3a42000000 iova=0x7f3a42000000 access=0xf errno=22 detail=on:host-2\n"
    )
    assert summary["pictures"] == ["timeline.png", "kv_transfers.png"]
    assert (out / "kv_transfers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["figures"]["kv_mean_transfer_ms"] == 1.206
    assert summary["figures"]["kv_mean_transfer_mib"] == 2.812
    verdict = verify_path(out)
    assert not verdict.ok and "gate dmabuf_failures: fail: dmabuf.fail is 1, expected == 0" in verdict.text()


def test_recollecting_replaces_the_evidence_whole(atom_run: Path, tmp_path: Path) -> None:
    out, _ = collect(atom_run, tmp_path / "evidence")
    stale = out / "excerpts" / "stale.txt"
    stale.write_text("from an earlier collection")
    out2, summary = collect(atom_run, tmp_path / "evidence")
    assert out2 == out and not stale.exists() and summary["verdict"] == "pass"
    assert sorted(p.name for p in (tmp_path / "evidence").iterdir()) == [ATOM_RUN_ID]


def test_verify_catches_tampered_or_leaking_evidence(mocker_run: Path, tmp_path: Path) -> None:
    out, _ = collect(mocker_run, tmp_path / "evidence")
    (out / "excerpts" / "jobs.txt").write_text("job ran on node=gpu-a17 at 10.20.30.40\n")
    (out / "excerpts" / "timeline.txt").unlink()
    text = verify_path(out).text()
    assert "excerpts/jobs.txt is not sanitized" in text
    assert "excerpts/timeline.txt is missing" in text
    assert not verify_path(out).ok


def test_results_and_readme_table(mocker_run: Path, atom_run: Path, tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    collect(atom_run, evidence)
    summaries = results.load_summaries(evidence)
    results_md = tmp_path / "results" / "RESULTS.md"
    assert results.append_results(results_md, summaries, "../evidence") == [ATOM_RUN_ID]
    collect(mocker_run, evidence)
    summaries = results.load_summaries(evidence)
    assert results.append_results(results_md, summaries, "../evidence") == [MOCKER_RUN.name]
    assert results.append_results(results_md, summaries, "../evidence") == []  # idempotent
    text = results_md.read_text()
    assert text.startswith("# Results\n")
    assert text.index(ATOM_RUN_ID) < text.index(MOCKER_RUN.name)  # chronological by run id
    assert f"(../evidence/{MOCKER_RUN.name}/summary.md)" in text
    assert "- platform: MI355X; runtime: docker" in text

    readme = tmp_path / "README.md"
    readme.write_text(
        f"# Project\n\n## Result at a glance\n\n{results.GLANCE_BEGIN}\nold\n{results.GLANCE_END}\n\nrest\n"
    )
    assert results.update_readme(readme, results.glance_table(summaries, "evidence"))
    table = readme.read_text()
    assert "old" not in table and table.endswith(f"{results.GLANCE_END}\n\nrest\n")
    assert (
        "| Two-node disaggregated prefill/decode (mocker) | PASS, 6/6 requests | rehearsal (CPU, mock engine) | "
        f"[{MOCKER_RUN.name}](evidence/{MOCKER_RUN.name}/summary.md) |" in table
    )
    assert "| KV handoff prefill to decode (atom) | PASS (kv.transfers = 12) | MI355X |" in table
    assert not results.update_readme(readme, results.glance_table(summaries, "evidence"))  # unchanged

    bare = tmp_path / "BARE.md"
    bare.write_text("# no markers\n")
    with pytest.raises(results.ReportError, match="result-at-a-glance:begin"):
        results.update_readme(bare, "x")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.evidence", *args], cwd=cwd, capture_output=True, text=True
    )


def test_cli_collect_verify_sanitize(mocker_run: Path, tmp_path: Path) -> None:
    done = _cli("collect", str(mocker_run), "--evidence", "ev", cwd=tmp_path)
    assert done.returncode == 0 and "pass (14 of 14 gates)" in done.stdout, done.stderr
    assert (
        _cli("verify", str(mocker_run), str(tmp_path / "ev" / MOCKER_RUN.name), cwd=tmp_path).returncode == 0
    )
    (mocker_run / "requests.jsonl").unlink()
    failed = _cli("verify", str(mocker_run), cwd=tmp_path)
    assert failed.returncode == 1 and "FAIL  requests_sent" in failed.stdout
    secret = tmp_path / "job.sbatch"
    secret.write_text(
        "#SBATCH --account=acme-ml-prj\nexport HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789\n"
    )
    shown = _cli("sanitize", str(secret), cwd=tmp_path)
    assert shown.stdout == "#SBATCH --account=account-1\nexport HF_TOKEN=<redacted:hf-token>\n"
    assert _cli("sanitize", str(tmp_path / "absent"), cwd=tmp_path).returncode == 2


def test_invoke_collection(mocker_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ns = invoke_tasks.ns
    assert ns.name == "evidence"
    assert sorted(ns.task_names) == ["bench", "collect", "report", "sanitize", "verify"]
    c = Context()
    invoke_tasks.collect(c, str(mocker_run), evidence=str(tmp_path / "ev"))
    invoke_tasks.verify(c, str(tmp_path / "ev" / MOCKER_RUN.name))
    (tmp_path / "README.md").write_text(f"{results.GLANCE_BEGIN}\n{results.GLANCE_END}\n")
    invoke_tasks.report(
        c, evidence=str(tmp_path / "ev"), results=str(tmp_path / "R.md"), readme=str(tmp_path / "README.md")
    )
    assert MOCKER_RUN.name in (tmp_path / "R.md").read_text()
    assert f"(ev/{MOCKER_RUN.name}/summary.md)" in (tmp_path / "README.md").read_text()
    (mocker_run / "run.json").unlink()
    with pytest.raises(Exit):
        invoke_tasks.verify(c, str(mocker_run))
    assert "run.json is missing" in capsys.readouterr().out
