"""`atomdyn-images` as a command: a hostile lock, an output path it cannot use and a closed stdout end in one
clear line, never a traceback (issue 25, items 13 and 14)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PATCHES, REPO

from atomdyn_images.cli import main

DIGEST = "sha256:" + "ab" * 32


def test_tags_of_a_deeply_nested_lock_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "release-lock.json"
    lock.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["tags", "--lock", str(lock)]) == 2
    err = capsys.readouterr().err
    assert f"atomdyn-images: error: $: {lock}: JSON nested more than" in err


def test_render_into_a_path_that_is_a_file_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = json.loads((REPO / "release-lock.json").read_text())
    raw["images"]["atom_base"]["digest"] = DIGEST
    lock = tmp_path / "release-lock.json"
    lock.write_text(json.dumps(raw))
    out = tmp_path / "rendered"
    out.write_text("a file where the output directory should be\n")
    args = ["render", "--lock", str(lock), "--atom-variant", "rocm7.1", "--patches", str(PATCHES)]
    assert main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"atomdyn-images: error: {out}: " in err and "exists" in err
    assert out.read_text() == "a file where the output directory should be\n"


@pytest.mark.parametrize("args", [["tags"], ["tags", "--json"], ["--help"], ["--version"]])
def test_a_closed_stdout_ends_quietly(args: list[str]) -> None:
    code = "import sys; from atomdyn_images.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert "stdout is closed" in done.stderr
