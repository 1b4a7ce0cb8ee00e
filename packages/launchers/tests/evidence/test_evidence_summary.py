"""Collected evidence: its files, its sanitization, verify judging it again, RESULTS.md and the README table."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from evidence_helpers import (
    ATOM_RUN_ID,
    H200_FINGERPRINT,
    H200_LABEL,
    HOST_VRAM_REGIONS,
    MOCKER_RUN,
    REGISTRATIONS,
    UCX_RC,
    h200_cuda_attention_line,
)
from invoke.context import Context
from invoke.exceptions import Exit

from atomdyn_launchers.evidence import invoke_tasks, results
from atomdyn_launchers.evidence.summary import SCHEMA_VERSION, collect, sha256_file
from atomdyn_launchers.evidence.verify import verify_path

SECRETS = ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "gpu-mi355x-017", "gpu-mi355x-018", "acme-ml", "10.42.7.19",
           "mi355x-prod", "/lustre/orgs")  # fmt: skip


CPU_BUT_CUDA = "unknown (the engine runs vLLM's cuda platform, not cpu), not MI355X"


def _all_text(directory: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in directory.rglob("*") if p.is_file() and p.suffix != ".png"
    )


def _as_engine(run: Path, engine: str) -> Path:
    """The run as one of ``engine``; as the vllm engine's, an H200 run: the H200 run's real fingerprint, and its
    worker's CUDA line where ATOM's plugin line was (the vllm engine runs vLLM's CUDA platform)."""
    record = json.loads((run / "run.json").read_text())
    record["engine_profile"] = engine
    if engine == "vllm":
        for path in (run / "fingerprints").glob("*.json"):
            if json.loads(path.read_text()).get("accelerator") == "amd":  # a node given in a test stays
                path.write_text(H200_FINGERPRINT.read_text())
                record["platform"] = H200_LABEL
        for path in (run / "logs").glob("*.worker.log"):
            lines = [
                h200_cuda_attention_line() if "Platform plugin atom" in line else line
                for line in path.read_text().splitlines()
            ]
            path.write_text("\n".join(lines) + "\n")
    (run / "run.json").write_text(json.dumps(record))
    return run


def test_mocker_evidence_files_and_verify(mocker_run: Path, tmp_path: Path) -> None:
    run = json.loads((mocker_run / "run.json").read_text())
    run["config"].update(
        SLURM_ACCOUNT="rehearsal", SLURM_PARTITION="rehearsal"
    )  # as the local cluster names them
    (mocker_run / "run.json").write_text(json.dumps(run))
    out, summary = collect(mocker_run, tmp_path / "evidence")
    assert out == tmp_path / "evidence" / MOCKER_RUN.name
    assert summary["schema_version"] == SCHEMA_VERSION and summary["verdict"] == "pass"
    assert summary["platform"] == "rehearsal (CPU, mock engine)"
    assert summary["platform_source"] == "the engine (the run saved no fingerprint)"
    assert summary["lock_digest"] == "sha256:" + "0" * 64
    assert summary["gates_passed"] == summary["gates_judged"] == 19 and summary["gates_failed"] == 0
    assert summary["figures"]["requests_ok"] == 6 and summary["figures"]["completion_tokens"] == 144
    assert summary["fingerprint_source"].startswith("collected where evidence.collect ran")
    assert "python" in summary["fingerprint"]["collector"]
    assert summary["pictures"] == ["timeline.png"] and summary["collection_notes"] == []
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["gates"] == summary["gates"]
    for gate in on_disk["gates"]:
        assert gate["verdict"] == "n/a" or (gate["excerpt"] and (out / gate["excerpt"]).read_text().strip())
    for rel in [
        *summary["excerpts"],
        *summary["pictures"],
        "summary.md",
        "data/requests.jsonl",
        "data/run.json",
    ]:
        assert on_disk["files"][rel] == sha256_file(out / rel), rel
    md = (out / "summary.md").read_text()
    assert "| verdict | **PASS** (19 of 19 gates passed) |" in md and "![timeline](timeline.png)" in md
    verdict = verify_path(out)
    assert verdict.ok and verdict.intact, verdict.text()
    assert verdict.lines[0].endswith("pass (19 of 19 gates passed); recomputed from data/, every file intact")


def test_collected_data_is_reduced_to_what_the_gates_read(atom_run: Path, tmp_path: Path) -> None:
    log = atom_run / "logs" / "decode.worker.log"
    log.write_text(log.read_text() + "INFO 11-29 23:16:03 [core.py:211] Scheduler step took 0.002 s\n" * 1000)
    out, _ = collect(_as_engine(atom_run, "vllm"), tmp_path / "evidence")
    kept = (out / "data" / "logs" / "decode.worker.log").read_text()
    assert "Scheduler step" not in kept and kept.count("dmabuf-shim: reg ok") == REGISTRATIONS
    assert "KV Transfer metrics" in kept and "NIXL_COMPAT_HOST_VRAM" in kept
    prom = (out / "data" / "metrics" / "decode.worker.prom").read_text()
    assert "# TYPE" not in prom and "_bucket" not in prom and "vllm:nixl_xfer_time_seconds_count" in prom
    assert (
        json.loads((out / "data" / "doctor" / "decode.json").read_text())["backend"]["module"] == "nixl_cu13"
    )


def test_atom_evidence_is_sanitized_everywhere(atom_run: Path, tmp_path: Path) -> None:
    log = atom_run / "logs" / "decode.worker.log"
    log.write_text(
        log.read_text()
        + "INFO using HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 on gpu-mi355x-018 via 10.42.7.19\n"
        + "dmabuf-shim: reg fail backend=hsa path=dmabuf size=4096 offset=12 fd_closed=1 addr=0x7f3a42000000 "
        "iova=0x7f3a42000000 access=0xf errno=22 detail=on:gpu-mi355x-018 NIXL_ERR_BACKEND HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789\n"
    )
    fingerprints = atom_run / "fingerprints"
    shutil.rmtree(fingerprints)
    fingerprints.mkdir()
    cpu = {
        "hostname": "gpu-mi355x-018",
        "kernel": "6.8.0",
        "accelerator": None,
        "probes": {"amd-smi": "absent"},
    }
    (fingerprints / "decode.json").write_text(json.dumps(cpu))
    record = json.loads((atom_run / "run.json").read_text())
    # What the launcher labels from that fingerprint: a node without a GPU, on which the vllm engine's workers
    # cannot have run vLLM's CUDA platform; the provenance gate fails that.
    record["platform"] = CPU_BUT_CUDA
    (atom_run / "run.json").write_text(json.dumps(record))
    out, summary = collect(_as_engine(atom_run, "vllm"), tmp_path / "evidence")
    text = _all_text(out)
    for secret in SECRETS:
        assert secret not in text, secret
    assert summary["verdict"] == "fail"
    assert [g["id"] for g in summary["gates"] if g["verdict"] == "fail"] == [
        "provenance",
        "nixl_err_records",
        "dmabuf_failures",
    ]
    assert summary["fingerprint"] == {"decode": {**cpu, "hostname": "host-2"}}
    assert summary["platform_source"] == "the jobs' fingerprints"
    assert summary["lock_digest"] == "sha256:" + "ab" * 32  # the digest the run recorded, and where from
    assert summary["lock_digest_source"] == "image label io.atomdyn.lock.digest"
    assert (
        f"`sha256:{'ab' * 32}` (from the image label io.atomdyn.lock.digest)"
        in (out / "summary.md").read_text()
    )
    assert summary["platform"] == CPU_BUT_CUDA  # what the node and the workers reported, not run.json's word
    excerpt = (out / "excerpts" / "logs.dmabuf_fail.txt").read_text()
    # Kept under data/ before it: vLLM's platform and engine config lines, the HOST-VRAM lines, the helper's init
    # and registrations, vLLM's KV summary.
    number = 2 + HOST_VRAM_REGIONS + 1 + REGISTRATIONS + 1 + 1
    assert excerpt.startswith(
        f"decode.worker.log:{number}: dmabuf-shim: reg fail backend=hsa path=dmabuf size=4096 "
    )
    kept = (out / "data" / "logs" / "decode.worker.log").read_text().splitlines()
    # the line number is the one under data/
    assert kept[number - 1] == excerpt.split(": ", 1)[1].rstrip("\n")
    assert "detail=on:host-2" in excerpt
    assert summary["pictures"] == ["timeline.png", "kv_transfers.png"]
    assert (out / "kv_transfers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["figures"]["kv_mean_transfer_ms"] == 274.415
    assert summary["figures"]["kv_mean_transfer_mib"] == 0.201
    verdict = verify_path(out)
    assert verdict.intact and not verdict.ok
    assert "gate dmabuf_failures: fail: dmabuf.fail is 1, expected == 0" in verdict.text()


def test_kv_copied_over_rdma_is_named_in_the_collected_evidence(atom_run: Path, tmp_path: Path) -> None:
    """The atom engine's own gates on a run whose KV was copied over rc: the failing gate names the rows, its
    excerpt shows their lines under data/, and verify draws the same again."""
    with open(atom_run / "logs" / "decode.worker.log", "a") as log:
        log.write(UCX_RC["copy"].read_text())
    out, summary = collect(atom_run, tmp_path / "evidence")
    gate = next(g for g in summary["gates"] if g["id"] == "kv_rows_not_zero_copy")
    assert gate["verdict"] == "fail" and gate["excerpt"] == "excerpts/kv.rows_not_zero_copy.txt"
    assert "61..5736 | copy-in | rc_verbs/ionic_0:1" in gate["reason"]
    kept = (out / "data" / "logs" / "decode.worker.log").read_text().splitlines()
    for line in (out / gate["excerpt"]).read_text().splitlines():
        number, text = line.removeprefix("decode.worker.log:").split(": ", 1)
        assert kept[int(number) - 1] == text and ("copy-out" in text or "copy-in" in text)
    verdict = verify_path(out)  # intact: the summary is what its data judges, a failing run
    assert verdict.intact and not verdict.ok and "gate kv_rows_not_zero_copy: fail" in verdict.text()


def test_recollecting_replaces_the_evidence_whole(atom_run: Path, tmp_path: Path) -> None:
    out, _ = collect(_as_engine(atom_run, "vllm"), tmp_path / "evidence")
    stale = out / "excerpts" / "stale.txt"
    stale.write_text("from an earlier collection")
    out2, summary = collect(atom_run, tmp_path / "evidence", replace=True)
    assert out2 == out and not stale.exists() and summary["verdict"] == "pass"
    assert sorted(p.name for p in (tmp_path / "evidence").iterdir()) == [ATOM_RUN_ID]


@pytest.fixture
def collected(mocker_run: Path, tmp_path: Path) -> Path:
    out, _ = collect(mocker_run, tmp_path / "evidence")
    assert verify_path(out).ok
    return out


def _problems(out: Path) -> str:
    verdict = verify_path(out)
    assert not verdict.ok and not verdict.intact, verdict.text()
    return verdict.text()


def test_a_summary_edited_to_pass_fails_verify(atom_run: Path, tmp_path: Path) -> None:
    out, summary = collect(atom_run, tmp_path / "evidence")  # the atom engine's expectations: fail
    assert summary["verdict"] == "fail"
    summary.update(verdict="pass", gates_passed=summary["gates_judged"], gates_failed=0)
    for gate in summary["gates"]:
        gate.update(verdict="pass" if gate["verdict"] == "fail" else gate["verdict"], reason="")
    (out / "summary.json").write_text(json.dumps(summary))
    text = _problems(out)
    assert 'summary.json: verdict is "pass"; the collected data gives "fail"' in text
    assert "summary.json: gate nixl_backend_missing_roles says" in text
    assert "summary.md does not say what summary.json says" in text


def test_an_edited_figure_or_dropped_gate_fails_verify(collected: Path) -> None:
    summary = json.loads((collected / "summary.json").read_text())
    summary["figures"]["requests_ok"] = 64
    summary["gates"] = [g for g in summary["gates"] if g["id"] != "requests_failed"]
    (collected / "summary.json").write_text(json.dumps(summary))
    text = _problems(collected)
    assert "summary.json: figures is" in text
    assert "summary.json: gate requests_failed says null; the collected data gives" in text


@pytest.mark.parametrize("damage", ["cut", "random", "byte", "edit"])
def test_damaged_excerpt_picture_or_data_fails_naming_the_file(collected: Path, damage: str) -> None:
    import os

    target = {"cut": "excerpts/requests.txt", "random": "timeline.png", "byte": "data/requests.jsonl",
              "edit": "excerpts/jobs.txt"}[damage]  # fmt: skip
    path = collected / target
    data = path.read_bytes()
    if damage == "cut":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "random":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "byte":
        path.write_bytes(data[:10] + bytes([data[10] ^ 1]) + data[11:])
    else:
        path.write_text(data.decode().replace("COMPLETED", "COMPLETED "))
    assert f"{target} was changed after collection" in _problems(collected)


def test_verify_catches_missing_added_or_leaking_files(collected: Path) -> None:
    (collected / "excerpts" / "jobs.txt").write_text("job ran on node=gpu-a17 at 10.20.30.40\n")
    (collected / "excerpts" / "timeline.txt").unlink()
    (collected / "excerpts" / "extra.txt").write_text("added later\n")
    text = _problems(collected)
    assert "excerpts/jobs.txt is not sanitized" in text
    assert "excerpts/jobs.txt was changed after collection" in text
    assert "excerpts/timeline.txt is missing" in text
    assert "excerpts/extra.txt is not part of the collected evidence" in text


def test_old_format_evidence_is_not_taken_at_its_word(collected: Path) -> None:
    summary = json.loads((collected / "summary.json").read_text())
    summary["schema_version"] = 1
    (collected / "summary.json").write_text(json.dumps(summary))
    assert "it keeps no data to recompute its gates from" in _problems(collected)


def test_results_and_readme_table(mocker_run: Path, atom_run: Path, tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    collect(_as_engine(atom_run, "vllm"), evidence)
    summaries, skipped = results.load_summaries(evidence)
    assert skipped == []
    results_md = tmp_path / "results" / "RESULTS.md"
    assert results.append_results(results_md, summaries, "../evidence") == ([ATOM_RUN_ID], [])
    collect(mocker_run, evidence)
    summaries, _ = results.load_summaries(evidence)
    assert results.append_results(results_md, summaries, "../evidence") == ([MOCKER_RUN.name], [])
    assert results.append_results(results_md, summaries, "../evidence") == ([], [])  # idempotent
    text = results_md.read_text()
    assert text.startswith("# Results\n")
    assert text.index(ATOM_RUN_ID) < text.index(MOCKER_RUN.name)  # chronological by run id
    assert f"(../evidence/{MOCKER_RUN.name}/summary.md)" in text
    assert (
        f"- platform: {H200_LABEL}; runtime: docker" in text
        and "- gates: 25 of 25 gates passed" in text  # the fixed prompt's answer judged too (vllm checks it)
    )

    readme = tmp_path / "README.md"
    readme.write_text(
        f"# Project\n\n## Result at a glance\n\n{results.GLANCE_BEGIN}\nold\n{results.GLANCE_END}\n\nrest\n"
    )
    assert results.update_readme(readme, results.glance_table(summaries, "evidence"))
    table = readme.read_text()
    assert "old" not in table and table.endswith(f"{results.GLANCE_END}\n\nrest\n")
    assert (
        "| Two-node disaggregated prefill/decode (mocker) | PASS, 6/6 requests | rehearsal (CPU, mock engine) | "
        f"unsigned | [{MOCKER_RUN.name}](evidence/{MOCKER_RUN.name}/summary.md) |" in table
    )
    verified, unverified = table.split(
        "**Unverified claims.**"
    )  # a platform but a rehearsal needs a signature
    assert (
        f"| KV handoff prefill to decode (vllm) | PASS (kv.transfers = 9) | {H200_LABEL} | unsigned |"
        in unverified
    )
    assert "(vllm)" not in verified
    assert "| KV handoff prefill to decode (mocker) | PASS (requests.pd_split = 6) |" in table
    assert not results.update_readme(readme, results.glance_table(summaries, "evidence"))  # unchanged

    bare = tmp_path / "BARE.md"
    bare.write_text("# no markers\n")
    with pytest.raises(results.ReportError, match="result-at-a-glance:begin"):
        results.update_readme(bare, "x")


def test_report_never_publishes_a_contradiction(collected: Path, tmp_path: Path) -> None:
    summary = json.loads((collected / "summary.json").read_text())
    summary["gates"][0]["verdict"] = "fail"
    summary["verdict"] = "fail"
    (collected / "summary.json").write_text(json.dumps(summary))
    readme = tmp_path / "README.md"
    readme.write_text(f"{results.GLANCE_BEGIN}\n{results.GLANCE_END}\n")
    with pytest.raises(results.ReportError, match="does not verify; nothing published"):
        results.load_summaries(collected.parent)
    done = _cli(
        "report",
        "--evidence",
        str(collected.parent),
        "--results",
        "R.md",
        "--readme",
        str(readme),
        cwd=tmp_path,
    )
    assert done.returncode == 2 and "does not verify" in done.stderr
    assert (
        readme.read_text() == f"{results.GLANCE_BEGIN}\n{results.GLANCE_END}\n"
        and not (tmp_path / "R.md").exists()
    )


def test_report_leaves_out_old_format_evidence_and_says_so(collected: Path, tmp_path: Path) -> None:
    old = collected.parent / "20261129T000000Z-agg-single-mocker"
    old.mkdir()
    (old / "summary.json").write_text(
        json.dumps({"schema_version": 1, "run_id": old.name, "verdict": "pass"})
    )
    summaries, skipped = results.load_summaries(collected.parent)
    assert [s["run_id"] for s in summaries] == [collected.name]
    assert skipped == [f"{old.name}: summary format 1 keeps no data to recompute its gates from"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.evidence", *args], cwd=cwd, capture_output=True, text=True
    )


def test_cli_collect_verify_sanitize(mocker_run: Path, tmp_path: Path) -> None:
    done = _cli("collect", str(mocker_run), "--evidence", "ev", cwd=tmp_path)
    assert done.returncode == 0 and "pass (19 of 19 gates passed)" in done.stdout, done.stderr
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


def test_cli_collect_of_a_failed_run_exits_non_zero_counting_the_failures(
    mocker_run: Path, tmp_path: Path
) -> None:
    lines = (mocker_run / "requests.jsonl").read_text().splitlines(keepends=True)
    (mocker_run / "requests.jsonl").write_text("".join(lines[:3]))
    done = _cli("collect", str(mocker_run), "--evidence", "ev", cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    assert f"ev/{MOCKER_RUN.name}: fail (5 of 19 gates failed)" in done.stdout
    assert "  FAIL requests_recorded: requests.total is 3, expected == run.requests_total (6)" in done.stdout


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
    with pytest.raises(Exit):
        invoke_tasks.collect(c, str(mocker_run), evidence=str(tmp_path / "ev2"))


def test_collecting_again_from_the_evidence_data_gives_the_same_judgement(
    collected: Path, tmp_path: Path
) -> None:
    first = json.loads((collected / "summary.json").read_text())
    again, summary = collect(collected / "data", tmp_path / "again")
    assert again.name == collected.name and verify_path(again).ok
    for key in (
        "verdict",
        "gates_passed",
        "gates_judged",
        "figures",
        "platform",
        "lock_digest",
        "fingerprint",
    ):
        assert summary[key] == first[key], key
    assert [(g["id"], g["verdict"], g["value"]) for g in summary["gates"]] == [
        (g["id"], g["verdict"], g["value"]) for g in first["gates"]
    ]


def test_an_edited_excerpt_fails_even_with_its_digest_updated(collected: Path) -> None:
    path = collected / "excerpts" / "requests.txt"
    path.write_text(path.read_text().replace('"status": 200', '"status": 201', 1))
    summary = json.loads((collected / "summary.json").read_text())
    summary["files"]["excerpts/requests.txt"] = sha256_file(path)
    (collected / "summary.json").write_text(json.dumps(summary))
    text = _problems(collected)
    assert "excerpts/requests.txt does not show what data/ shows" in text
    assert "was changed after collection" not in text


def test_gates_listed_out_of_order_fail_verify(collected: Path) -> None:
    summary = json.loads((collected / "summary.json").read_text())
    summary["gates"].reverse()
    (collected / "summary.json").write_text(json.dumps(summary))
    text = _problems(collected)
    assert "summary.json: the gates are listed in another order than the data judges them" in text


def test_results_entry_follows_evidence_collected_again(mocker_run: Path, tmp_path: Path) -> None:
    evidence, results_md = tmp_path / "evidence", tmp_path / "RESULTS.md"
    collect(mocker_run, evidence)
    results.append_results(results_md, results.load_summaries(evidence)[0], "evidence")
    assert f"## {MOCKER_RUN.name}: disagg / mocker: PASS" in results_md.read_text()
    lines = (mocker_run / "requests.jsonl").read_text().splitlines(keepends=True)
    (mocker_run / "requests.jsonl").write_text("".join(lines[:3]))
    collect(mocker_run, evidence, replace=True)  # the same run, judged again: it now fails
    assert results.append_results(results_md, results.load_summaries(evidence)[0], "evidence") == (
        [],
        [MOCKER_RUN.name],
    )
    text = results_md.read_text()
    assert f"## {MOCKER_RUN.name}: disagg / mocker: FAIL" in text and ": PASS" not in text
