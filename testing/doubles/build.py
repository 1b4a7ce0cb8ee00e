"""Builds the C test doubles (libibverbs, HSA runtime, CUDA driver) with the system C compiler.

Shared by the dmabuf-shim and mori-repro test suites: put this directory on sys.path and call
``build_doubles(out_dir)``. Libraries carry the real sonames, so a program linked with
``-L<lib_dir> -libverbs`` or a library that dlopens ``libhsa-runtime64.so.1`` finds the double
when ``LD_LIBRARY_PATH`` names ``lib_dir`` (see ``runtime_env``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
INCLUDE = HERE / "include"
VERBS_HEADER = Path("/usr/include/infiniband/verbs.h")

CFLAGS = (
    "-std=gnu11",
    "-O2",
    "-g",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-fPIC",
    "-fvisibility=hidden",
    "-pthread",
)

VERSION_SCRIPT = f"-Wl,--version-script={SRC / 'ibverbs_double.map'}"

# key -> (subdirectory of out_dir, soname, sources, extra compile and link flags)
LIBRARIES: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    "ibverbs": ("", "libibverbs.so.1", ("ibverbs_double.c",), (VERSION_SCRIPT,)),
    "hsa": ("", "libhsa-runtime64.so.1", ("hsa_double.c", "gpu_heap.c"), ()),
    "cuda": ("", "libcuda.so.1", ("cuda_double.c", "gpu_heap.c"), ()),
    # an rdma-core older than 34: no ibv_reg_dmabuf_mr; alone in its directory
    "ibverbs_no_dmabuf": (
        "rdma-core-pre34",
        "libibverbs.so.1",
        ("ibverbs_double.c",),
        ("-DIBV_DOUBLE_NO_DMABUF", VERSION_SCRIPT),
    ),
}


class DoubleBuildError(RuntimeError):
    """A double could not be compiled; the message names the missing tool or the compiler output."""


def _compiler() -> str:
    cc = os.environ.get("CC", "cc")
    path = shutil.which(cc)
    if path is None:
        raise DoubleBuildError(f"C compiler {cc!r} not found on PATH (install build-essential or set CC)")
    return path


def _fingerprint(cc: str) -> str:
    digest = hashlib.sha256()
    digest.update(cc.encode())
    digest.update(" ".join(CFLAGS).encode())
    for path in sorted([*SRC.iterdir(), *INCLUDE.iterdir()]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _run(cmd: Sequence[str]) -> None:
    result = subprocess.run(list(cmd), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DoubleBuildError(f"command failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr}")


def _link_dev_name(lib_dir: Path, soname: str) -> None:
    """libfoo.so -> libfoo.so.1, what `-lfoo` looks for at link time."""
    dev = lib_dir / soname.rsplit(".", 1)[0]
    tmp = lib_dir / f".{dev.name}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(soname)
    os.replace(tmp, dev)


def build_doubles(out_dir: Path) -> dict[str, Path]:
    """Compile the doubles into out_dir (skipped when sources and flags are unchanged).

    Returns paths keyed "ibverbs", "hsa", "cuda" (the shared libraries), "lib_dir" and "include_dir"
    (hsa_min.h, cuda_min.h and gpu_double.h for programs that use the doubles), and "ibverbs_no_dmabuf":
    the verbs double without ibv_reg_dmabuf_mr (rdma-core < 34), alone in its own directory.
    """
    if not VERBS_HEADER.is_file():
        raise DoubleBuildError(f"{VERBS_HEADER} is missing: install the Debian package libibverbs-dev")
    cc = _compiler()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Path] = {"lib_dir": out_dir, "include_dir": INCLUDE}
    stamp = out_dir / ".doubles.sha256"
    fingerprint = _fingerprint(cc)
    fresh = stamp.is_file() and stamp.read_text() == fingerprint
    for key, (subdir, soname, sources, flags) in LIBRARIES.items():
        lib_dir = out_dir / subdir
        lib_dir.mkdir(exist_ok=True)
        target = lib_dir / soname
        result[key] = target
        if fresh and target.is_file():
            continue
        fd, tmp_name = tempfile.mkstemp(prefix=f".{soname}.", dir=lib_dir)
        os.close(fd)
        try:
            _run(
                [
                    cc,
                    *CFLAGS,
                    f"-I{INCLUDE}",
                    "-shared",
                    f"-Wl,-soname,{soname}",
                    *flags,
                    "-o",
                    tmp_name,
                    *(str(SRC / s) for s in sources),
                ]
            )
            os.replace(tmp_name, target)
        finally:
            Path(tmp_name).unlink(missing_ok=True)
        _link_dev_name(lib_dir, soname)
    fd, tmp_name = tempfile.mkstemp(prefix=".stamp.", dir=out_dir)
    with os.fdopen(fd, "w") as handle:
        handle.write(fingerprint)
    os.replace(tmp_name, stamp)
    return result


def compile_program(
    source: Path,
    output: Path,
    doubles: Mapping[str, Path],
    libs: Sequence[str] = (),
    extra_flags: Sequence[str] = (),
) -> Path:
    """Compile one C program against the doubles, e.g. libs=("ibverbs", "hsa-runtime64")."""
    cc = _compiler()
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    _run(
        [
            cc,
            "-std=gnu11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pthread",
            f"-I{doubles['include_dir']}",
            *extra_flags,
            "-o",
            str(tmp),
            str(source),
            f"-L{doubles['lib_dir']}",
            *(f"-l{lib}" for lib in libs),
            "-ldl",
        ]
    )
    os.replace(tmp, output)
    return output


def runtime_env(doubles: Mapping[str, Path], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment in which the dynamic loader resolves the doubles' sonames."""
    env = dict(os.environ if base is None else base)
    previous = env.get("LD_LIBRARY_PATH")
    lib_dir = str(doubles["lib_dir"])
    env["LD_LIBRARY_PATH"] = f"{lib_dir}:{previous}" if previous else lib_dir
    return env
