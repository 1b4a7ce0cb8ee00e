"""The config CLIs (`python -m atomdyn_launchers.config`, `python -m atomdyn_launchers.config.recipes`) when their
reader goes away (`| head -0`) or stdout is closed from the start (`>&-`): they end without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import find_repo_root

REPO = find_repo_root(Path(__file__).parent)
RECIPE = str(REPO / "recipes" / "rehearsal-1p1d.yaml")

COMMANDS = {
    "config": ["atomdyn_launchers.config"],
    "config --help": ["atomdyn_launchers.config", "--help"],
    "recipes --help": ["atomdyn_launchers.config.recipes", "--help"],
    "recipes FILE": ["atomdyn_launchers.config.recipes", RECIPE],
    "recipes FILE x50": ["atomdyn_launchers.config.recipes", *[RECIPE] * 50],
}


@pytest.fixture
def closed_pipe() -> Iterator[int]:
    """The write end of a pipe whose reader has gone, as `| head -0` leaves it once head exits."""
    read, write = os.pipe()
    os.close(read)
    yield write
    os.close(write)


def _env(buffered: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_reader_that_goes_away_ends_the_command_quietly(
    name: str, buffered: bool, closed_pipe: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *COMMANDS[name]],
        stdout=closed_pipe,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(buffered),
        timeout=60,
    )
    assert done.stderr == "", done.stderr
    assert done.returncode in (0, 1), done.returncode


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_closed_stdout_ends_the_command_quietly(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *COMMANDS[name]],
        stderr=subprocess.PIPE,
        text=True,
        env=_env(True),
        timeout=60,
        preexec_fn=lambda: os.close(1),  # `>&-`: the command starts with no stdout at all
    )
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), (done.returncode, done.stderr)
