"""The command line's own contract: a bad value is a usage error naming the option and what it allows, an
output path that cannot be written is refused before anything runs, a closed stdout ends quietly
(issue 25, item 14)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from nixl_helpers import env_for, run_cli

# The smallest bench there is: a bad value below must be refused before any of it runs.
TINY = ["bench", "--layers", "1", "--kv-heads", "1", "--head-dim", "1", "--block-tokens", "1"]
TINY += ["--num-blocks", "1", "--blocks", "1", "--sizes-mib", "0.01", "--lanes", "1", "--iters", "1"]
TINY += ["--ucx", "default"]

BAD_VALUES = [
    pytest.param(["doctor", "--timeout", "-1"], "--timeout", "seconds > 0", id="doctor-timeout-negative"),
    pytest.param(["doctor", "--timeout", "0"], "--timeout", "seconds > 0", id="doctor-timeout-zero"),
    pytest.param(["doctor", "--timeout", "nan"], "--timeout", "seconds > 0", id="doctor-timeout-nan"),
    pytest.param(["doctor", "--timeout", "inf"], "--timeout", "seconds > 0", id="doctor-timeout-inf"),
    pytest.param([*TINY, "--dtype-bytes", "3"], "--dtype-bytes", "choose from 1, 2, 4", id="dtype-bytes-3"),
    pytest.param([*TINY, "--layers", "0"], "--layers", "an integer >= 1", id="layers-0"),
    pytest.param([*TINY, "--kv-heads", "-2"], "--kv-heads", "an integer >= 1", id="kv-heads-negative"),
    pytest.param([*TINY, "--head-dim", "0"], "--head-dim", "an integer >= 1", id="head-dim-0"),
    pytest.param([*TINY, "--block-tokens", "0"], "--block-tokens", "an integer >= 1", id="block-tokens-0"),
    pytest.param([*TINY, "--num-blocks", "0"], "--num-blocks", "an integer >= 1", id="num-blocks-0"),
    pytest.param([*TINY, "--iters", "0"], "--iters", "an integer >= 1", id="iters-0"),
    pytest.param([*TINY, "--src-gpu", "-1"], "--src-gpu", "an integer >= 0", id="src-gpu-negative"),
    pytest.param([*TINY, "--dst-gpu", "-1"], "--dst-gpu", "an integer >= 0", id="dst-gpu-negative"),
    pytest.param([*TINY, "--blocks", "0"], "--blocks", "integers >= 1", id="blocks-0"),
    pytest.param([*TINY, "--lanes", "0,1"], "--lanes", "integers >= 1", id="lanes-0"),
    pytest.param([*TINY, "--sizes-mib", "0"], "--sizes-mib", "sizes > 0", id="sizes-0"),
    pytest.param([*TINY, "--sizes-mib", "-1"], "--sizes-mib", "sizes > 0", id="sizes-negative"),
    pytest.param([*TINY, "--sizes-mib", "nan"], "--sizes-mib", "sizes > 0", id="sizes-nan"),
]


@pytest.mark.parametrize(("args", "option", "allowed"), BAD_VALUES)
def test_a_bad_value_is_a_usage_error_naming_the_option(args: list[str], option: str, allowed: str) -> None:
    proc = run_cli(args, env_for(), timeout=60)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"error: argument {option}: " in proc.stderr and allowed in proc.stderr, proc.stderr
    assert "usage: nixl-compat" in proc.stderr
    assert proc.stdout == ""


def _unwritable(tmp_path: Path, kind: str) -> Path:
    if kind == "directory":
        (tmp_path / "out").mkdir()
        return tmp_path / "out"
    (tmp_path / "file").write_text("not a directory\n")
    return tmp_path / "file" / "out"


@pytest.mark.parametrize("option", ["--json", "--plot"])
@pytest.mark.parametrize("kind", ["directory", "under-a-file"])
def test_an_output_path_that_cannot_be_written_is_refused_before_the_bench(
    tmp_path: Path, option: str, kind: str
) -> None:
    path = _unwritable(tmp_path, kind)
    proc = run_cli([*TINY, option, str(path)], env_for(), timeout=60)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"error: argument {option}: cannot write {path}: " in proc.stderr, proc.stderr
    assert proc.stdout == ""  # the bench did not run
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name if kind == "directory" else "file"]


CLOSED_STDOUT = """
import os, sys
if sys.argv[1] == "without-core":
    sys.modules["atomdyn_core"] = None  # the base install: atomdyn-core comes with the evidence extra only
from nixl_compat.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("core", ["with-core", "without-core"])
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["bench", "--help"]], ids=lambda a: " ".join(a))
def test_a_closed_stdout_ends_quietly(core: str, args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLOSED_STDOUT, core, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env_for(),
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert "stdout is closed" in done.stderr
