"""`dmabuf-shim env [--check]` and `dmabuf-shim bench`.

`env` and `env --check` need only the preload library (found beside the package, probed through ctypes), so
they work where the native module was built for another Python; `bench` needs the module.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import dmabuf_shim

BENCH_LIB = "libdmabuf_shim_benchverbs.so"
CHILD_TIMEOUT_S = 120


def preload_value(library: str, existing: str | None) -> str:
    """LD_PRELOAD with the shim first, keeping whatever was already preloaded."""
    entries = [e for e in (existing or "").replace(" ", ":").split(":") if e and e != library]
    return ":".join([library, *entries])


def _library() -> Path:
    path = Path(dmabuf_shim.library_path())
    if not path.is_file():
        raise SystemExit(f"dmabuf-shim: {path} is missing: the installation is broken, reinstall dmabuf-shim")
    return path


def _child(args: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmabuf_shim", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )


def parse_probe(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split() if "=" in item)


def cmd_env(check: bool, gpu_runtime_required: bool = True) -> int:
    library = str(_library())
    line = f"LD_PRELOAD={preload_value(library, os.environ.get('LD_PRELOAD'))}"
    if not check:
        print(line)
        return 0
    env = dict(os.environ, LD_PRELOAD=preload_value(library, os.environ.get("LD_PRELOAD")))
    result = _child(["_probe"], env)
    if result.returncode != 0:
        print(
            f"dmabuf-shim: check FAILED: the child process exited {result.returncode}: {result.stderr.strip()}"
        )
        return 1
    report = json.loads(result.stdout.strip().splitlines()[-1])
    print(line)
    if report["probe"] is None:
        print(
            f"dmabuf-shim: check FAILED: {library} was not loaded by the dynamic loader (LD_PRELOAD ignored?)"
        )
        return 1
    found = parse_probe(report["probe"])
    problems = []
    if found.get("interposes") != "1":
        problems.append("another library's ibv_reg_mr wins symbol resolution")
    if found.get("version") != dmabuf_shim.version():
        problems.append(
            f"loaded version {found.get('version')} differs from installed {dmabuf_shim.version()}"
        )
    missing = missing_pieces(found, bool(report["libibverbs"]), env.get("DMABUF_SHIM_BACKEND", "auto"))
    no_gpu = [p for p in missing if p.startswith(GPU_RUNTIME_MISSING)]
    problems += missing if gpu_runtime_required else [p for p in missing if p not in no_gpu]
    print(f"dmabuf-shim: loaded {library}")
    print(
        "dmabuf-shim: version={version} interposes={interposes} ibverbs={ibverbs} reg_dmabuf={reg_dmabuf} "
        "backends={backends} hsa_export_v2={hsa_export_v2} strip={strip}".format(**found)
    )
    if problems:
        print(f"dmabuf-shim: check FAILED: {'; '.join(problems)}")
        return 1
    if no_gpu and not gpu_runtime_required:
        print(f"dmabuf-shim: check ok without a GPU runtime (--no-gpu-runtime): {no_gpu[0]}")
        return 0
    print("dmabuf-shim: check ok")
    return 0


GPU_RUNTIME_MISSING = "missing GPU runtime"


def missing_pieces(found: dict[str, str], libibverbs: bool, backend: str) -> list[str]:
    """What the node lacks for the shim to do its job; without any of it every registration is a passthrough."""
    missing = []
    if not libibverbs:
        missing.append("missing libibverbs.so.1: not loadable here (install rdma-core)")
    elif found.get("reg_dmabuf") != "1":
        missing.append("missing ibv_reg_dmabuf_mr: this libibverbs lacks it (rdma-core >= 34 has it)")
    if found.get("backends") == "none":
        if backend == "none":
            missing.append(f"{GPU_RUNTIME_MISSING}: DMABUF_SHIM_BACKEND=none turns every backend off")
        else:
            missing.append(
                f"{GPU_RUNTIME_MISSING}: neither the HSA runtime (libhsa-runtime64.so.1) nor the CUDA driver "
                "(libcuda.so.1) loads here"
            )
    return missing


def preloaded_probe() -> str | None:
    """The preloaded shim's view of its environment (its exported probe), or None when it is not loaded."""
    run = getattr(ctypes.CDLL(None), "dmabuf_shim_probe", None)
    if run is None:
        return None
    run.restype = ctypes.c_int
    run.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    buffer = ctypes.create_string_buffer(512)
    run(buffer, len(buffer))
    return buffer.value.decode()


def cmd_probe_child() -> int:
    """Runs under LD_PRELOAD: load libibverbs as a verbs program would, then ask the shim what it sees."""
    try:
        ctypes.CDLL("libibverbs.so.1", mode=ctypes.RTLD_GLOBAL)
        libibverbs = True
    except OSError:
        libibverbs = False
    print(json.dumps({"probe": preloaded_probe(), "libibverbs": libibverbs}))
    return 0


def _init_runtimes() -> list[str]:
    """Initialise the GPU runtimes present, so the bench sees what a GPU process registering host memory sees."""
    started = []
    for name, init, args in (("libhsa-runtime64.so.1", "hsa_init", ()), ("libcuda.so.1", "cuInit", (0,))):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if getattr(lib, init)(*args) == 0:
            started.append(name)
    return started


def cmd_bench_child(iterations: int, rounds: int, init_runtimes: bool) -> int:
    try:
        from dmabuf_shim import _native
    except ImportError as exc:
        raise SystemExit(f"dmabuf-shim bench: the native module does not load in this Python: {exc}") from exc
    started = _init_runtimes() if init_runtimes else []
    lib = str(Path(dmabuf_shim.library_path()).with_name(BENCH_LIB))
    figures = _native.bench(lib, iterations, rounds)
    probe = parse_probe(preloaded_probe() or "")
    print(json.dumps({**figures, "backends": probe.get("backends", "not-loaded"), "runtimes": started}))
    return 0


def cmd_bench(iterations: int, rounds: int) -> int:
    library = str(_library())
    bench_lib = str(Path(library).with_name(BENCH_LIB))
    print(
        f"dmabuf-shim bench: ibv_reg_mr on host memory, shim entry vs the function behind it, "
        f"{iterations} calls x {rounds} rounds, best round"
    )
    cases = (
        ("no GPU runtime", "none", False, "on-failure"),
        ("GPU runtimes initialised", "auto", True, "on-failure"),
        ("GPU runtimes initialised, DMABUF_SHIM_CLASSIFY=always", "auto", True, "always"),
    )
    for label, backend, init, classify in cases:
        env = dict(
            os.environ,
            LD_PRELOAD=f"{library}:{bench_lib}",
            DMABUF_SHIM_BACKEND=backend,
            DMABUF_SHIM_CLASSIFY=classify,
            DMABUF_SHIM_LOG="off",
        )
        args = ["_bench", str(iterations), str(rounds), "1" if init else "0"]
        result = _child(args, env)
        if result.returncode != 0:
            print(f"dmabuf-shim bench: child failed ({result.returncode}): {result.stderr.strip()}")
            return 1
        f = json.loads(result.stdout.strip().splitlines()[-1])
        if not f["shim_is_bound"]:
            print("dmabuf-shim bench: the shim did not interpose ibv_reg_mr in the child; no figures")
            return 1
        added = f["shim_ns"] - f["direct_ns"]
        print(
            f"  {label} (backends={f['backends']}): direct {f['direct_ns']:.1f} ns/call, "
            f"through shim {f['shim_ns']:.1f} ns/call, added {added:.1f} ns/call"
        )
    return 0


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dmabuf-shim", description=__doc__)
    parser.add_argument("--version", action="version", version=f"dmabuf-shim {dmabuf_shim.version()}")
    # The metavar lists the public commands only: _probe and _bench are the children the CLI itself starts.
    sub = parser.add_subparsers(dest="command", required=True, metavar="{env,bench}")
    env = sub.add_parser("env", help="print the LD_PRELOAD=... line for the installed library")
    env.add_argument("--check", action="store_true", help="load the library in a child process and report")
    env.add_argument(
        "--no-gpu-runtime",
        action="store_true",
        help="with --check: a node without a GPU (a rehearsal node) passes without the HSA runtime or CUDA driver",
    )
    bench = sub.add_parser("bench", help="ns per passthrough call added by the shim")
    bench.add_argument("--iterations", type=int, default=2_000_000)
    bench.add_argument("--rounds", type=int, default=5)
    sub.add_parser("_probe")
    child = sub.add_parser("_bench")
    child.add_argument("iterations", type=int)
    child.add_argument("rounds", type=int)
    child.add_argument("init_runtimes", type=int)
    args = parser.parse_args(argv)
    if args.command == "env":
        return cmd_env(args.check, gpu_runtime_required=not args.no_gpu_runtime)
    if args.command == "bench":
        if args.iterations < 1 or args.rounds < 1:
            parser.error("--iterations and --rounds must be positive")
        return cmd_bench(args.iterations, args.rounds)
    if args.command == "_probe":
        return cmd_probe_child()
    return cmd_bench_child(args.iterations, args.rounds, bool(args.init_runtimes))


def main(argv: Sequence[str] | None = None) -> int:
    """A reader gone away (`| head`) ends the command with status 1, no traceback (Python docs' recipe)."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1
