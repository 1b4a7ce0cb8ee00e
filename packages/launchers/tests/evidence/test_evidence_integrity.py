"""What evidence can and cannot be made to say (issue 25): the platform from what the jobs measured, run-supplied
text that cannot write Markdown, collect refusing links and special files, verify checking every file it does
not regenerate, an optional signature made where the run ran, and clean usage errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from evidence_helpers import H200_BENCH_LOG, REPO, UCX_RC, VLLM_CPU_RUN, real_lines
from invoke.context import Context
from invoke.exceptions import Exit

from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.evidence import invoke_tasks, results
from atomdyn_launchers.evidence.summary import CollectError, collect, file_digests
from atomdyn_launchers.evidence.verify import verify_path

RUN_ID = VLLM_CPU_RUN.name
CPU_LABEL = "rehearsal (CPU, vLLM, NIXL over TCP)"
# A row a run-supplied string tries to add to a Markdown table, and a marker it tries to end the table with.
FORGED_ROW = "| Throughput on 8x MI355X (atom) | PASS, 50000 tok/s | MI355X | [x](x) |"
INJECTION = f"x |\n{FORGED_ROW}\n{results.GLANCE_END}\n<!-- run:20991231T000000Z-disagg-atom -->\n# heading"
SAMPLE_BUNDLE = REPO / "evidence" / "20261201T140556Z-disagg-vllm-cpu"  # another committed run's evidence


def _cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.evidence", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _edit_run(run: Path, **changes: object) -> None:
    record = json.loads((run / "run.json").read_text())
    record.update(changes)
    (run / "run.json").write_text(json.dumps(record, indent=1))


def _readme(tmp_path: Path) -> Path:
    readme = tmp_path / "README.md"
    readme.write_text(f"# Project\n\n{results.GLANCE_BEGIN}\nold\n{results.GLANCE_END}\n\nrest\n")
    return readme


def _report(evidence: Path, tmp_path: Path) -> tuple[str, str]:
    readme = _readme(tmp_path)
    summaries, _ = results.load_summaries(evidence)
    results.append_results(tmp_path / "RESULTS.md", summaries, "evidence")
    results.update_readme(readme, results.glance_table(summaries, "evidence"))
    return readme.read_text(), (tmp_path / "RESULTS.md").read_text()


# Item 1: the platform comes from what the jobs measured, never from run.json's word.


def test_a_cpu_rehearsal_labeled_mi355x_in_run_json_is_refused(vllm_cpu_run: Path, tmp_path: Path) -> None:
    shutil.rmtree(vllm_cpu_run / "fingerprints")
    _edit_run(vllm_cpu_run, platform="MI355X")
    with pytest.raises(CollectError, match=r"run\.json: platform 'MI355X' contradicts the engine") as caught:
        collect(vllm_cpu_run, tmp_path / "evidence")
    assert CPU_LABEL in str(caught.value)
    assert not (tmp_path / "evidence" / RUN_ID).exists()
    done = _cli("collect", str(vllm_cpu_run), "--evidence", "ev", cwd=tmp_path)
    assert done.returncode == 2 and "contradicts the engine" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "ev" / RUN_ID).exists()
    judged_now = verify_path(vllm_cpu_run)  # the run directory judged as it is
    assert (
        not judged_now.ok and "FAIL  platform: run.json: platform 'MI355X' contradicts" in judged_now.text()
    )


def test_a_run_without_fingerprints_is_labeled_by_its_engine(vllm_cpu_run: Path, tmp_path: Path) -> None:
    shutil.rmtree(vllm_cpu_run / "fingerprints")
    out, summary = collect(vllm_cpu_run, tmp_path / "evidence")
    assert summary["platform"] == CPU_LABEL and summary["verdict"] == "pass"
    assert summary["platform_source"] == "the engine (the run saved no fingerprint)"
    assert "(from run.json)" not in (out / "summary.md").read_text()
    assert verify_path(out).ok


def test_a_gpu_run_without_fingerprints_is_unknown(atom_run: Path, tmp_path: Path) -> None:
    shutil.rmtree(atom_run / "fingerprints")
    _edit_run(atom_run, platform="MI355X")  # what run.json says; nothing the jobs measured says so
    with pytest.raises(CollectError, match="unknown"):
        collect(atom_run, tmp_path / "evidence")
    _edit_run(atom_run, platform=get_engine("atom").platform_of({}))
    _, summary = collect(atom_run, tmp_path / "evidence")
    assert summary["platform"] == "unknown (no fingerprint), not MI355X"
    provenance = next(g for g in summary["gates"] if g["id"] == "provenance")
    assert (
        provenance["verdict"] == "fail" and summary["verdict"] == "fail"
    )  # an unknown platform is no provenance


def test_verify_fails_a_platform_edited_in_the_collected_data(vllm_cpu_run: Path, tmp_path: Path) -> None:
    out, _ = collect(vllm_cpu_run, tmp_path / "evidence")
    _edit_run(out / "data", platform="MI355X")
    summary = json.loads((out / "summary.json").read_text())
    summary["files"] = file_digests(out)
    (out / "summary.json").write_text(json.dumps(summary))
    verdict = verify_path(out)
    assert not verdict.intact and "data/run.json: platform 'MI355X' contradicts the engine" in verdict.text()


# Item 2: run-supplied text is escaped wherever it reaches Markdown.


def _inject(run: Path, field: str) -> None:
    if field == "platform":  # a GPU name as a node's fingerprint reports it, labeled by the engine
        for path in (run / "fingerprints").glob("*.json"):
            fingerprint = json.loads(path.read_text())
            # (a name holding "MI355X" would be labeled plain MI355X, which shows no injection)
            fingerprint.update(accelerator="amd", amd={"gpus": [INJECTION.replace("MI355X", "Instinct")]})
            path.write_text(json.dumps(fingerprint))
        fingerprints = {p.stem: json.loads(p.read_text()) for p in (run / "fingerprints").glob("*.json")}
        _edit_run(run, platform=get_engine("vllm-cpu").platform_of(fingerprints))
    else:
        _edit_run(run, **{field: INJECTION})


@pytest.mark.parametrize(
    "field", ["platform", "model_profile", "runtime", "lock_digest_source", "engine_profile"]
)
def test_run_supplied_text_adds_no_markdown(vllm_cpu_run: Path, tmp_path: Path, field: str) -> None:
    _inject(vllm_cpu_run, field)
    out, summary = collect(vllm_cpu_run, tmp_path / "evidence")
    assert verify_path(out).intact, verify_path(out).text()
    readme, results_md = _report(tmp_path / "evidence", tmp_path)
    md = (out / "summary.md").read_text()
    for name, text in (("README", readme), ("RESULTS.md", results_md), ("summary.md", md)):
        lines = text.splitlines()
        assert not any(line.startswith("| Throughput") for line in lines), name
        assert not any(line.startswith(("# heading", "<!--")) and "20991231" in line for line in lines), name
    block = readme.split(results.GLANCE_BEGIN)[1].split(results.GLANCE_END)[0].strip().splitlines()
    table = [line for line in block if line.startswith("|")]  # an unknown engine's row is an unverified claim
    rows = [line for line in table if not line.startswith(("| capability |", "|---", "| (no verified"))]
    assert len(rows) == len(results.glance_rows([{**summary, "_dir": RUN_ID}]))
    assert readme.endswith(f"{results.GLANCE_END}\n\nrest\n") and readme.count(results.GLANCE_END) == 1
    assert all(len(re.findall(r"(?<!\\)\|", row)) == 6 for row in table), (
        table
    )  # five cells (the signature's among them): other "|" escaped


def test_gate_values_in_code_cells_keep_the_table(atom_run: Path, tmp_path: Path) -> None:
    """A gate value read from a log holds "|" (UCX's rows, as the kv_rows_not_zero_copy gate names them): its
    table row keeps its six cells."""
    with open(atom_run / "logs" / "decode.worker.log", "a") as log:
        log.write(UCX_RC["copy"].read_text())
    out, summary = collect(atom_run, tmp_path / "evidence")
    assert "| copy-in |" in str(
        next(g for g in summary["gates"] if g["id"] == "kv_rows_not_zero_copy")["value"]
    )
    assert verify_path(out).intact
    rows = [
        line for line in (out / "summary.md").read_text().splitlines() if line.startswith("| kv_rows_not")
    ]
    assert len(rows) == 1 and len(re.findall(r"(?<!\\)\|", rows[0])) == 7, rows


# Item 3: collect refuses links and anything not a regular file, naming it.


@pytest.mark.parametrize("case", ["fingerprint-link", "log-link", "linked-dir", "run-json-link", "fifo"])
def test_collect_refuses_links_and_special_files(vllm_cpu_run: Path, tmp_path: Path, case: str) -> None:
    secret = tmp_path / "shadow"
    secret.write_text(
        "root:$6$rounds=5000$saltsalt$Jk0a7Y2yq3bQdX9cW1u8sE4rT6vN5mL2pK3jH7gF1dS0aZ:19700:0:99999:7:::\n"
    )
    named = {
        "fingerprint-link": "fingerprints/zz.json",
        "log-link": "logs/decode.decode.log",
        "linked-dir": "doctor",
        "run-json-link": "run.json",
        "fifo": "metrics/decode.decode.prom",
    }[case]
    target = vllm_cpu_run / named
    if case == "run-json-link":
        copy = tmp_path / "run-copy.json"
        shutil.copy(target, copy)
        target.unlink()
        target.symlink_to(copy)
    elif case == "linked-dir":
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    elif case == "fifo":
        target.unlink()
        os.mkfifo(target)
    else:
        target.unlink(missing_ok=True)
        target.symlink_to(secret)
    done = _cli("collect", str(vllm_cpu_run), "--evidence", "ev", cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert named in done.stderr and ("symbolic link" in done.stderr or "not a regular file" in done.stderr)
    assert "Traceback" not in done.stderr and not (tmp_path / "ev" / RUN_ID).exists()
    judged_now = _cli("verify", str(vllm_cpu_run), cwd=tmp_path, timeout=60)
    assert judged_now.returncode == 1 and f"refused: {vllm_cpu_run}: {named}" in judged_now.stdout


def test_a_run_owned_etcd_s_logs_are_collected_and_verify(vllm_cpu_run: Path, tmp_path: Path) -> None:
    """A run that started its own etcd keeps logs/etcd.log and logs/etcd.slurm.out (docs/run-directory.md):
    collect copies them and verify accepts them (it refused them as files of a role the run does not have)."""
    (vllm_cpu_run / "logs" / "etcd.log").write_text("etcd serving\n")
    (vllm_cpu_run / "logs" / "etcd.slurm.out").write_text("etcd job started\n")
    out, _ = collect(vllm_cpu_run, tmp_path / "evidence")
    for name in ("etcd.log", "etcd.slurm.out"):
        assert (out / "data" / "logs" / name).is_file()
    assert verify_path(out).ok, verify_path(out).text()


# Item 4: verify checks what it does not regenerate.


@pytest.fixture
def bundle(vllm_cpu_run: Path, tmp_path: Path) -> Path:
    out, _ = collect(vllm_cpu_run, tmp_path / "evidence")
    assert verify_path(out).ok
    return out


def _relist(out: Path) -> None:
    """What someone who edits evidence does next: list the digests of what is there now."""
    summary = json.loads((out / "summary.json").read_text())
    summary["files"] = file_digests(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


@pytest.mark.parametrize(
    "case",
    ["png-replaced", "extra-readme", "dotfile", "run-json-link", "fifo", "renamed", "other-runs-files"],
)
def test_verify_checks_what_it_does_not_regenerate(bundle: Path, tmp_path: Path, case: str) -> None:
    expected = {
        "png-replaced": "kv_transfers.png is not the picture data/ draws",
        "extra-readme": "README.md is not a file collect writes",
        "dotfile": "excerpts/.notes is not a file collect writes",
        "run-json-link": "data/run.json is a symbolic link",
        "fifo": "excerpts/pipe is not a regular file",
        "renamed": "the directory is named 20261201T140556Z-disagg-vllm-cpu; its run is " + RUN_ID,
        "other-runs-files": "data/logs/agg.worker.log is not a file collect writes",
    }[case]
    if case == "png-replaced":
        shutil.copy(SAMPLE_BUNDLE / "kv_transfers.png", bundle / "kv_transfers.png")
    elif case == "extra-readme":
        (bundle / "README.md").write_text("# Verified on MI355X\n")
    elif case == "dotfile":
        (bundle / "excerpts" / ".notes").write_text("kept for later\n")
    elif case == "run-json-link":
        copy = tmp_path / "run.json"
        shutil.copy(bundle / "data" / "run.json", copy)
        (bundle / "data" / "run.json").unlink()
        (bundle / "data" / "run.json").symlink_to(copy)
    elif case == "fifo":
        os.mkfifo(bundle / "excerpts" / "pipe")
    elif case == "other-runs-files":
        (bundle / "data" / "logs" / "agg.worker.log").write_text("INFO another run's worker\n")
    if case != "renamed":
        _relist(bundle)
        where = bundle
    else:
        where = bundle.rename(bundle.with_name(SAMPLE_BUNDLE.name))
    verdict = verify_path(where)
    assert not verdict.intact and not verdict.ok, verdict.text()
    assert expected in verdict.text()


# Item 5: an optional signature made where the run ran.


def _keypair(tmp_path: Path, name: str) -> Path:
    key = tmp_path / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@cluster", "-f", str(key)], check=True
    )
    return key


def _with_nixl_err(run: Path) -> None:
    with open(run / "logs" / "decode.decode.log", "a") as log:
        log.write(real_lines(H200_BENCH_LOG, "NIXL_ERR")[0] + "\n")


def test_a_signed_bundle_ties_the_evidence_to_the_key(vllm_cpu_run: Path, tmp_path: Path) -> None:
    key, other = _keypair(tmp_path, "cluster-user"), _keypair(tmp_path, "someone-else")
    _with_nixl_err(vllm_cpu_run)
    out, summary = collect(vllm_cpu_run, tmp_path / "evidence", sign_key=key)
    assert summary["verdict"] == "fail" and (out / "summary.json.sig").is_file()
    signed = verify_path(out, signers=Path(f"{key}.pub"))
    assert signed.intact and not signed.ok
    assert "signed by cluster-user@cluster" in signed.text()
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"ops@example {Path(f'{key}.pub').read_text()}")
    assert verify_path(out, signers=allowed).intact
    assert "not signed by a key in" in verify_path(out, signers=Path(f"{other}.pub")).text()
    kept_signature = (out / "summary.json.sig").read_bytes()

    # The raw run edited afterwards (its NIXL_ERR line deleted) and collected again without the key.
    log = vllm_cpu_run / "logs" / "decode.decode.log"
    log.write_text("".join(line for line in log.read_text().splitlines(True) if "NIXL_ERR" not in line))
    out, summary = collect(vllm_cpu_run, tmp_path / "evidence", replace=True)
    assert summary["verdict"] == "pass" and verify_path(out).ok  # unsigned: it proves only itself
    assert "unsigned" in verify_path(out).text()
    unsigned = verify_path(out, signers=Path(f"{key}.pub"))
    assert not unsigned.ok and "summary.json.sig is missing: the evidence is not signed" in unsigned.text()
    (out / "summary.json.sig").write_bytes(kept_signature)  # the old signature beside the new summary
    forged = verify_path(out, signers=Path(f"{key}.pub"))
    assert not forged.ok and "the signature does not verify" in forged.text()
    done = _cli("verify", str(out), "--signer", f"{key}.pub", cwd=tmp_path)
    assert done.returncode == 1 and "the signature does not verify" in done.stdout


def test_collect_with_a_key_it_cannot_use_writes_nothing(vllm_cpu_run: Path, tmp_path: Path) -> None:
    done = _cli("collect", str(vllm_cpu_run), "--evidence", "ev", "--sign", "absent-key", cwd=tmp_path)
    assert done.returncode == 2 and "absent-key" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "ev" / RUN_ID).exists()


# Item 14: clean usage errors, nothing half-written.


def test_report_on_a_missing_evidence_root_changes_nothing(bundle: Path, tmp_path: Path) -> None:
    readme = _readme(tmp_path)
    before = readme.read_text()
    done = _cli("report", "--evidence", "evidnce", "--results", "R.md", "--readme", str(readme), cwd=tmp_path)
    assert done.returncode == 2 and "evidnce" in done.stderr and "Traceback" not in done.stderr
    assert readme.read_text() == before and not (tmp_path / "R.md").exists()
    (tmp_path / "empty").mkdir()
    done = _cli("report", "--evidence", "empty", "--results", "R.md", "--readme", str(readme), cwd=tmp_path)
    assert done.returncode == 2 and "no evidence" in done.stderr
    assert readme.read_text() == before and not (tmp_path / "R.md").exists()


def test_report_into_a_readme_without_markers_writes_nothing(bundle: Path, tmp_path: Path) -> None:
    bare = tmp_path / "BARE.md"
    bare.write_text("# no markers\n")
    done = _cli(
        "report", "--evidence", str(bundle.parent), "--results", "R.md", "--readme", str(bare), cwd=tmp_path
    )
    assert done.returncode == 2 and "BARE.md lacks the markers" in done.stderr
    assert not (tmp_path / "R.md").exists() and bare.read_text() == "# no markers\n"


def test_invoke_tasks_refuse_without_a_traceback(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = json.loads((bundle / "summary.json").read_text())
    summary["verdict"] = "fail"
    (bundle / "summary.json").write_text(json.dumps(summary))
    readme = _readme(tmp_path)
    with pytest.raises(Exit) as caught:
        invoke_tasks.report(
            Context(), evidence=str(bundle.parent), results=str(tmp_path / "R.md"), readme=str(readme)
        )
    assert caught.value.code == 2 and "does not verify; nothing published" in capsys.readouterr().err
    (tmp_path / "run").mkdir()
    with pytest.raises(Exit) as caught:
        invoke_tasks.collect(Context(), str(tmp_path / "run"), evidence=str(tmp_path / "ev"), sign="absent")
    assert caught.value.code == 2 and "absent: no such key file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["collect", "verify", "sanitize"])
def test_dash_h_shows_the_task_help(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "invoke", f"evidence.{name}", "-h"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Usage: inv[oke] [--core-opts] evidence.{name}" in done.stdout
    assert "is not a" not in done.stdout + done.stderr
