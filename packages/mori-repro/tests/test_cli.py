"""The command line's own contract: usage errors (in JSON where JSON was asked for) and --version."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env

from mori_repro.exitcodes import ExitCode


def mori_repro(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mori_repro.cli", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )


def usage_json(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert result.returncode == ExitCode.USAGE, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert isinstance(doc, dict)
    assert (doc["tool"], doc["exit_code"], doc["verdict"]) == ("mori-repro", 2, "usage-error")
    assert doc["summary"] == f"usage error: {doc['error']}"
    return doc


def test_run_json_answers_a_rejected_option_in_json() -> None:
    result = mori_repro("run", "--json", "--port", "x")
    assert "argument --port: invalid int value: 'x'" in usage_json(result)["error"]
    assert "usage: mori-repro run" in result.stderr


def test_run_json_answers_an_unknown_option_in_json() -> None:
    result = mori_repro("run", "--no-such-option", "--json")
    assert "unrecognized arguments: --no-such-option" in usage_json(result)["error"]


def test_run_json_answers_a_value_the_native_program_rejects_in_json() -> None:
    result = mori_repro("run", "--json", "--alloc-size", "bogus")
    assert usage_json(result)["error"] == "--alloc-size: not a size: 'bogus'"
    assert "--alloc-size: not a size" in result.stderr


def test_usage_errors_without_json_stay_text_on_stderr() -> None:
    for args in (("run", "--port", "x"), ("run", "--alloc-size", "bogus"), ("report", "--json")):
        result = mori_repro(*args)
        assert result.returncode == ExitCode.USAGE, args
        assert result.stdout == "", args
        assert result.stderr.strip(), args


def test_version_is_the_distributions() -> None:
    result = mori_repro("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"mori-repro {importlib.metadata.version('mori-repro')}\n"


@pytest.mark.parametrize(
    "args", [["--help"], ["--version"], ["run", "--help"], ["run"], ["run", "--json"]], ids=" ".join
)
def test_a_closed_stdout_ends_quietly(args: list[str]) -> None:
    """issue 25, item 14: `mori-repro ... >&-` ends without a traceback, saying where the output went."""
    done = subprocess.run(
        [sys.executable, "-m", "mori_repro.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    # the command's own status where it has one (20: this machine cannot run the loopback), else 1
    assert done.returncode == (
        ExitCode.ENVIRONMENT if args[0] == "run" and len(args) < 3 and "--help" not in args else 1
    )
    assert "stdout is closed" in done.stderr


def test_a_report_with_stdout_closed_still_writes_its_bundle(tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    done = subprocess.run(
        [sys.executable, "-m", "mori_repro.cli", "report", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1 and "stdout is closed" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["report.md", "result.json", "system.json"]
