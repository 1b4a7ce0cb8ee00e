"""`nox -s update_lock` records what it can fetch and never invents what it cannot."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from atomdyn_core.lock import load_lock

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = b"a release asset copied by hand" * 1000


def test_records_what_the_mirror_has_and_keeps_the_rest_unrecorded(tmp_path: Path) -> None:
    lock_path = tmp_path / "release-lock.json"
    shutil.copyfile(ROOT / "release-lock.json", lock_path)
    before = load_lock(lock_path)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / before.wheels["atom-rocm7.2"].filename).write_bytes(PAYLOAD)

    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "update_lock.py"), "--lock", str(lock_path),
         "--mirror", str(mirror), "--only", "atom-rocm7.2", "atom-rocm7.1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    after = load_lock(lock_path)
    assert after.wheels["atom-rocm7.2"].sha256 == hashlib.sha256(PAYLOAD).hexdigest()
    assert after.wheels["atom-rocm7.2"].size == len(PAYLOAD)
    assert not after.wheels["atom-rocm7.1"].recorded  # not in the mirror: still unrecorded, never invented
    assert "atom-rocm7.1" in done.stderr and "missing from the mirror" in done.stderr
    assert after.digest != before.digest and f"digest {after.digest}" in done.stdout
