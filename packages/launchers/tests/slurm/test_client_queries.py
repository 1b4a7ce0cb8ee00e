"""The real client's commands as processes: a Slurm query that dies of a signal is asked again, a command that
changes state never is. The commands are small executables on PATH standing in for Slurm's clients, which die as
scontrol did on a loaded local cluster (killed by SIGPIPE, nothing on stderr: `nox -s tests`, Dec 2026)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakeslurm import fake_config

from atomdyn_launchers.slurm.client import Slurm, SlurmError


def _dies_once(bin_dir: Path, name: str, answer: str) -> Path:
    """`name` on PATH: the first call kills itself with SIGPIPE, later calls print `answer`; calls counted."""
    calls = bin_dir / f"{name}.calls"
    script = bin_dir / name
    script.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{calls}"\n'
        f'if [ "$(wc -l < "{calls}")" -eq 1 ]; then kill -PIPE $$; fi\n'
        f"printf '%s\\n' '{answer}'\n"
    )
    script.chmod(0o755)
    return calls


@pytest.fixture
def slurm(tmp_path: Path) -> Slurm:
    client = Slurm(fake_config("http://127.0.0.1:1", tmp_path / "shared"))
    client.env["PATH"] = f"{tmp_path}:{os.environ['PATH']}"
    return client


def test_a_query_killed_by_a_signal_is_asked_again(slurm: Slurm, tmp_path: Path) -> None:
    calls = _dies_once(tmp_path, "scontrol", "AccountingStorageType = accounting_storage/none")
    assert slurm.config_value("AccountingStorageType") == "accounting_storage/none"
    assert len(calls.read_text().splitlines()) == 2


def test_a_command_that_changes_state_is_never_sent_twice(slurm: Slurm, tmp_path: Path) -> None:
    calls = _dies_once(tmp_path, "scancel", "")
    with pytest.raises(SlurmError, match=r"scancel 42 failed \(exit -13\)"):
        slurm.run(["scancel", "42"])
    assert len(calls.read_text().splitlines()) == 1


def test_a_query_that_dies_twice_fails_naming_the_signal(slurm: Slurm, tmp_path: Path) -> None:
    script = tmp_path / "squeue"
    script.write_text("#!/bin/sh\nkill -PIPE $$\n")
    script.chmod(0o755)
    with pytest.raises(SlurmError, match=r"squeue -h failed \(exit -13\)"):
        slurm.run(["squeue", "-h"])
