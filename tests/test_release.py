"""What `nox -s release` promises a node: from dist/ alone, with no network, the native packages install and run.

These tests read the release in dist/ (CI makes it with scripts/check_release_reproducible.sh before the test
suites run); outside CI, without a release, they say skipped.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
SIMPLE = DIST / "simple"
NATIVE = ("dmabuf-shim", "mori-repro")
GLIBC_BASELINE = (2, 28)
RUN_TIMEOUT_S = 300


def projects() -> dict[str, dict[str, object]]:
    """Every package's [project] table, by distribution name."""
    out = {}
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        out[project["name"]] = project
    return out


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def dist() -> Path:
    if not (DIST / "SHA256SUMS").is_file():
        message = "no release in dist/: run `nox -s release` first"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return DIST


@pytest.fixture(scope="module")
def doubles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The C doubles of libibverbs, the HSA runtime and the CUDA driver (testing/doubles), built here."""
    spec = importlib.util.spec_from_file_location(
        "release_doubles_build", ROOT / "testing" / "doubles" / "build.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built: dict[str, Path] = module.build_doubles(tmp_path_factory.mktemp("doubles"))
    return built


def wheel_of(dist: Path, project: str) -> Path:
    [wheel] = dist.glob(f"{project.replace('-', '_')}-*.whl")
    return wheel


def run(*argv: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )
    assert proc.returncode == 0, (
        f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    )
    return proc


def test_sha256sums_cover_every_file_including_the_index(dist: Path) -> None:
    listed = {}
    for line in (dist / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = line.split("  ", 1)
        listed[name] = digest
    present = {str(p.relative_to(dist)) for p in dist.rglob("*") if p.is_file() and p.name != "SHA256SUMS"}
    assert set(listed) == present
    for name, digest in listed.items():
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest, name
    assert "simple/index.html" in listed


def test_simple_index_links_every_artifact_with_its_sha256(dist: Path) -> None:
    top = (SIMPLE / "index.html").read_text(encoding="utf-8")
    names = sorted(normalized(p) for p in projects())
    assert re.findall(r'<a href="([^"]+)/">', top) == names
    for name in names:
        page = (SIMPLE / name / "index.html").read_text(encoding="utf-8")
        links = re.findall(r'<a href="\.\./\.\./([^"#]+)#sha256=([0-9a-f]{64})"', page)
        files = {f for f, _ in links}
        assert any(f.endswith(".whl") for f in files) and any(f.endswith(".tar.gz") for f in files), name
        for filename, digest in links:
            assert hashlib.sha256((dist / filename).read_bytes()).hexdigest() == digest, filename
        assert 'data-requires-python="&gt;=3.10"' in page


def test_every_wheel_ships_the_license_and_complete_metadata(dist: Path) -> None:
    license_text = (ROOT / "LICENSE").read_bytes()
    for name, project in projects().items():
        with zipfile.ZipFile(wheel_of(dist, name)) as wheel:
            info = next(n.split("/")[0] for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            assert wheel.read(f"{info}/licenses/LICENSE") == license_text, name
            metadata = wheel.read(f"{info}/METADATA").decode()
        assert "License-Expression: Apache-2.0\n" in metadata, name
        assert f"Version: {project['version']}\n" in metadata, name
        assert "Classifier: Programming Language :: Python :: 3.10\n" in metadata, name
        assert "Classifier: Operating System :: POSIX :: Linux\n" in metadata, name


def test_every_package_carries_the_license_text_itself() -> None:
    """A copy, not a link: an sdist must carry the text (pip refuses an sdist member linking outside it)."""
    license_text = (ROOT / "LICENSE").read_bytes()
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        copy = pyproject.with_name("LICENSE")
        assert not copy.is_symlink() and copy.read_bytes() == license_text, copy


def test_every_sdist_carries_the_license_as_a_file(dist: Path) -> None:
    license_text = (ROOT / "LICENSE").read_bytes()
    for sdist in sorted(dist.glob("*.tar.gz")):
        with tarfile.open(sdist) as archive:
            [member] = [
                m for m in archive.getmembers() if m.name.count("/") == 1 and m.name.endswith("/LICENSE")
            ]
            assert member.isfile(), f"{sdist.name}: LICENSE is not a regular file"
            extracted = archive.extractfile(member)
            assert extracted is not None and extracted.read() == license_text, sdist.name


def test_the_launchers_ship_the_job_supervisor(dist: Path) -> None:
    """supervisor.sh is package data: every job script the launchers render inlines it from the installed copy."""
    source = (ROOT / "packages/launchers/src/atomdyn_launchers/supervisor.sh").read_bytes()
    with zipfile.ZipFile(wheel_of(dist, "atomdyn-launchers")) as wheel:
        assert wheel.read("atomdyn_launchers/supervisor.sh") == source
    [sdist] = dist.glob("atomdyn_launchers-*.tar.gz")
    with tarfile.open(sdist) as archive:
        [member] = [
            m for m in archive.getmembers() if m.name.endswith("/src/atomdyn_launchers/supervisor.sh")
        ]
        extracted = archive.extractfile(member)
        assert extracted is not None and extracted.read() == source


def glibc_versions(elf: Path) -> set[tuple[int, ...]]:
    """The GLIBC_x.y versions an ELF file's dynamic symbols refer to (readelf, as auditwheel reads them)."""
    text = run("readelf", "--wide", "--dyn-syms", "--version-info", elf).stdout
    return {tuple(int(part) for part in v.split(".")) for v in re.findall(r"GLIBC_(\d+(?:\.\d+)+)", text)}


@pytest.mark.parametrize("project", NATIVE)
def test_native_wheel_is_manylinux_and_needs_no_glibc_newer_than_2_28(
    dist: Path, project: str, tmp_path: Path
) -> None:
    wheel = wheel_of(dist, project)
    tag = re.search(r"manylinux_(\d+)_(\d+)_x86_64\.whl$", wheel.name)
    assert tag, f"{wheel.name} is not a manylinux wheel"
    assert (int(tag[1]), int(tag[2])) <= GLIBC_BASELINE
    shown = run(Path(sys.executable).parent / "auditwheel", "show", wheel).stdout
    consistent = re.search(
        r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"manylinux_(\d+)_(\d+)_x86_64"', shown
    )
    assert consistent, shown
    assert (int(consistent[1]), int(consistent[2])) <= GLIBC_BASELINE, shown
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path)
    elves = [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF"]
    assert elves, f"{wheel.name} has no native files"
    for elf in elves:
        versions = glibc_versions(elf)
        assert max(versions, default=(0,)) <= GLIBC_BASELINE, f"{elf.name} needs GLIBC {max(versions)}"
        needed = run("readelf", "--dynamic", elf).stdout
        assert "libstdc++" not in needed, f"{elf.name} needs the system C++ library"


def offline_install(tmp_path: Path, project: str) -> Path:
    """A fresh venv, then `pip install --index-url file://.../dist/simple PROJECT` inside a network namespace."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux, requirements/apt.txt) is needed to take the network away")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    env = {"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run(
        "unshare", "--net", "--", venv / "bin" / "python", "-m", "pip", "install", "--no-cache-dir",
        "--index-url", SIMPLE.as_uri(), project, env=env,
    )  # fmt: skip
    return venv


def installed(venv: Path) -> set[str]:
    """The distributions in the venv, pip's own and its setuptools aside."""
    names = "import importlib.metadata as m; print(' '.join(d.metadata['Name'] for d in m.distributions()))"
    listing = run(venv / "bin" / "python", "-c", names).stdout
    return {normalized(name) for name in listing.split()} - {"pip", "setuptools"}


def test_dmabuf_shim_installs_offline_from_the_index_alone_and_runs(
    dist: Path, doubles: dict[str, Path], tmp_path: Path
) -> None:
    venv = offline_install(tmp_path, "dmabuf-shim")
    assert installed(venv) == {"dmabuf-shim"}
    assert "env" in run(venv / "bin" / "dmabuf-shim", "--help").stdout
    version = projects()["dmabuf-shim"]["version"]
    assert run(venv / "bin" / "dmabuf-shim", "--version").stdout == f"dmabuf-shim {version}\n"
    line = run(venv / "bin" / "dmabuf-shim", "env").stdout.strip()
    library = Path(line.removeprefix("LD_PRELOAD="))
    assert library.is_file() and library.is_relative_to(venv)
    # The released library, preloaded for real, in front of the doubles: it interposes and finds every piece.
    check = run(
        venv / "bin" / "dmabuf-shim", "env", "--check", env={"LD_LIBRARY_PATH": str(doubles["lib_dir"])}
    )
    assert "interposes=1 ibverbs=1 reg_dmabuf=1 backends=hsa,cuda" in check.stdout
    assert check.stdout.splitlines()[-1] == "dmabuf-shim: check ok"


def test_mori_repro_installs_offline_from_the_index_alone_and_runs(
    dist: Path, doubles: dict[str, Path], tmp_path: Path
) -> None:
    venv = offline_install(tmp_path, "mori-repro")
    assert installed(venv) == {"mori-repro"}, "mori-repro must need no other package"
    assert "report" in run(venv / "bin" / "mori-repro", "--help").stdout
    # The bundle goes through the sanitizer the wheel ships (this machine: the environment cannot run it).
    out = tmp_path / "bundle"
    done = run(venv / "bin" / "mori-repro", "report", "--out", out, cwd=tmp_path)
    assert "environment-cannot-run (exit 20)" in done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["report.md", "result.json", "system.json"]
    # The released loopback program against the doubles with HSA semantics: offset 0 reproduces the bug.
    hsa = {"MORI_REPRO_LIBIBVERBS": str(doubles["ibverbs"]), "MORI_REPRO_LIBHSA": str(doubles["hsa"])}
    loopback = subprocess.run(
        [str(venv / "bin" / "mori-repro"), "run", "--json"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **hsa},
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert loopback.returncode == 10, loopback.stdout + loopback.stderr
    assert json.loads(loopback.stdout)["verdict"] == "bug-reproduced"
