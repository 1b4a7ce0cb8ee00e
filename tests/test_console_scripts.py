"""Every console script and invoke task whose reader goes away (`cmd | head`) stops quietly: no traceback,
no "Exception ignored" from the interpreter's last flush."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TIMEOUT_S = 120


def console_scripts() -> list[str]:
    """The console scripts of the project's distributions, as installed in this environment."""
    ours = set()
    for pyproject in ROOT.glob("packages/*/pyproject.toml"):
        match = re.search(r'^name = "([^"]+)"', pyproject.read_text(encoding="utf-8"), re.M)
        assert match, f"{pyproject} names no distribution"
        ours.add(match.group(1))
    scripts = metadata.entry_points(group="console_scripts")
    return sorted({ep.name for ep in scripts if ep.dist is not None and ep.dist.name in ours})


def expected_versions(tmp_path: Path) -> Path:
    from atomdyn_images.validator import EXPECTED_KEYS

    path = tmp_path / "expected.json"
    path.write_text(json.dumps({"versions": dict.fromkeys(EXPECTED_KEYS, "0")}))
    return path


# A command of each script that writes to stdout and changes nothing (argparse's --help and --version
# swallow a broken pipe by themselves, so they prove nothing).
OUTPUT_COMMANDS = {
    "atomdyn-lock": lambda tmp: ["table"],
    "atomdyn-cluster": lambda tmp: ["status", "--state-dir", str(tmp / "no-cluster")],
    "atomdyn-images": lambda tmp: ["tags"],
    "atomdyn-validate": lambda tmp: ["--json", "--expected", str(expected_versions(tmp))],
    "nixl-compat": lambda tmp: ["doctor", "--json", "--device", "cpu"],
    "dmabuf-shim": lambda tmp: ["env"],
    "mori-repro": lambda tmp: ["run", "--json"],
}


def into_closed_pipe(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run with stdout a pipe nobody reads any more, as after `| head` has exited."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            command, stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=TIMEOUT_S
        )
    finally:
        os.close(write_end)


def assert_quiet(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode in (0, 1), (done.returncode, done.stderr)  # not 120, the failed final flush


def test_every_console_script_has_an_output_command() -> None:
    assert sorted(OUTPUT_COMMANDS) == console_scripts()


@pytest.mark.parametrize("script", console_scripts())
def test_console_script_into_a_closed_pipe(tmp_path: Path, script: str) -> None:
    done = into_closed_pipe([str(BIN / script), *OUTPUT_COMMANDS[script](tmp_path)], ROOT)
    assert_quiet(done)


@pytest.mark.parametrize(
    "args",
    [["--list"], ["lock.verify"], ["cluster.status", "--state-dir", "{tmp}/no-cluster"]],
    ids=lambda a: a[0],
)
def test_invoke_into_a_closed_pipe(tmp_path: Path, args: list[str]) -> None:
    command = [str(BIN / "invoke"), "--search-root", str(ROOT), *(a.format(tmp=tmp_path) for a in args)]
    done = into_closed_pipe(command, ROOT)
    assert_quiet(done)
    assert done.returncode == 1  # the output did not reach its reader


@pytest.mark.parametrize("script", console_scripts())
def test_help_shows_no_private_subcommand(script: str) -> None:
    done = subprocess.run([str(BIN / script), "--help"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert not re.search(r"[{,]_\w", done.stdout), done.stdout  # e.g. {env,bench,_probe}
