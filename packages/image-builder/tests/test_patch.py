"""The patch series: content of the NIXL patch, applying it in order, and clear failures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import PATCHES, make_fixture, preimage_tree

from atomdyn_images import patching
from atomdyn_images.cli import main

NIXL_PATCH = PATCHES / "0001-ucx-opt-in-host-classified-vram.patch"
WARNING = "NIXL_COMPAT_HOST_VRAM: VRAM classified as HOST by UCX; registering as host memory"
TARGET = Path("src/plugins/ucx/ucx_utils.cpp")


def test_series_lists_the_nixl_patch() -> None:
    assert [p.name for p in patching.read_series(PATCHES)] == [NIXL_PATCH.name]


def test_patch_is_opt_in_and_logs_the_counted_line() -> None:
    diff = NIXL_PATCH.read_text().split("\ndiff --git", 1)[1].splitlines()
    added = [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
    removed = [line for line in diff if line.startswith("-") and not line.startswith("---")]
    assert removed == []  # the upstream error path stays as it is when the variable is not set to 1
    text = "\n".join(added)
    assert 'std::getenv("NIXL_COMPAT_ALLOW_HOST_VRAM")' in text
    assert 'std::strcmp(value, "1") == 0' in text
    assert f'"{WARNING}"' in text


def test_series_applies_in_order_to_a_fixture_tree(tmp_path: Path) -> None:
    tree = preimage_tree(tmp_path / "nixl", NIXL_PATCH)
    patching.apply_series(tree, patching.read_series(PATCHES))
    patched = (tree / TARGET).read_text()
    assert WARNING in patched
    assert patched.index("#include <cstdlib>") < patched.index("#include <cstring>")
    assert patched.index("hostClassifiedVramAllowed()") < patched.index(
        'NIXL_ERROR << "VRAM memory is detected'
    )


def test_hunk_that_does_not_apply_fails_clearly_and_leaves_the_tree(tmp_path: Path) -> None:
    tree = preimage_tree(tmp_path / "nixl", NIXL_PATCH)
    source = tree / TARGET
    source.write_text(
        source.read_text().replace("if (attr.mem_type == UCS_MEMORY_TYPE_HOST) {", "if (other) {")
    )
    before = source.read_text()
    with pytest.raises(
        patching.PatchError, match=r"patch 0001-ucx-opt-in-host-classified-vram.patch does not apply"
    ):
        patching.apply_series(tree, patching.read_series(PATCHES))
    assert source.read_text() == before


def test_second_patch_checked_against_the_first_ones_result(tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES, patches)
    # The same patch twice: the second cannot apply on top of the first; nothing may be written.
    (patches / "series").write_text(f"{NIXL_PATCH.name}\n# again\n{NIXL_PATCH.name}\n")
    tree = preimage_tree(tmp_path / "nixl", NIXL_PATCH)
    before = (tree / TARGET).read_text()
    with pytest.raises(patching.PatchError, match="does not apply"):
        patching.apply_series(tree, patching.read_series(patches))
    assert (tree / TARGET).read_text() == before


def test_series_naming_a_missing_patch(tmp_path: Path) -> None:
    (tmp_path / "series").write_text("0002-missing.patch\n")
    with pytest.raises(patching.PatchError, match=r"series:1: patch 0002-missing.patch is listed but"):
        patching.read_series(tmp_path)


def test_cli_patch_fetches_verified_source_from_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fx = make_fixture(tmp_path, "atomdyn-test-patch")
    dest = tmp_path / "out" / "nixl"
    rc = main(["patch", str(dest), "--from-lock", "nixl", "--lock", str(fx.lock_path),
               "--source-mirror", str(fx.source_mirror), "--patches", str(PATCHES)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert WARNING in (dest / TARGET).read_text()


def test_cli_patch_refuses_a_tampered_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fx = make_fixture(tmp_path, "atomdyn-test-patch")
    archive = next(fx.source_mirror.glob("nixl-*.tar.gz"))
    archive.write_bytes(archive.read_bytes() + b"\0")
    rc = main(["patch", str(tmp_path / "nixl"), "--from-lock", "nixl", "--lock", str(fx.lock_path),
               "--source-mirror", str(fx.source_mirror), "--patches", str(PATCHES)])  # fmt: skip
    assert rc == 2
    assert "sha256 mismatch" in capsys.readouterr().err
    assert not (tmp_path / "nixl").exists()


def test_cli_patch_refuses_unrecorded_archive_without_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fx = make_fixture(tmp_path, "atomdyn-test-patch")
    raw = json.loads(fx.lock_path.read_text())
    raw["sources"]["ucx"]["archive"].update(sha256="unrecorded", size="unrecorded")
    fx.write_lock(raw)
    rc = main(["patch", str(tmp_path / "ucx"), "--from-lock", "ucx", "--lock", str(fx.lock_path),
               "--source-mirror", str(fx.source_mirror), "--patches", str(PATCHES)])  # fmt: skip
    assert rc == 2
    assert "hash not yet recorded" in capsys.readouterr().err
