"""Nothing replaced silently, every reader bounded (issue 36, item 6), and a hardware row only from a signed
bundle (item 1): each case failed before this change (docs/reliability.md, "what was tried")."""

from __future__ import annotations

import fcntl
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from evidence_helpers import (  # noqa: F401  (vllm_cpu_run: a fixture)
    REPO,
    atom_platform_lines,
    mi355x_fingerprint,
    vllm_cpu_run,
)

from atomdyn_launchers.config.cluster import ClusterConfigError, load_cluster_config, parse_cluster_env
from atomdyn_launchers.config.recipes import RecipeError, load_recipe
from atomdyn_launchers.evidence import cli, results
from atomdyn_launchers.evidence.summary import CollectError, collect
from atomdyn_launchers.evidence.verify import verify_path

INVOKE = [sys.executable, "-m", "invoke"]
_MINIMAL = """\
SLURM_ACCOUNT=acct
SLURM_PARTITION=gpu
SLURM_QOS=normal
PRIMARY_NODE=n01
PREFILL_NODE=n01
DECODE_NODE=n02
SHARED_DIR=/shared
MODEL_PATH=/shared/models/m
ENGINE_PROFILE=mocker
RUNTIME=venv
PROJECT_DIR=/shared/checkout
"""


def _readme(tmp_path: Path, block: str = "old\n") -> Path:
    readme = tmp_path / "README.md"
    readme.write_text(f"# Project\n\n{results.GLANCE_BEGIN}\n{block}{results.GLANCE_END}\n\nrest\n")
    return readme


def _in_bounded_memory(argv: list[str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """A command in a child limited to 1 GiB of address space: a reader that reads a device or a runaway file
    fills that within a second and dies of MemoryError instead of printing the refusal the tests expect. No
    wall-clock assertion (the interpreter's start under a loaded machine is not what is tested); the timeout only
    keeps a hung reader from holding the suite."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, preexec_fn=limit)


# Readers: devices, FIFOs and runaway files are refused, named, at once.


@pytest.mark.parametrize("device", ["/dev/full", "/dev/zero"])
def test_report_refuses_a_device_as_the_readme(device: str, tmp_path: Path) -> None:
    started = time.monotonic()
    assert cli.report(REPO / "evidence", tmp_path / "RESULTS.md", Path(device)) == 2
    assert time.monotonic() - started < 1
    assert not (tmp_path / "RESULTS.md").exists()


def test_report_readme_dev_full_from_the_command_line(tmp_path: Path) -> None:
    done = _in_bounded_memory([*INVOKE, "evidence.report", "-r", str(tmp_path / "R.md"), "-a", "/dev/full"])
    assert done.returncode == 2 and "/dev/full: the README is a character device" in done.stderr, done.stderr


def test_a_fifo_as_the_readme_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "README.md"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(results.ReportError, match="is a FIFO, not a regular file"):
        results.current_glance(fifo)
    assert time.monotonic() - started < 1


def test_an_oversized_readme_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "README.md"
    with open(big, "wb") as handle:
        handle.truncate(results.README_MAX_BYTES + 1)
    with pytest.raises(results.ReportError, match="larger than 4 MiB"):
        results.readme_with(big, "x")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/full"])
def test_a_device_as_the_cluster_configuration_is_refused_at_once(device: str) -> None:
    started = time.monotonic()
    with pytest.raises(ClusterConfigError, match="is a character device, not a regular file"):
        load_cluster_config(Path(device))
    assert time.monotonic() - started < 1


def test_agg_run_config_dev_zero_from_the_command_line() -> None:
    done = _in_bounded_memory([*INVOKE, "agg.run", "--config", "/dev/zero"])
    assert done.returncode != 0 and "is a character device" in (done.stderr + done.stdout)


def test_a_device_as_a_recipe_is_refused() -> None:
    with pytest.raises(RecipeError, match="is a character device"):
        load_recipe(Path("/dev/zero"))


def test_a_five_megabyte_slurm_account_is_refused_naming_the_key() -> None:
    text = _MINIMAL.replace("SLURM_ACCOUNT=acct", "SLURM_ACCOUNT=" + "a" * 5_000_000)
    with pytest.raises(ClusterConfigError) as caught:
        parse_cluster_env(text)
    assert caught.value.problems == [
        "line 1: SLURM_ACCOUNT: the value is 5000000 characters long, more than the 255 a value of this key "
        "may have"
    ]


def test_a_long_path_value_is_refused_naming_the_key() -> None:
    text = _MINIMAL.replace("MODEL_PATH=/shared/models/m", "MODEL_PATH=/" + "m" * 5000)
    with pytest.raises(ClusterConfigError, match="MODEL_PATH: the value is 5001 characters long"):
        parse_cluster_env(text)


# Collect: nothing replaced silently, never two at once, no bundle of a directory that holds no run.


def test_an_empty_directory_named_like_a_run_is_not_a_run_directory(tmp_path: Path) -> None:
    empty = tmp_path / "runs" / "20261201T000000Z-disagg-mocker"
    empty.mkdir(parents=True)
    with pytest.raises(CollectError, match=r"is not a run directory: it has no run\.json"):
        collect(empty, tmp_path / "evidence")
    assert not (tmp_path / "evidence").exists()
    assert cli.collect(empty, tmp_path / "evidence") == 2


def test_collect_refuses_to_replace_a_bundle_that_says_something_else(
    vllm_cpu_run: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    evidence = tmp_path / "evidence"
    first, summary = collect(vllm_cpu_run, evidence, with_pictures=False)
    before = (first / "summary.json").read_bytes()
    again, _ = collect(vllm_cpu_run, evidence, with_pictures=False)  # the same content: no question asked
    assert (again / "summary.json").read_bytes() == before
    record = json.loads((vllm_cpu_run / "run.json").read_text())
    record["result"] = "fail"
    (vllm_cpu_run / "run.json").write_text(json.dumps(record))
    with pytest.raises(
        CollectError, match=r"exists and says something else \(.*summary.json.*\): pass --replace"
    ):
        collect(vllm_cpu_run, evidence, with_pictures=False)
    assert (first / "summary.json").read_bytes() == before
    replaced, summary = collect(vllm_cpu_run, evidence, with_pictures=False, replace=True)
    notes = [n for n in summary["collection_notes"] if n.startswith("replaced (--replace)")]
    assert len(notes) == 1 and "verdict 'pass'" in notes[0], summary["collection_notes"]
    assert verify_path(replaced).intact
    assert not list(evidence.glob(".*lock")), "the lock file is left behind"


def test_two_collects_of_one_run_never_interleave(vllm_cpu_run: Path, tmp_path: Path) -> None:  # noqa: F811
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    run_id = json.loads((vllm_cpu_run / "run.json").read_text())["run_id"]
    with open(evidence / f".{run_id}.collect-lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(CollectError, match=r"another evidence\.collect of this run is writing it"):
            collect(vllm_cpu_run, evidence, with_pictures=False)
    assert not (evidence / run_id).exists()


# Verify: nothing said "signed" unless a signature was checked.


def test_a_garbage_signature_file_is_not_called_signed(vllm_cpu_run: Path, tmp_path: Path) -> None:  # noqa: F811
    out, _ = collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)
    (out / "summary.json.sig").write_text("garbage\n")
    text = verify_path(out).text()
    assert "a signature file is present (summary.json.sig) and was not checked" in text
    assert "signed" not in text.replace("unsigned", ""), text


# Report: rows merged, not regenerated from one root; a hardware claim needs a signature.


def _summary(
    run_dir: str, platform: str, engine: str = "atom", signed_by: str | None = None
) -> dict[str, object]:
    return {
        "run_id": run_dir,
        "_dir": run_dir,
        "_signed_by": signed_by,
        "kind": "agg-single",
        "engine_profile": engine,
        "platform": platform,
        "verdict": "pass",
        "figures": {"requests_ok": 4, "requests_total": 4},
        "gates": [],
    }


def test_an_unsigned_mi355x_claim_is_never_a_row_of_the_results_table() -> None:
    table = results.glance_table([_summary("20261204T000000Z-agg-single-atom", "MI355X")], "evidence")
    verified, unverified = table.split("**Unverified claims.**")
    assert "MI355X" not in verified and "(no verified result yet)" in verified
    assert "| MI355X | unsigned |" in unverified


def test_a_signed_mi355x_claim_is_a_row_that_names_its_signer() -> None:
    signed = _summary("20261204T000000Z-agg-single-atom", "MI355X", signed_by="ops@site")
    table = results.glance_table([signed], "evidence")
    assert "Unverified" not in table and "| MI355X | signed by ops@site |" in table


def test_rehearsal_rows_stay_rows_and_say_unsigned() -> None:
    rehearsal = _summary("20261201T000000Z-agg-single-mocker", "rehearsal (CPU, mock engine)", "mocker")
    table = results.glance_table([rehearsal], "evidence")
    assert "Unverified" not in table and "| rehearsal (CPU, mock engine) | unsigned |" in table


def test_report_from_another_root_keeps_the_readme_rows_of_this_one() -> None:
    committed = results.glance_table([_summary("20261201T000000Z-agg-single-mocker", "rehearsal (CPU, mock engine)",
                                               "mocker")], "evidence")  # fmt: skip
    other = results.glance_table(
        [_summary("20261203T000000Z-agg-single-vllm-cpu", "rehearsal (CPU, vLLM)", "vllm-cpu")],
        "../elsewhere",
        existing=committed,
    )
    assert "evidence/20261201T000000Z-agg-single-mocker/summary.md" in other
    assert "../elsewhere/20261203T000000Z-agg-single-vllm-cpu/summary.md" in other
    # the same root again draws its own rows afresh and keeps the other root's
    again = results.glance_table([], "evidence", existing=other)
    assert "evidence/20261201T000000Z-agg-single-mocker" not in again
    assert "../elsewhere/20261203T000000Z-agg-single-vllm-cpu/summary.md" in again


def test_report_merges_into_the_readme(vllm_cpu_run: Path, tmp_path: Path) -> None:  # noqa: F811
    kept = "| Old capability (x) | PASS, 1/1 requests | rehearsal (CPU) | unsigned | [r](../other/r/summary.md) |\n"
    readme = _readme(tmp_path, results.glance_table([], "evidence").replace("| (no verified result yet) | | | | |\n",
                                                                              kept))  # fmt: skip
    collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)
    assert cli.report(tmp_path / "evidence", tmp_path / "RESULTS.md", readme, None) == 0
    text = readme.read_text()
    assert kept.strip() in text and "vllm-cpu" in text


def _relabel_as_mi355x(run: Path, workers_too: bool = True) -> None:
    """The issue's forgery: a CPU rehearsal's run.json and fingerprints edited to say MI355X, every probe
    agreeing (what a hand-written data/ can always say): with ``workers_too`` the workers' logs also say that
    ATOM's ROCm platform loaded the run's model."""
    record = json.loads((run / "run.json").read_text())
    record.update(engine_profile="atom", platform="MI355X")
    (run / "run.json").write_text(json.dumps(record))
    for path in (run / "fingerprints").glob("*.json"):
        path.write_text(json.dumps(mi355x_fingerprint(json.loads(path.read_text()).get("hostname", "n"))))
    if workers_too:
        model = record["config"]["MODEL_PATH"].rsplit("/", 1)[0] + "/tiny-qwen3-bf16"
        for role in ("prefill", "decode"):
            with open(run / "logs" / f"{role}.{role}.log", "a") as log:
                log.write("\n".join(atom_platform_lines(model, "atomdyn/tiny-qwen3")) + "\n")


def test_a_rehearsal_relabeled_mi355x_without_its_workers_logs_is_unknown(
    vllm_cpu_run: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Fingerprints and run.json alone no longer make MI355X: the CPU build's workers logged no ROCm platform."""
    _relabel_as_mi355x(vllm_cpu_run, workers_too=False)
    with pytest.raises(CollectError, match=r"unknown \(the \w+ worker's log: no vLLM platform logged\)"):
        collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)
    assert not (tmp_path / "evidence").exists() or not any((tmp_path / "evidence").iterdir())


def test_a_rehearsal_relabeled_mi355x_is_never_an_unmarked_row(vllm_cpu_run: Path, tmp_path: Path) -> None:  # noqa: F811
    _relabel_as_mi355x(vllm_cpu_run)
    _, summary = collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)
    assert summary["platform"] == "MI355X"  # the data says so: only a signature can back it
    readme = _readme(tmp_path)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("# no key yet\n")
    assert cli.report(tmp_path / "evidence", tmp_path / "RESULTS.md", readme, allowed) == 0
    verified, unverified = readme.read_text().split("**Unverified claims.**")
    assert "MI355X" not in verified
    assert "| MI355X | unsigned |" in unverified


def test_a_bundle_signed_by_an_allowed_key_is_a_row_that_names_the_signer(
    vllm_cpu_run: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    key = tmp_path / "key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@cluster", "-f", str(key)], check=True
    )
    _relabel_as_mi355x(vllm_cpu_run)
    collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False, sign_key=key)
    allowed = tmp_path / "allowed_signers"
    public = Path(f"{key}.pub").read_text().split()
    allowed.write_text(f'ops@site namespaces="atomdyn-evidence" {public[0]} {public[1]}\n')
    readme = _readme(tmp_path)
    assert cli.report(tmp_path / "evidence", tmp_path / "RESULTS.md", readme, allowed) == 0
    text = readme.read_text()
    assert "Unverified" not in text and "| MI355X | signed by ops@site |" in text
    (tmp_path / "x").mkdir()
    other = _readme(tmp_path / "x")
    assert cli.report(tmp_path / "evidence", tmp_path / "R2.md", other, None) == 0
    assert (
        "| MI355X | unsigned |" in other.read_text().split("**Unverified claims.**")[1]
    )  # no signers: unsigned


def test_an_unsigned_collect_does_not_drop_a_signature_silently(vllm_cpu_run: Path, tmp_path: Path) -> None:  # noqa: F811
    key = tmp_path / "key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@cluster", "-f", str(key)], check=True
    )
    out, _ = collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False, sign_key=key)
    with pytest.raises(CollectError, match=r"summary\.json\.sig differ"):
        collect(vllm_cpu_run, tmp_path / "evidence", with_pictures=False)  # the same run, unsigned
    assert (out / "summary.json.sig").is_file()
    collect(
        vllm_cpu_run, tmp_path / "evidence", with_pictures=False, sign_key=key
    )  # signed again: no question


def test_a_published_climb_with_a_duplicate_key_is_unreadable(tmp_path: Path) -> None:
    from atomdyn_launchers.evidence.certify_report import REPORT_FILE, STATE_FILE, verify_certify

    climb = tmp_path / "certify-20261202T000000Z"
    climb.mkdir()
    (climb / STATE_FILE).write_text('{"certify_id": "20261202T000000Z", "certify_id": "other"}')
    (climb / REPORT_FILE).write_text("# report\n")
    verdict = verify_certify(climb)
    assert not verdict.intact and "duplicate key 'certify_id'" in verdict.text()
