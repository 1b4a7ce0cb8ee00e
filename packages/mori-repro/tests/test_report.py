"""`mori-repro report`: the bundle is complete, consistent with the run, and sanitized."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

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
