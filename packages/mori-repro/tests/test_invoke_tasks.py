"""The invoke collection runs the same program and keeps its exit code."""

from __future__ import annotations

import pytest
from conftest import LIB_VARS
from invoke.context import Context
from invoke.exceptions import Exit

from mori_repro.exitcodes import ExitCode
from mori_repro.invoke_tasks import ns


def test_collection_exposes_run_and_report() -> None:
    assert ns.name == "mori"
    assert set(ns.task_names) == {"run", "report"}


def test_run_task_raises_the_environment_exit_code(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    for var in LIB_VARS:  # this machine's own libraries: no GPU runtime, no RDMA device
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(Exit) as raised:
        ns["run"](Context(), json=True)
    assert raised.value.code == ExitCode.ENVIRONMENT
    assert '"verdict": "environment-cannot-run"' in capfd.readouterr().out
