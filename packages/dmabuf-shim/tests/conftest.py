"""Fixtures: the C test doubles (testing/doubles), the test programs, and a runner for them."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import dmabuf_shim

REPO = Path(__file__).resolve().parents[3]
C_DIR = Path(__file__).resolve().parent / "c"

# Loaded by path under its own name: "build" would collide with the PyPI package of that name.
_spec = importlib.util.spec_from_file_location(
    "testing_doubles_build", REPO / "testing" / "doubles" / "build.py"
)
assert _spec is not None and _spec.loader is not None
_doubles = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_doubles)
build_doubles = _doubles.build_doubles
compile_program = _doubles.compile_program
runtime_env = _doubles.runtime_env

PROGRAM_TIMEOUT_S = 120


@dataclass
class Result:
    facts: dict[str, str]
    stderr: list[str]
    stdout: str = ""
    log: list[str] = field(default_factory=list)

    def int(self, key: str) -> int:
        return int(self.facts[key])


@dataclass
class Programs:
    doubles: dict[str, Path]
    reg_app: Path
    host_app: Path
    probe: Path
    reentrant_hsa: Path
    plugin: Path
    plugin_loader: Path
    shim: Path

    def run(
        self,
        exe: Path,
        *args: str,
        preload: bool = True,
        env: Mapping[str, str] | None = None,
        lib_dir: Path | None = None,
    ) -> Result:
        base = runtime_env(self.doubles if lib_dir is None else {"lib_dir": lib_dir})
        base.pop("LD_PRELOAD", None)
        for key in [k for k in base if k.startswith("DMABUF_SHIM_") or k.startswith("IBV_DOUBLE_")]:
            del base[key]
        if preload:
            base["LD_PRELOAD"] = str(self.shim)
        base.update(env or {})
        try:
            proc = subprocess.run(
                [str(exe), *args],
                env=base,
                capture_output=True,
                text=True,
                timeout=PROGRAM_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"{exe.name} {' '.join(args)} did not finish within {PROGRAM_TIMEOUT_S}s"
            ) from exc
        assert proc.returncode == 0, (
            f"{exe.name} {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}"
        )
        facts: dict[str, str] = {}
        for line in proc.stdout.splitlines():
            facts.update(item.split("=", 1) for item in line.split() if "=" in item)
        lines = proc.stderr.splitlines()
        return Result(facts, lines, proc.stdout, [line for line in lines if line.startswith("dmabuf-shim: ")])


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    out = tmp_path_factory.mktemp("dmabuf-shim-doubles")
    doubles = build_doubles(out)
    all_libs = ("ibverbs", "hsa-runtime64", "cuda")
    shim = Path(dmabuf_shim.library_path())
    assert shim.is_file(), f"{shim} missing: install the package first (pip install packages/dmabuf-shim)"
    return Programs(
        doubles=doubles,
        reg_app=compile_program(C_DIR / "reg_app.c", out / "reg_app", doubles, all_libs, [f"-I{C_DIR}"]),
        host_app=compile_program(
            C_DIR / "host_app.c", out / "host_app", doubles, ("ibverbs",), [f"-I{C_DIR}"]
        ),
        probe=compile_program(
            C_DIR / "doubles_probe.c", out / "doubles_probe", doubles, all_libs, [f"-I{C_DIR}"]
        ),
        reentrant_hsa=compile_program(
            C_DIR / "reentrant_hsa.c",
            out / "libreentrant_hsa.so",
            doubles,
            ("ibverbs",),
            ["-shared", "-fPIC", f"-I{C_DIR}"],
        ),
        plugin=compile_program(
            C_DIR / "reg_app.c",
            out / "libreg_app_plugin.so",
            doubles,
            all_libs,
            ["-shared", "-fPIC", "-Dmain=reg_app_main", f"-I{C_DIR}"],
        ),
        plugin_loader=compile_program(C_DIR / "plugin_loader.c", out / "plugin_loader", doubles),
        shim=shim,
    )


@pytest.fixture
def verbs_only_dir(programs: Programs, tmp_path: Path) -> Path:
    """A library directory holding only the verbs double: no GPU runtime can be found."""
    lib_dir = tmp_path / "verbs-only"
    lib_dir.mkdir()
    shutil.copy2(programs.doubles["ibverbs"], lib_dir / "libibverbs.so.1")
    return lib_dir


def python_env(programs: Programs, preload: bool) -> dict[str, str]:
    env = runtime_env(programs.doubles)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = str(programs.shim)
    return env
