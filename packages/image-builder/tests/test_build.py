"""Real builds through a Docker daemon the tests start, on a stand-in base made from this host."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from conftest import PATCHES, REPO, Daemon, Fixture

from atomdyn_core.lock import load_lock
from atomdyn_images import render
from atomdyn_images.build import (
    VLLM_COMMIT_LABEL,
    BuildError,
    BuildOptions,
    BuildRecord,
    build,
    build_staged,
    stage_base,
)
from atomdyn_images.cli import main
from atomdyn_images.engine import DaemonUnreachable, Docker, DockerError
from atomdyn_images.patching import PatchError
from atomdyn_images.wheelfile import write_wheel

pytestmark = pytest.mark.integration

VLLM_COMMIT = "0b3ba88f165976e77ca5e6a7a3f5bba4562b80af"  # the release lock's sources.vllm
# The lock's ATOM base by tag (its digest is unrecorded): what the build uses with --allow-unrecorded, no --base.
LOCK_BASE_TAG = "rocm/atom-dev:v0.1.6-rc0"


def options(fx: Fixture, daemon: Daemon, **extra: object) -> BuildOptions:
    values: dict[str, object] = {
        "workdir": fx.workdir, "base": daemon.standin, "mirror": str(fx.mirror), "source_mirror": str(fx.source_mirror),
        "patches": PATCHES, "compat_wheels": fx.compat, "native": "stand-in", "targets": ("base",),
    }  # fmt: skip
    values.update(extra)
    return BuildOptions(**values)  # type: ignore[arg-type]


def test_base_build_labels_record_validator_and_cache(fixture: Fixture, daemon: Daemon) -> None:
    lock = load_lock(fixture.lock_path)
    record = build(lock, options(fixture, daemon), daemon.docker)
    (image,) = record.images
    tag = render.release_tag(lock)
    assert image.tags == [tag]
    assert daemon.docker.image_id(tag) == image.image_id
    labels = daemon.docker.labels(tag)
    assert labels["io.atomdyn.lock.digest"] == lock.digest
    assert labels["io.atomdyn.overrides"] == f"base={daemon.standin},wheel-source=mirror:{fixture.mirror}"
    assert labels["org.opencontainers.image.version"] == "1.3.0-0.1.6rc0"
    assert labels["io.atomdyn.atom.commit"] == "f9017b58b8369a55d14e153b51cadd81ab2ba65a"
    assert not image.all_cached

    saved = json.loads((fixture.workdir / "build-record.json").read_text())
    assert saved["lock_digest"] == lock.digest
    assert saved["images"][0]["image_id"] == image.image_id
    wheels = {i["name"]: i["sha256"] for i in saved["inputs"] if i["kind"] == "wheel"}
    assert wheels == {w.filename: w.sha256 for w in lock.wheels.values()}
    assert f"base={daemon.standin}" in saved["overrides"]


def test_validator_in_stand_in_image_reports_each_check(fixture: Fixture, daemon: Daemon) -> None:
    lock = load_lock(fixture.lock_path)
    build(lock, options(fixture, daemon), daemon.docker)
    with pytest.raises(DockerError):
        daemon.docker.run("run", "--rm", "--network", "none", render.release_tag(lock), "atomdyn-validate")
    # The same run without the exit-status check, to read every line.
    shell = "atomdyn-validate --json; echo exit=$?"
    out = daemon.docker.run(
        "run", "--rm", "--network", "none", render.release_tag(lock), "/bin/sh", "-c", shell
    )
    body, status = out.rsplit("\n", 1)
    assert status == "exit=1"
    checks = {c["name"]: (c["ok"], c["reason"]) for c in json.loads(body)["checks"]}
    found = {name: ok for name, (ok, _) in checks.items()}
    # The stand-in Dynamo wheel has the role flag's argument group but no worker modules (dynamo.vllm.main), and
    # the container is run without the workers' argv.
    assert found == {
        "dynamo-version": True, "atom-version": True, "vllm-commit": False, "torch-rocm": False,
        "atom-platform": True, "atom-qwen3": False, "dynamo-imports": False,
        "dynamo-disaggregation-flag": True, "dynamo-worker-args": False,
    }  # fmt: skip
    assert checks["vllm-commit"][1].startswith(
        "vLLM is not installed: the base is likely a native ATOM image"
    )
    assert checks["dynamo-imports"][1].startswith("dynamo.vllm.main does not import: ModuleNotFoundError")
    assert checks["dynamo-worker-args"][1].startswith("no worker argv given")


def test_unchanged_rebuild_hits_the_cache_in_every_layer(fixture: Fixture, daemon: Daemon) -> None:
    lock = load_lock(fixture.lock_path)
    first = build(lock, options(fixture, daemon, targets=("base", "overlay")), daemon.docker)
    again = build(lock, options(fixture, daemon, targets=("base", "overlay")), daemon.docker)
    assert [i.image_id for i in again.images] == [i.image_id for i in first.images]
    for image in again.images:
        assert image.steps, f"{image.target}: no layer steps parsed"
        assert image.all_cached, f"{image.target}: {image.steps}"


def test_overlay_with_stand_in_native_stage(fixture: Fixture, daemon: Daemon) -> None:
    lock = load_lock(fixture.lock_path)
    record = build(lock, options(fixture, daemon, targets=("base", "overlay")), daemon.docker)
    overlay = record.images[1]
    assert overlay.tags == [render.release_tag(lock, "-nixl-rocm")]
    labels = daemon.docker.labels(overlay.image_id)
    assert labels["io.atomdyn.native-stage"] == "stand-in"
    assert "native-stage=stand-in" in labels["io.atomdyn.overrides"]
    assert labels["io.atomdyn.patches"] == "0001-ucx-opt-in-host-classified-vram.patch"
    assert "native-stage=stand-in" in record.overrides
    kinds = {(i.kind, i.name) for i in record.inputs}
    assert ("patch", "0001-ucx-opt-in-host-classified-vram.patch") in kinds
    assert ("source", "nixl") in kinds
    script = (
        "import importlib.metadata as m, nixl_rocm, rixl, dmabuf_shim; "
        "print(m.version('nixl-rocm'), m.version('nixl-compat'), m.version('dmabuf-shim'))"
    )
    out = daemon.docker.run("run", "--rm", "--network", "none", overlay.image_id, "python3", "-c", script)
    assert out == "0.0.0 0.1.0 0.1.0"
    patched = fixture.workdir / "overlay" / "sources" / "nixl" / "src" / "plugins" / "ucx" / "ucx_utils.cpp"
    assert "NIXL_COMPAT_HOST_VRAM: VRAM classified as HOST by UCX" in patched.read_text()


def test_tampered_wheel_fails_inside_the_build_and_nothing_is_tagged(
    fixture: Fixture, daemon: Daemon
) -> None:
    lock = load_lock(fixture.lock_path)
    opts = options(fixture, daemon)
    record = BuildRecord(lock.digest, "", "", "", [])
    dockerfile = stage_base(lock, opts, record)
    # Past the host's check: the build context itself is altered, so only the in-build hash check can catch it.
    wheel = next((dockerfile.parent / "wheels").glob("ai_dynamo-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"tampered")
    tag = render.release_tag(lock)
    with pytest.raises(DockerError, match="THESE PACKAGES DO NOT MATCH THE HASHES"):
        build_staged(daemon.docker, dockerfile, "base", tag, lock, "none")
    assert daemon.docker.image_id(tag) is None


def test_tampered_mirror_wheel_is_refused_before_the_build(fixture: Fixture, daemon: Daemon) -> None:
    lock = load_lock(fixture.lock_path)
    wheel = next(fixture.mirror.glob("atom-*.whl"))
    wheel.write_bytes(wheel.read_bytes()[:-1] + b"X")
    with pytest.raises(BuildError, match=r"atom-rocm7.1: .*sha256 mismatch"):
        build(lock, options(fixture, daemon), daemon.docker)
    assert daemon.docker.image_id(render.release_tag(lock)) is None


def test_wheel_missing_from_the_mirror(
    fixture: Fixture, daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    next(fixture.mirror.glob("ai_dynamo_runtime-*.whl")).unlink()
    rc = main(["build", "--lock", str(fixture.lock_path), "--workdir", str(fixture.workdir), "--base", daemon.standin,
               "--mirror", str(fixture.mirror), "--patches", str(PATCHES), "--target", "base",
               "--docker-host", daemon.docker.host, "--quiet"])  # fmt: skip
    assert rc == 2
    assert "is missing from the mirror" in capsys.readouterr().err
    assert daemon.docker.image_id(render.release_tag(load_lock(fixture.lock_path))) is None


def test_missing_base_digest_without_override(fixture: Fixture, daemon: Daemon) -> None:
    lock = load_lock(fixture.lock_path)
    with pytest.raises(Exception, match="has no recorded digest"):
        build(lock, options(fixture, daemon, base=""), daemon.docker)
    assert daemon.docker.image_id(render.release_tag(lock)) is None


def test_unreachable_daemon_says_how_to_start_one(fixture: Fixture, tmp_path: Path) -> None:
    docker = Docker(host=f"unix://{tmp_path}/no-such.sock")
    with pytest.raises(
        DaemonUnreachable, match=r"cannot reach a Docker daemon .*start one, e\.g\. `dockerd --data-root"
    ):
        build(load_lock(fixture.lock_path), BuildOptions(workdir=fixture.workdir, base="x:1"), docker)


def test_cli_build_then_bench(fixture: Fixture, daemon: Daemon, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--lock", str(fixture.lock_path), "--workdir", str(fixture.workdir), "--base", daemon.standin,
            "--mirror", str(fixture.mirror), "--source-mirror", str(fixture.source_mirror), "--patches", str(PATCHES),
            "--compat-wheels", str(fixture.compat), "--stand-in-native", "--docker-host", daemon.docker.host]  # fmt: skip
    assert main(["bench", *args, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "bench first     build:" in out
    assert "bench unchanged build:" in out
    assert out.splitlines()[-1].endswith("every layer cached: yes")


def test_patch_that_does_not_apply_stops_the_overlay(
    fixture: Fixture, daemon: Daemon, tmp_path: Path
) -> None:
    lock = load_lock(fixture.lock_path)
    patches = tmp_path / "bad-patches"
    patches.mkdir()
    (patches / "0001-nope.patch").write_text(
        "diff --git a/src/plugins/ucx/ucx_utils.cpp b/src/plugins/ucx/ucx_utils.cpp\n"
        "--- a/src/plugins/ucx/ucx_utils.cpp\n+++ b/src/plugins/ucx/ucx_utils.cpp\n"
        "@@ -1,2 +1,2 @@\n-no such line\n+replacement\n context that is not there\n"
    )
    (patches / "series").write_text("0001-nope.patch\n")
    with pytest.raises(PatchError, match=r"patch 0001-nope.patch does not apply"):
        build(lock, options(fixture, daemon, targets=("base", "overlay"), patches=patches), daemon.docker)
    assert daemon.docker.image_id(render.release_tag(lock, "-nixl-rocm")) is None
    saved = json.loads((fixture.workdir / "build-record.json").read_text())
    assert saved["error"].startswith("PatchError: patch 0001-nope.patch does not apply")
    assert [image["target"] for image in saved["images"]] == ["base"]


def test_a_wheel_for_another_python_fails_the_overlay_build_naming_both(
    fixture: Fixture, daemon: Daemon
) -> None:
    """The stand-in runs this host's Python; a dmabuf-shim wheel built for the next Python must not install."""
    lock = load_lock(fixture.lock_path)
    build(lock, options(fixture, daemon), daemon.docker)
    other = f"cp{sys.version_info[0]}{sys.version_info[1] + 1}"
    next(fixture.compat.glob("dmabuf_shim-*.whl")).unlink()
    write_wheel(fixture.compat, "dmabuf-shim", "0.1.0", {"dmabuf_shim/__init__.py": ""},
                tag=f"{other}-{other}-linux_x86_64")  # fmt: skip
    with pytest.raises(DockerError) as failed:
        build(lock, options(fixture, daemon, targets=("overlay",)), daemon.docker)
    here = f"Python {sys.version_info[0]}.{sys.version_info[1]} (cp{sys.version_info[0]}{sys.version_info[1]}"
    assert (
        f"dmabuf_shim-0.1.0-{other}-{other}-linux_x86_64.whl: built for {other}-{other}-linux_x86_64"
        in str(failed.value)
    )
    assert f"which does not fit this image's {here}" in str(failed.value)
    assert daemon.docker.image_id(render.release_tag(lock, "-nixl-rocm")) is None


def test_build_network_is_an_override_in_labels_and_record(fixture: Fixture, daemon: Daemon) -> None:
    lock = load_lock(fixture.lock_path)
    record = build(lock, options(fixture, daemon, network="host"), daemon.docker)
    labels = daemon.docker.labels(record.images[0].image_id)
    assert labels["io.atomdyn.build-network"] == "host"
    assert "build-network=host" in labels["io.atomdyn.overrides"].split(",")
    assert "build-network=host" in record.overrides


def test_source_build_without_network_needs_the_subproject_archives(fixture: Fixture, daemon: Daemon) -> None:
    """Refused while staging, before any docker build, naming both ways to provide them."""
    lock = load_lock(fixture.lock_path)
    build(lock, options(fixture, daemon), daemon.docker)
    raw = fixture.raw
    tools = next(fixture.mirror.glob("ai_dynamo-*.whl"))  # any small real wheel stands for the build tools
    raw["wheels"]["overlay-build-tool"] = {  # type: ignore[index]
        "filename": tools.name, "source": "pypi", "project": "ai-dynamo", "version": "1.3.0.post1",
        "size": tools.stat().st_size, "sha256": hashlib.sha256(tools.read_bytes()).hexdigest(),
        "roles": ["image-overlay"],
    }  # fmt: skip
    lock = load_lock(fixture.write_lock(raw))
    build(lock, options(fixture, daemon), daemon.docker)
    shim = REPO / "packages" / "dmabuf-shim"
    opts = options(fixture, daemon, targets=("overlay",), native="source", shim_source=shim)
    with pytest.raises(
        BuildError, match=r"--subprojects DIR .* or let meson download them with --network host"
    ):
        build(lock, opts, daemon.docker)
    staged = fixture.workdir / "overlay"
    assert (staged / "build-tools" / tools.name).is_file()
    assert f"build-tools/{tools.name} --hash=sha256:" in (staged / "requirements-build.txt").read_text()
    assert (staged / "sources" / "dmabuf-shim" / "pyproject.toml").is_file()
    assert not (staged / "sources" / "dmabuf-shim" / "build").exists()
    assert daemon.docker.image_id(render.release_tag(lock, "-nixl-rocm")) is None


def _with_vllm_source(fixture: Fixture) -> Fixture:
    raw = fixture.raw
    raw["sources"]["vllm"] = {  # type: ignore[index]
        "repository": "https://github.com/vllm-project/vllm", "version": "0.22.0", "commit": VLLM_COMMIT,
    }  # fmt: skip
    fixture.write_lock(raw)
    return fixture


def _stand_in_as(daemon: Daemon, tmp: Path, tag: str, vllm_commit: str | None) -> None:
    """The stand-in under ``tag`` (in this session's daemon only), with ATOM's vLLM label or, like a native
    ATOM image, without it."""
    if vllm_commit is None:
        daemon.docker.tag(daemon.standin, tag)
        return
    context = tmp / "labelled-base"
    context.mkdir()
    (context / "Dockerfile").write_text(f'FROM {daemon.standin}\nLABEL {VLLM_COMMIT_LABEL}="{vllm_commit}"\n')
    daemon.docker.tag(daemon.docker.build(context, context / "Dockerfile").image_id, tag)


def test_a_base_by_tag_without_atom_s_vllm_label_is_refused(
    fixture: Fixture, daemon: Daemon, tmp_path: Path
) -> None:
    """The lock's plain ATOM tag is a native image (no vLLM, no label): by tag alone, without --base, refused."""
    lock = load_lock(_with_vllm_source(fixture).lock_path)
    _stand_in_as(daemon, tmp_path, LOCK_BASE_TAG, None)
    with pytest.raises(DockerError) as refused:
        build(lock, options(fixture, daemon, base="", allow_unrecorded=True), daemon.docker)
    message = str(refused.value)
    assert f"base image {LOCK_BASE_TAG} carries no {VLLM_COMMIT_LABEL} label (a native ATOM tag" in message
    assert "vllm-v<version>-nightly_<date>" in message and "--base IMAGE" in message
    assert daemon.docker.image_id(render.release_tag(lock)) is None
    saved = json.loads((fixture.workdir / "build-record.json").read_text())
    assert saved["error"].startswith("DockerError: base image") and saved["base_vllm_commit"] == ""


def test_a_base_labelled_with_another_vllm_commit_is_refused_even_as_an_override(
    fixture: Fixture, daemon: Daemon, tmp_path: Path
) -> None:
    lock = load_lock(_with_vllm_source(fixture).lock_path)
    other = "1234567890abcdef1234567890abcdef12345678"
    _stand_in_as(daemon, tmp_path, "atomdyn-standin:other-vllm", other)
    with pytest.raises(DockerError) as refused:
        build(lock, options(fixture, daemon, base="atomdyn-standin:other-vllm"), daemon.docker)
    assert f"carries vLLM {other} ({VLLM_COMMIT_LABEL}), but the lock's sources.vllm is {VLLM_COMMIT}" in str(
        refused.value
    )
    assert daemon.docker.image_id(render.release_tag(lock)) is None
    assert json.loads((fixture.workdir / "build-record.json").read_text())["base_vllm_commit"] == other


def test_a_vllm_base_of_the_lock_s_commit_builds_and_is_recorded(
    fixture: Fixture, daemon: Daemon, tmp_path: Path
) -> None:
    lock = load_lock(_with_vllm_source(fixture).lock_path)
    _stand_in_as(daemon, tmp_path, LOCK_BASE_TAG, VLLM_COMMIT)
    record = build(lock, options(fixture, daemon, base="", allow_unrecorded=True), daemon.docker)
    assert record.base_vllm_commit == VLLM_COMMIT
    assert daemon.docker.labels(render.release_tag(lock))[VLLM_COMMIT_LABEL] == VLLM_COMMIT
    assert json.loads((fixture.workdir / "build-record.json").read_text())["base_vllm_commit"] == VLLM_COMMIT
