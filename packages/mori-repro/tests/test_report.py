"""`mori-repro report`: the bundle is complete, consistent with the run, and sanitized."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env

from mori_repro.exitcodes import ExitCode

PEER_ADDRESS = "10.37.201.14"


def _report(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mori_repro.cli", "report", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _bundle_text(out: Path) -> str:
    return "\n".join((out / name).read_text() for name in ("report.md", "result.json", "system.json"))


def test_bundle_from_a_doubles_run_is_sanitized(tmp_path: Path, hsa_env: dict[str, str]) -> None:
    hostname = socket.gethostname()
    env = dict(
        hsa_env, UCX_NET_DEVICES="ionic_0:1", UCX_IB_PEER=PEER_ADDRESS, MORI_NODE=hostname, UNRELATED="x"
    )
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--backend=hsa"], env)
    assert proc.returncode == 0, proc.stderr
    assert f"bug-reproduced (exit 10); bundle written to {out}/" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["report.md", "result.json", "system.json"]

    result = json.loads((out / "result.json").read_text())
    assert result["exit_code"] == ExitCode.BUG_REPRODUCED
    assert [m["outcome"] for m in result["modes"]] == ["misdirected", "correct"]
    system = json.loads((out / "system.json").read_text())
    assert "UNRELATED" not in system["environment"]
    assert system["environment"]["UCX_NET_DEVICES"] == "ionic_0:1"
    assert {c["argv"][0] for c in system["commands"]} >= {"ibv_devinfo", "rdma"}

    text = _bundle_text(out)
    assert PEER_ADDRESS not in text
    assert hostname not in text
    assert "UCX_IB_PEER=192.0.2." in text or '"UCX_IB_PEER": "192.0.2.' in text
    # a RoCE GID embeds the NIC's address: it leaves the node only as a documentation-range placeholder
    assert "0000:0000:0000:0000:0000:ffff:7f00:0001" not in text
    assert result["rdma"]["gid"].startswith("2001:db8::")

    markdown = (out / "report.md").read_text()
    assert "**Verdict:** `bug-reproduced` (exit 10)" in markdown
    assert (
        "| offset-0 (bug) | 0 | ok | IBV_WC_SUCCESS | IBV_WC_SUCCESS | no | no | 0 | misdirected |"
        in markdown
    )
    assert (
        "| exporter-offset (fix) | 33554432 | ok | IBV_WC_SUCCESS | IBV_WC_SUCCESS | yes | yes | 33554432 "
        "| correct |" in markdown
    )


def test_bundle_from_an_earlier_result(tmp_path: Path, hsa_env: dict[str, str]) -> None:
    saved = tmp_path / "run.json"
    run = subprocess.run(
        [sys.executable, "-m", "mori_repro.cli", "run", "--json", "--backend=hsa", "--mode=fix"],
        capture_output=True,
        text=True,
        env=hsa_env,
        check=False,
    )
    assert run.returncode == ExitCode.FIXED_CONFIRMED
    saved.write_text(run.stdout)
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(saved)], hsa_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "result.json").read_text())["verdict"] == "fixed-behaviour-confirmed"


def test_environment_missing_bundle_says_what_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out)], clean_env())
    assert proc.returncode == 0, proc.stderr
    markdown = (out / "report.md").read_text()
    assert "**Verdict:** `environment-cannot-run` (exit 20)" in markdown
    assert "- rdma: libibverbs found no RDMA device" in markdown


def test_result_that_is_not_a_run_output_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"hello": 1}')
    proc = _report(["--out", str(tmp_path / "b"), "--result", str(bogus)], clean_env())
    assert proc.returncode == ExitCode.INTERNAL_ERROR
    assert f"--result {bogus}: not a `mori-repro run --json` output" in proc.stderr
    assert not (tmp_path / "b").exists()


def test_bad_loopback_arguments_are_a_usage_error(tmp_path: Path) -> None:
    proc = _report(["--out", str(tmp_path / "b"), "--sub-size=0"], clean_env())
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr == "mori-repro: mori-repro-loopback: --sub-size must be positive\n"
    assert not (tmp_path / "b").exists()


# issue 25, item 6: the verdict of a reused result is recomputed from its observations.


def _saved_run(tmp_path: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-m", "mori_repro.cli", "run", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    doc = json.loads(run.stdout)
    assert isinstance(doc, dict) and doc["exit_code"] == run.returncode, run.stderr
    return doc


def _forge(tmp_path: Path, doc: dict[str, Any], **changes: Any) -> Path:
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**doc, **changes}))
    return forged


def _refused(proc: subprocess.CompletedProcess[str], out: Path) -> None:
    assert proc.returncode == ExitCode.INTERNAL_ERROR, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert not out.exists()


def test_a_forged_verdict_is_reported_naming_both_and_no_bundle_is_written(tmp_path: Path) -> None:
    doc = _saved_run(tmp_path, clean_env())
    assert doc["verdict"] == "environment-cannot-run"
    forged = _forge(tmp_path, doc, verdict="bug-reproduced", exit_code=10)
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(forged)], clean_env())
    _refused(proc, out)
    assert (
        f"mori-repro: --result {forged}: it says bug-reproduced (exit 10), but its observations give "
        "environment-cannot-run (exit 20)" in proc.stderr
    )


def test_a_verdict_name_that_disagrees_with_its_exit_code_is_refused(tmp_path: Path) -> None:
    doc = _saved_run(tmp_path, clean_env())
    forged = _forge(tmp_path, doc, verdict="fixed-behaviour-confirmed")
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(forged)], clean_env())
    _refused(proc, out)
    assert (
        "it says fixed-behaviour-confirmed (exit 20), but its observations give environment-cannot-run (exit 20)"
        in proc.stderr
    )


def test_a_summary_that_disagrees_with_the_verdict_is_refused(tmp_path: Path) -> None:
    doc = _saved_run(tmp_path, clean_env())
    forged = _forge(tmp_path, doc, summary="bug reproduced: with offset 0 the WRITE landed at 0")
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(forged)], clean_env())
    _refused(proc, out)
    assert "its summary 'bug reproduced: with offset 0 the WRITE landed at 0' does not" in proc.stderr
    assert "environment-cannot-run (exit 20)" in proc.stderr


def test_forged_outcomes_are_recomputed_from_the_bytes_seen(tmp_path: Path, hsa_env: dict[str, str]) -> None:
    doc = _saved_run(tmp_path, hsa_env, "--backend=hsa")
    assert doc["verdict"] == "bug-reproduced"
    modes = [dict(m, outcome="correct") for m in doc["modes"]]  # the sentinel still says otherwise
    summary = "fixed behaviour confirmed: with the exporter's offset (33554432) the data landed"
    forged = _forge(
        tmp_path, doc, verdict="fixed-behaviour-confirmed", exit_code=0, summary=summary, modes=modes
    )
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(forged)], hsa_env)
    _refused(proc, out)
    assert (
        "it says fixed-behaviour-confirmed (exit 0), but its observations give bug-reproduced (exit 10)"
        in proc.stderr
    )
    assert "$.modes[0].outcome says correct, its observations give misdirected" in proc.stderr


def test_a_result_with_modes_missing_is_not_a_conclusive_verdict(
    tmp_path: Path, hsa_env: dict[str, str]
) -> None:
    doc = _saved_run(tmp_path, hsa_env, "--backend=hsa")
    forged = _forge(tmp_path, doc, modes=doc["modes"][:1])  # --mode=both, but only offset 0 recorded
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(forged)], hsa_env)
    _refused(proc, out)
    assert (
        "it says bug-reproduced (exit 10), but its observations give internal-error (exit 1)" in proc.stderr
    )


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        pytest.param({"modes": "none"}, "$.modes", id="modes-not-a-list"),
        pytest.param(
            {"environment": {"ok": False, "missing": ["rdma"]}}, "$.environment.missing[0]", id="missing"
        ),
        pytest.param({"rdma": "ionic_0"}, "$.rdma", id="rdma-not-an-object"),
        pytest.param({"config": None}, "$.config", id="no-config"),
    ],
)
def test_a_result_of_the_wrong_shape_names_the_field(
    tmp_path: Path, edit: dict[str, Any], where: str
) -> None:
    doc = _saved_run(tmp_path, clean_env())
    forged = _forge(tmp_path, doc, **edit)
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(forged)], clean_env())
    _refused(proc, out)
    assert f"mori-repro: --result {forged}: {where}: " in proc.stderr, proc.stderr


@pytest.mark.parametrize("where", ["document", "config"])
def test_a_deeply_nested_result_is_a_clean_error_naming_the_file(tmp_path: Path, where: str) -> None:
    nested = "[" * 100_000 + "]" * 100_000
    forged = tmp_path / "deep.json"
    if where == "document":
        forged.write_text(nested)
    else:
        doc = _saved_run(tmp_path, clean_env())
        forged.write_text(json.dumps({**doc, "config": "@@"}).replace('"@@"', nested))
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(forged)], clean_env())
    _refused(proc, out)
    assert f"mori-repro: --result {forged}: JSON nested more than" in proc.stderr, proc.stderr


def test_a_result_that_is_not_utf8_is_a_clean_error(tmp_path: Path) -> None:
    forged = tmp_path / "binary.json"
    forged.write_bytes(b'{"tool": "\xff\xfe"}')
    out = tmp_path / "bundle"
    proc = _report(["--out", str(out), "--result", str(forged)], clean_env())
    _refused(proc, out)
    assert f"--result {forged}: not a readable `mori-repro run --json` output" in proc.stderr


# issue 25, item 14: an --out that cannot take the bundle is named, and nothing is half-written.


def test_an_out_that_is_a_file_is_a_usage_error_and_the_file_is_untouched(tmp_path: Path) -> None:
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0::/root:/bin/sh\n")
    proc = _report(["--out", str(target)], clean_env())
    assert proc.returncode == ExitCode.USAGE, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert f"mori-repro: --out {target}: not a directory" in proc.stderr
    assert target.read_text() == "root:x:0:0::/root:/bin/sh\n"


def test_an_out_below_a_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "bundle"
    proc = _report(["--out", str(out)], clean_env())
    assert proc.returncode == ExitCode.USAGE, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert f"mori-repro: --out {out}: cannot write the bundle there: " in proc.stderr


def test_a_bundle_that_cannot_be_completed_leaves_no_part_of_it(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    (out / "system.json").mkdir(parents=True)  # the third file cannot take its name
    proc = _report(["--out", str(out)], clean_env())
    assert proc.returncode == ExitCode.USAGE, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"mori-repro: --out {out}: cannot write the bundle there: " in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["system.json"]
