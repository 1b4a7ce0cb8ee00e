"""``atomdyn-images build --rehearsal`` end to end, the private daemon's life cycle, the stand-in inputs."""

from __future__ import annotations

import fcntl
import json
import shutil
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import PATCHES, REPO, Daemon, need

from atomdyn_core.lock import load_lock
from atomdyn_images import render, standin_inputs
from atomdyn_images.cli import main
from atomdyn_images.daemon import start_daemon
from atomdyn_images.engine import DaemonUnreachable, Docker
from atomdyn_images.patching import read_series
from atomdyn_images.rehearsal import STANDIN_TAG, RehearsalError, Settings, rehearse

LOCK = REPO / "release-lock.json"


@pytest.mark.integration
def test_rehearsal_builds_both_images_labeled_and_cached(
    daemon: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "rehearsal"
    argv = ["build", "--rehearsal", "--lock", str(LOCK), "--docker-host", daemon.docker.host,
            "--rehearsal-dir", str(root), "--quiet"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"record: {root / 'build' / 'build-record.json'} (rehearsal: true)" in out
    assert any(line.startswith("rehearsal first build:") for line in out)
    assert out[-2].startswith("rehearsal second build:") and out[-2].endswith("(every layer cached)")

    lock = load_lock(LOCK)
    record = json.loads((root / "build" / "build-record.json").read_text())
    assert record["rehearsal"] is True and record["error"] == ""
    for override in ("rehearsal", f"base={STANDIN_TAG}", "native-stage=stand-in", "allow-unrecorded",
                     f"wheel-source=mirror:{root / 'mirror'}"):  # fmt: skip
        assert override in record["overrides"]
    assert all(image["all_cached"] for image in record["images"])
    inputs = {(i["kind"], i["name"]): i for i in record["inputs"]}
    for name in ("ai-dynamo", "ai-dynamo-runtime"):  # the real wheels, verified against the lock
        assert inputs[("wheel", lock.wheels[name].filename)]["sha256"] == lock.wheels[name].sha256
    assert inputs[("source", "ucx")]["origin"].startswith(f"mirror:{root / 'sources'}")
    assert inputs[("source", "nixl")]["detail"] == lock.sources["nixl"].commit

    tags = {image["target"]: image["tags"][0] for image in record["images"]}
    assert tags == {
        "base": render.release_tag(lock, rehearsal=True),
        "overlay": render.release_tag(lock, "-nixl-rocm", rehearsal=True),
    }
    assert all(tag.endswith("-rehearsal") for tag in tags.values())
    assert daemon.docker.image_id(render.release_tag(lock)) is None  # never the release's own tag
    for reference in (*tags.values(), STANDIN_TAG):
        assert daemon.docker.labels(reference)[render.REHEARSAL_LABEL].startswith("REHEARSAL:")
    overlay = daemon.docker.labels(tags["overlay"])
    assert overlay["io.atomdyn.lock.digest"] == lock.digest
    assert overlay["io.atomdyn.patches"] == ",".join(p.name for p in read_series(PATCHES))

    # The overlay holds the real compat wheels from packages/ on top of the stand-in ATOM.
    script = (
        "import atom, dmabuf_shim, nixl_compat, nixl_rocm; "
        "import importlib.metadata as m; print(atom.STAND_IN); print(m.version('dmabuf-shim'))"
    )
    shown = daemon.docker.run("run", "--rm", "--network", "none", tags["overlay"], "python3", "-c", script)
    assert shown.splitlines() == [standin_inputs.STAND_IN_NOTE.format(what="ROCm/ATOM"), "0.1.0"]


def test_rehearsal_refuses_options_it_sets_itself(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "--rehearsal", "--lock", str(LOCK), "--base", "x:1", "--stand-in-native"]) == 2
    assert "--rehearsal chooses --base, --stand-in-native itself" in capsys.readouterr().err


def test_rehearsal_directory_in_use_is_a_clear_error(tmp_path: Path) -> None:
    settings = Settings(repo=REPO, root=tmp_path, docker_host="unix:///nonexistent.sock")
    with (tmp_path / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RehearsalError, match=f"another rehearsal is using {tmp_path}"):
            rehearse(load_lock(LOCK), settings)


def test_unreachable_daemon_points_to_the_rehearsal(tmp_path: Path) -> None:
    with pytest.raises(DaemonUnreachable, match=r"atomdyn-images build --rehearsal"):
        Docker(host=f"unix://{tmp_path}/none.sock").ping()


@pytest.mark.integration
def test_private_daemon_is_reused_then_stopped_by_pid() -> None:
    need(shutil.which("dockerd") is not None or Path("/usr/sbin/dockerd").exists(), "dockerd (docker.io)")
    root = Path(tempfile.mkdtemp(prefix="atomdyn-img-life-"))
    first = start_daemon(root)
    try:
        again = start_daemon(root)
        assert (again.pid, again.started_here, first.started_here) == (first.pid, False, True)
        assert again.docker().ping()
        again.stop()  # not its child: it waits on /proc until the process has exited
        assert first.process is not None and first.process.wait(timeout=5) == 0
        assert not first.exec_root.exists() and not (root / "daemon.json").exists()
        mounts = Path("/proc/self/mounts").read_text()
        assert str(root) not in mounts and str(first.exec_root) not in mounts
        with pytest.raises(DaemonUnreachable):
            first.docker().ping()
    finally:
        if first.process is not None and first.process.poll() is None:
            first.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_stand_in_inputs_are_deterministic_and_say_so(tmp_path: Path) -> None:
    patches = read_series(PATCHES)
    one = standin_inputs.write_source_archive(
        tmp_path / "a", "nixl", "c0ffee", standin_inputs.preimage_files(patches)
    )
    two = standin_inputs.write_source_archive(
        tmp_path / "b", "nixl", "c0ffee", standin_inputs.preimage_files(patches)
    )
    assert one.read_bytes() == two.read_bytes()
    with tarfile.open(one) as tar:
        marker = tar.extractfile("nixl-c0ffee/STAND_IN")
        assert marker is not None and b"STAND-IN" in marker.read()
    wheel = standin_inputs.write_atom_wheel(tmp_path, "0.1.6rc0+rocm7.1")
    assert wheel.name == "atom-0.1.6rc0+rocm7.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("atom-0.1.6rc0+rocm7.1.dist-info/METADATA").decode()
        entry_points = archive.read("atom-0.1.6rc0+rocm7.1.dist-info/entry_points.txt").decode()
    assert "Summary: STAND-IN" in metadata
    assert "atom = atom.plugin.vllm.register:register_platform" in entry_points
    mtime = wheel.stat().st_mtime_ns
    standin_inputs.write_atom_wheel(tmp_path, "0.1.6rc0+rocm7.1")
    assert wheel.stat().st_mtime_ns == mtime  # unchanged bytes are not rewritten


@pytest.mark.integration
def test_rehearsal_with_its_own_daemon_stops_it_and_keeps_the_images(tmp_path: Path) -> None:
    need(shutil.which("dockerd") is not None or Path("/usr/sbin/dockerd").exists(), "dockerd (docker.io)")
    root = Path(tempfile.mkdtemp(prefix="atomdyn-img-own-"))
    lock = load_lock(LOCK)
    said: list[str] = []
    try:
        first = rehearse(lock, Settings(repo=REPO, root=root, quiet=True), said.append)
        pid = int(said[0].split("(pid ")[1].split(",")[0])
        assert said[0].startswith("rehearsal: dockerd started")
        assert not Path(f"/proc/{pid}").exists(), "the rehearsal's dockerd is still running"
        assert first.daemon == f"dockerd (pid {pid}) stopped; images kept in {root / 'data'}"
        assert first.second_all_cached and first.second.rehearsal

        kept = rehearse(lock, Settings(repo=REPO, root=root, quiet=True, keep_daemon=True), said.append)
        assert all(image.all_cached for image in kept.first.images)  # warm from the kept data-root
        assert [i.image_id for i in kept.first.images] == [i.image_id for i in first.second.images]
        running = start_daemon(root)
        assert not running.started_here and kept.daemon.startswith(f"dockerd kept running: pid {running.pid}")
        running.stop()
        assert (
            not Path(f"/proc/{running.pid}").exists() or "Z" in Path(f"/proc/{running.pid}/stat").read_text()
        )
    finally:
        state = root / "daemon.json"
        if state.exists():  # a failure above left a daemon: stop it by its PID
            start_daemon(root).stop()
        shutil.rmtree(root, ignore_errors=True)


def test_compat_wheels_must_match_the_stand_in_python(tmp_path: Path) -> None:
    from atomdyn_images.rehearsal import compat_wheels

    cache = REPO / ".atomdyn" / "compat-wheels"
    this = f"{sys.version_info[0]}.{sys.version_info[1]}"
    built = compat_wheels(REPO, cache, this, quiet=True)
    assert sorted(p.name.split("-")[0] for p in built.glob("*.whl")) == ["dmabuf_shim", "nixl_compat"]
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    with pytest.raises(RehearsalError, match=f"built for {tag}, but the stand-in base runs Python 3.99"):
        compat_wheels(REPO, cache, "3.99", quiet=True)
