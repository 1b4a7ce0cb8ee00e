"""The CLI, the Python module and the log-line reader."""

from __future__ import annotations

import ctypes
import importlib.metadata
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Programs, python_env

import dmabuf_shim
from dmabuf_shim.cli import preload_value
from dmabuf_shim.logformat import parse_registration


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmabuf_shim", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_env_prints_the_preload_line_for_the_installed_library() -> None:
    result = cli("env", env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"LD_PRELOAD={dmabuf_shim.library_path()}\n"
    assert Path(dmabuf_shim.library_path()).is_file()


def test_preload_value_keeps_other_preloads_once() -> None:
    lib = "/x/libdmabuf_shim.so"
    assert preload_value(lib, None) == lib
    assert preload_value(lib, "/a.so /b.so") == f"{lib}:/a.so:/b.so"
    assert preload_value(lib, f"/a.so:{lib}") == f"{lib}:/a.so"


def test_env_check_loads_the_library_in_a_child_and_reports(programs: Programs) -> None:
    result = cli("env", "--check", env=python_env(programs, preload=False))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"LD_PRELOAD={programs.shim}"
    assert (
        f"version={dmabuf_shim.version()} interposes=1 ibverbs=1 reg_dmabuf=1 backends=hsa,cuda" in lines[2]
    )
    assert lines[-1] == "dmabuf-shim: check ok"


def failed_line(result: subprocess.CompletedProcess[str]) -> str:
    """The verdict is the last line: nodes.check reports exactly that line."""
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("dmabuf-shim: check FAILED: "), result.stdout
    return last


def test_env_check_fails_on_a_node_without_gpu_runtimes(programs: Programs, verbs_only_dir: Path) -> None:
    env = python_env(programs, preload=False)
    env["LD_LIBRARY_PATH"] = str(verbs_only_dir)
    result = cli("env", "--check", env=env)
    assert "backends=none" in result.stdout
    last = failed_line(result)
    assert "missing GPU runtime: neither the HSA runtime (libhsa-runtime64.so.1) nor the CUDA driver" in last
    assert "libibverbs" not in last and "ibv_reg_dmabuf_mr" not in last


def test_env_check_no_gpu_runtime_passes_a_gpu_less_node_and_says_what_it_lacks(
    programs: Programs, verbs_only_dir: Path
) -> None:
    env = python_env(programs, preload=False)
    env["LD_LIBRARY_PATH"] = str(verbs_only_dir)
    result = cli("env", "--check", "--no-gpu-runtime", env=env)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1].startswith(
        "dmabuf-shim: check ok without a GPU runtime (--no-gpu-runtime): missing GPU runtime: neither"
    )


def test_env_check_no_gpu_runtime_still_fails_on_anything_else_missing(
    programs: Programs, tmp_path: Path
) -> None:
    broken = tmp_path / "no-verbs"
    broken.mkdir()
    (broken / "libibverbs.so.1").write_bytes(b"")
    env = python_env(programs, preload=False)
    env.update(LD_LIBRARY_PATH=str(broken), DMABUF_SHIM_BACKEND="none")
    last = failed_line(cli("env", "--check", "--no-gpu-runtime", env=env))
    assert "missing libibverbs.so.1" in last and "GPU runtime" not in last


def test_env_check_fails_on_an_rdma_core_without_dmabuf(programs: Programs) -> None:
    env = python_env(programs, preload=False)
    env["LD_LIBRARY_PATH"] = f"{programs.doubles['ibverbs_no_dmabuf'].parent}:{programs.doubles['lib_dir']}"
    result = cli("env", "--check", env=env)
    assert "reg_dmabuf=0" in result.stdout
    last = failed_line(result)
    assert "missing ibv_reg_dmabuf_mr: this libibverbs lacks it (rdma-core >= 34 has it)" in last
    assert "GPU runtime" not in last


def test_env_check_fails_without_libibverbs(programs: Programs, tmp_path: Path) -> None:
    # An unloadable libibverbs.so.1 first on the search path stands in for a node without rdma-core.
    broken = tmp_path / "no-verbs"
    broken.mkdir()
    (broken / "libibverbs.so.1").write_bytes(b"")
    env = python_env(programs, preload=False)
    env["LD_LIBRARY_PATH"] = f"{broken}:{programs.doubles['lib_dir']}"
    result = cli("env", "--check", env=env)
    assert "ibverbs=0" in result.stdout
    last = failed_line(result)
    assert "missing libibverbs.so.1: not loadable here (install rdma-core)" in last
    assert "ibv_reg_dmabuf_mr" not in last and "GPU runtime" not in last


def test_env_check_names_everything_missing_at_once(programs: Programs, tmp_path: Path) -> None:
    broken = tmp_path / "no-verbs"
    broken.mkdir()
    (broken / "libibverbs.so.1").write_bytes(b"")
    env = python_env(programs, preload=False)
    env.update(LD_LIBRARY_PATH=str(broken), DMABUF_SHIM_BACKEND="none")
    last = failed_line(cli("env", "--check", env=env))
    assert "missing libibverbs.so.1" in last
    assert "missing GPU runtime: DMABUF_SHIM_BACKEND=none turns every backend off" in last


def loads(soname: str, symbol: str | None = None) -> bool:
    try:
        lib = ctypes.CDLL(soname)
    except OSError:
        return False
    return symbol is None or hasattr(lib, symbol)


def test_env_check_without_the_doubles_names_what_this_machine_lacks() -> None:
    """No doubles on the search path: the verdict is about this machine's own libraries."""
    result = cli("env", "--check", env={"PATH": "/usr/bin:/bin"})
    verbs = loads("libibverbs.so.1")
    lacking = {
        "missing libibverbs.so.1": not verbs,
        "missing ibv_reg_dmabuf_mr": verbs and not loads("libibverbs.so.1", "ibv_reg_dmabuf_mr"),
        "missing GPU runtime": not (loads("libhsa-runtime64.so.1") or loads("libcuda.so.1")),
    }
    if not any(lacking.values()):
        assert result.returncode == 0, result.stdout + result.stderr
        return
    last = failed_line(result)
    for piece, absent in lacking.items():
        assert (piece in last) is absent, (piece, last)


def test_env_check_works_without_the_native_module(programs: Programs, tmp_path: Path) -> None:
    """A copy whose pybind11 module was built for another Python: env and env --check still work."""
    copy = tmp_path / "site" / "dmabuf_shim"
    shutil.copytree(Path(dmabuf_shim.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    [module] = copy.glob("_native.*.so")
    module.rename(copy / "_native.cpython-39-x86_64-linux-gnu.so")
    env = python_env(programs, preload=False)
    env["PYTHONPATH"] = str(copy.parent)
    result = cli("env", "--check", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == f"LD_PRELOAD={copy / 'libdmabuf_shim.so'}"
    assert result.stdout.splitlines()[-1] == "dmabuf-shim: check ok"
    unusable = cli("bench", "--iterations", "10", "--rounds", "1", env=env)
    assert unusable.returncode == 1
    assert "the native module does not load in this Python" in unusable.stdout


def test_version_is_the_distributions() -> None:
    result = cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"dmabuf-shim {importlib.metadata.version('dmabuf-shim')}\n"
    assert dmabuf_shim.version() == dmabuf_shim.__version__ == importlib.metadata.version("dmabuf-shim")


def test_counters_of_the_preloaded_copy_are_readable_from_python(programs: Programs) -> None:
    script = """
import ctypes, json
import dmabuf_shim
verbs = ctypes.CDLL("libibverbs.so.1", mode=ctypes.RTLD_GLOBAL)
verbs.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
verbs.ibv_open_device.restype = ctypes.c_void_p
verbs.ibv_open_device.argtypes = [ctypes.c_void_p]
verbs.ibv_alloc_pd.restype = ctypes.c_void_p
verbs.ibv_alloc_pd.argtypes = [ctypes.c_void_p]
pd = verbs.ibv_alloc_pd(verbs.ibv_open_device(verbs.ibv_get_device_list(None)[0]))
reg = ctypes.CDLL(None).ibv_reg_mr  # the global binding: the shim when preloaded
reg.restype = ctypes.c_void_p
reg.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
buf = ctypes.create_string_buffer(8192)
mrs = [reg(pd, ctypes.addressof(buf), 8192, 1) for _ in range(3)]
print(json.dumps({"mrs": all(mrs), "counters": dmabuf_shim.counters()}))
"""
    import json

    for preload, expected in ((True, 3), (False, 0)):
        proc = subprocess.run(
            [sys.executable, "-c", script],
            env=python_env(programs, preload=preload),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["mrs"] is True
        counters = out["counters"]
        assert counters["loaded"] is preload
        assert (counters["registrations"], counters["passthrough"], counters["dmabuf"]) == (
            expected,
            expected,
            0,
        )


def test_bench_prints_ns_per_call(programs: Programs) -> None:
    result = cli("bench", "--iterations", "20000", "--rounds", "2", env=python_env(programs, preload=False))
    assert result.returncode == 0, result.stdout + result.stderr
    figures = re.findall(
        r"\(backends=([a-z,]+)\): direct ([\d.]+) ns/call, through shim ([\d.]+) ns/call, added (-?[\d.]+)",
        result.stdout,
    )
    assert [f[0] for f in figures] == ["none", "hsa,cuda", "hsa,cuda"], result.stdout
    for _, direct, shim, added in figures:
        assert float(direct) > 0 and float(shim) > 0
        assert abs(float(shim) - float(direct) - float(added)) < 0.11


def test_bench_rejects_nonsense_arguments() -> None:
    result = cli("bench", "--iterations", "0")
    assert result.returncode == 2
    assert "--iterations and --rounds must be positive" in result.stderr


def test_log_lines_parse_and_malformed_ones_are_named() -> None:
    line = (
        "dmabuf-shim: reg ok backend=hsa path=dmabuf size=1048576 offset=33554432 fd_closed=1 "
        "addr=0x7f3a42000000 iova=0x7f3a42000000 access=0xf"
    )
    reg = parse_registration(line)
    assert reg is not None
    assert (reg.ok, reg.backend, reg.offset, reg.addr, reg.access, reg.errno) == (
        True,
        "hsa",
        33554432,
        0x7F3A42000000,
        0xF,
        None,
    )
    fail = parse_registration(line.replace("reg ok", "reg fail") + " errno=22 detail=stripped:0x8")
    assert fail is not None and (fail.ok, fail.errno, fail.detail) == (False, 22, "stripped:0x8")
    assert parse_registration("dmabuf-shim: init version=0.1.0 backends=none") is None
    assert parse_registration("unrelated") is None
    with pytest.raises(ValueError, match="lacks or garbles 'offset'"):
        parse_registration(line.replace(" offset=33554432", ""))
    with pytest.raises(ValueError, match="malformed"):
        parse_registration("dmabuf-shim: reg maybe backend=hsa")


def test_invoke_collection_runs_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    from invoke.context import Context
    from invoke.exceptions import Exit

    from dmabuf_shim.invoke_tasks import bench, env, ns

    assert ns.name == "dmabuf" and set(ns.tasks) == {"env", "bench"}
    env(Context())
    assert capsys.readouterr().out.startswith(f"LD_PRELOAD={dmabuf_shim.library_path()}")
    with pytest.raises(Exit) as failed:
        bench(Context(), iterations=0)
    assert failed.value.code == 2
