"""The run-owned etcd's binary: the lock's Debian etcd-server package, verified, then its usr/bin/etcd checked."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from atomdyn_core.fetch import APT_ARCHIVES
from atomdyn_core.lock import load_lock
from atomdyn_launchers.config.cluster import ClusterConfig, parse_cluster_env
from atomdyn_launchers.job.owned_etcd import OwnedEtcdError
from atomdyn_launchers.nodes.etcd_owned import etcd_binary, extract_etcd

REPO = Path(__file__).resolve().parents[4]
IN_CI = os.environ.get("CI") == "true"


def _tar_gz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _ar(members: dict[str, bytes]) -> bytes:
    out = bytearray(b"!<arch>\n")
    for name, data in members.items():
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return bytes(out)


def _deb(path: Path, binary: bytes, listed_md5: str) -> Path:
    control = _tar_gz({"md5sums": f"{listed_md5}  usr/bin/etcd\n".encode()})
    path.write_bytes(_ar({"debian-binary": b"2.0\n", "control.tar.gz": control,
                          "data.tar.gz": _tar_gz({"usr/bin/etcd": binary})}))  # fmt: skip
    return path


def test_the_binary_is_checked_against_the_package_md5sums(tmp_path: Path) -> None:
    binary = b"#!/bin/sh\necho etcd\n"
    good = _deb(tmp_path / "good.deb", binary, hashlib.md5(binary, usedforsecurity=False).hexdigest())
    assert extract_etcd(good) == binary
    bad = _deb(tmp_path / "bad.deb", binary, "0" * 32)
    with pytest.raises(OwnedEtcdError, match=r"usr/bin/etcd in bad.deb: md5 \w+ differs from its md5sums"):
        extract_etcd(bad)
    (tmp_path / "not.deb").write_bytes(b"PK\x03\x04 a zip")
    with pytest.raises(OwnedEtcdError, match=r"not\.deb is not a Debian package"):
        extract_etcd(tmp_path / "not.deb")
    (tmp_path / "empty.deb").write_bytes(_ar({"debian-binary": b"2.0\n", "control.tar.gz": _tar_gz({})}))
    with pytest.raises(OwnedEtcdError, match=r"empty.deb has no data.tar"):
        extract_etcd(tmp_path / "empty.deb")


def _config(shared: Path) -> ClusterConfig:
    return parse_cluster_env(
        "SLURM_ACCOUNT=a\nSLURM_PARTITION=p\nSLURM_QOS=q\nPRIMARY_NODE=n1\nPREFILL_NODE=n1\nDECODE_NODE=n2\n"
        f"SHARED_DIR={shared}\nMODEL_PATH={shared}\nENGINE_PROFILE=mocker\nRUNTIME=venv\nPROJECT_DIR={REPO}\n"
    )


def test_the_lock_etcd_package_is_fetched_verified_and_runs(tmp_path: Path) -> None:
    deb = next(d for d in load_lock(REPO / "release-lock.json").debs.values() if "etcd" in d.roles)
    if not (APT_ARCHIVES / deb.filename).is_file() and shutil.which("apt-get") is None:
        if IN_CI:
            pytest.fail(f"neither apt's cache nor apt-get can provide {deb.filename}")
        pytest.skip(f"neither apt's cache nor apt-get can provide {deb.filename}")
    config = _config(tmp_path)
    binary = etcd_binary(config)
    assert binary.parent.name == f"etcd-{deb.version}-{(deb.sha256 or '')[:16]}"
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    assert f"etcd Version: {deb.version.split('-')[0]}" in version
    # Verified once: the next run reuses the placed binary, and a changed file is replaced, not trusted.
    assert etcd_binary(config) == binary
    binary.write_bytes(b"tampered")
    assert etcd_binary(config) == binary and binary.read_bytes() != b"tampered"
    # A lock whose hash does not match the package refuses it, naming both digests.
    lock = json.loads((REPO / "release-lock.json").read_text())
    lock["debs"][deb.name]["sha256"] = "0" * 64
    wrong = tmp_path / "wrong-lock.json"
    wrong.write_text(json.dumps(lock))
    with pytest.raises(OwnedEtcdError, match=r"sha256 mismatch: expected 0{64}, actual "):
        etcd_binary(_config(tmp_path / "other"), lock_path=wrong)
