"""`atomdyn-lock` as a command: usage errors name the option and what it allows; a closed stdout ends it
quietly (issue 25, items 13 and 14)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ROLES = ["accuracy", "etcd", "gpu-evidence", "image-base", "image-overlay", "rehearsal"]


def lock_cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "atomdyn_core.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
        **kwargs,
    )


def test_an_unknown_role_is_a_usage_error_listing_the_known_ones(tmp_path: Path) -> None:
    result = lock_cli("fetch", "--role", "nope", "--cache", str(tmp_path / "cache"), "--quiet")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "argument --role: invalid choice: 'nope'" in result.stderr
    assert ", ".join(f"'{r}'" for r in ROLES) in result.stderr
    assert not (tmp_path / "cache").exists()


def test_a_known_role_still_fetches(tmp_path: Path) -> None:
    payload = b"a wheel's bytes" * 10
    name = "demo-1.0-py3-none-any.whl"
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / name).write_bytes(payload)
    lock = json.loads((REPO / "release-lock.json").read_text())
    lock["wheels"] = {
        "demo": {
            "filename": name,
            "source": "pypi",
            "project": "demo",
            "version": "1.0",
            "sha256": hashlib.sha256(payload).hexdigest(),
            "size": len(payload),
            "roles": ["etcd"],
        }
    }
    lock_path = tmp_path / "release-lock.json"
    lock_path.write_text(json.dumps(lock))
    cache = tmp_path / "cache"
    args = ("--lock", str(lock_path), "fetch", "--quiet", "--cache", str(cache), "--mirror", str(mirror))
    result = lock_cli(*args, "--role", "etcd")
    assert result.returncode == 0, result.stderr
    assert (cache / name).read_bytes() == payload


@pytest.mark.parametrize("args", [["verify"], ["table"], ["--help"], ["--version"]])
def test_a_closed_stdout_ends_quietly(args: list[str]) -> None:
    """`atomdyn-lock verify >&-`: no traceback; the output went nowhere, so the status is 1."""
    code = "import sys; from atomdyn_core.cli import main; sys.exit(main(sys.argv[1:]))"
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
