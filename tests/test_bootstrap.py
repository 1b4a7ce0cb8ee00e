"""scripts/bootstrap.sh on a login node: run as an unprivileged user, it makes .venv and lists the Debian
packages it could not install instead of stopping."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABSENT = "atomdyn-absent-package-for-tests"  # no Debian package has this name: never installed
USER = "nobody"
STEPS_TIMEOUT_S = 300


@pytest.fixture
def login_node_copy() -> Iterator[Path]:
    """The bootstrap script in a copy of the checkout's skeleton that an unprivileged user owns."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        if os.environ.get("CI") == "true":
            pytest.fail(
                "the bootstrap test needs root and setpriv (util-linux) to become an unprivileged user"
            )
        pytest.skip("needs root and setpriv to run the script as an unprivileged user")
    copy = Path(tempfile.mkdtemp(prefix="atomdyn-bootstrap-", dir="/tmp"))
    try:
        (copy / "scripts").mkdir()
        shutil.copy2(ROOT / "scripts" / "bootstrap.sh", copy / "scripts" / "bootstrap.sh")
        (copy / "requirements").mkdir()
        apt = (ROOT / "requirements" / "apt.txt").read_text(encoding="utf-8")
        (copy / "requirements" / "apt.txt").write_text(apt + f"{ABSENT}\n")
        user = pwd.getpwnam(USER)
        for path in (copy, *copy.rglob("*")):
            os.chown(path, user.pw_uid, user.pw_gid)
        yield copy
    finally:
        shutil.rmtree(copy)


def test_without_root_it_makes_the_venv_and_lists_what_it_could_not_install(login_node_copy: Path) -> None:
    # The script's own steps up to the Python installs (which need a package index), one per line so that
    # its `set -e` stops at a failing one, then its closing report.
    steps = "source scripts/bootstrap.sh\ninstall_apt_packages\ncreate_venv\nreport_not_installed\n"
    done = subprocess.run(
        ["setpriv", f"--reuid={USER}", "--regid=nogroup", "--clear-groups", "bash", "-c", steps],
        cwd=login_node_copy,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(login_node_copy), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=STEPS_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    venv_python = login_node_copy / ".venv" / "bin" / "python"
    assert venv_python.exists()
    assert (login_node_copy / ".venv").stat().st_uid == pwd.getpwnam(USER).pw_uid
    lines = done.stderr.splitlines()
    missing = [line for line in lines if "NOT installed (needs root): Debian packages" in line]
    assert len(missing) == 1, done.stderr
    assert missing[0].endswith(f" {ABSENT}") or f" {ABSENT} " in missing[0]
    assert " bash " not in f"{missing[0]} "  # installed packages are not listed
    assert f"apt-get install {ABSENT}" in done.stderr
    assert "not root: leaving out the Debian packages" in done.stderr
    works = subprocess.run([str(venv_python), "-m", "pip", "--version"], capture_output=True, text=True)
    assert works.returncode == 0, works.stderr
