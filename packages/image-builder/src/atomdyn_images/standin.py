"""A stand-in base image made from this host: /bin/sh and the system Python with pip, docker-imported.

No registry is reachable from the test machines and the rehearsal cluster, so the ATOM base is replaced by this
(through the recorded --base override). It has no ROCm, torch or vLLM: the validator run in it reports FAILs.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

from atomdyn_images.engine import Docker

_SKIP_DIRS = {
    "test",
    "tests",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "config-3.11-x86_64-linux-gnu",
}
_SKIP_FILES = {"EXTERNALLY-MANAGED"}  # the stand-in is a container: pip may install into the system Python


class StandInError(RuntimeError):
    pass


# Bumped whenever the stand-in's content changes, so a kept stand-in of an older recipe is remade.
RECIPE = "2"
RECIPE_LABEL = "io.atomdyn.standin.recipe"
# The C++ runtime: native wheels (dmabuf-shim's pybind11 module) need it, as they do in the ATOM image.
EXTRA_LIBS = ("libstdc++.so.6", "libgcc_s.so.1")


def _system_libs(names: tuple[str, ...]) -> list[Path]:
    """Paths of ``names`` from the dynamic linker's cache (x86-64 entries); StandInError when one is missing."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout
    found: dict[str, Path] = {}
    for line in out.splitlines():
        parts = line.strip().split(" => ")
        name = parts[0].split(" ")[0] if parts else ""
        if len(parts) == 2 and name in names and "x86-64" in parts[0] and name not in found:
            found[name] = Path(parts[1])
    missing = [name for name in names if name not in found]
    if missing:
        raise StandInError(f"{', '.join(missing)} not found by `ldconfig -p`: install libstdc++6")
    return [found[name] for name in names]


def _shared_libs(binaries: list[Path]) -> set[Path]:
    libs: set[Path] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
                libs.add(Path(parts[2]))
            elif parts and parts[0].startswith("/"):
                libs.add(Path(parts[0]))
    return libs


SYSTEM_PYTHON = Path("/usr/bin/python3")


def python_version(python: Path = SYSTEM_PYTHON) -> str:
    """ "X.Y" of the Python the stand-in is made from ("" when it does not run)."""
    if not python.exists():
        return ""
    return subprocess.run(
        [str(python), "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def rootfs_tar(python: Path = SYSTEM_PYTHON) -> bytes:
    """An uncompressed tar of the minimal root file system."""
    python = python.resolve()
    version = python_version(python)
    stdlib = Path(f"/usr/lib/python{version}")
    shell = Path("/bin/dash") if Path("/bin/dash").exists() else Path("/bin/sh").resolve()
    if not version or not stdlib.is_dir():
        raise StandInError(
            f"{python} is not a system Python with its standard library under /usr/lib (need Debian's python3)"
        )
    pip_dir = Path(sysconfig.get_paths()["purelib"]) / "pip"
    if not pip_dir.is_dir():
        raise StandInError(f"pip not found at {pip_dir}: run from an environment that has pip")
    dynload = sorted((stdlib / "lib-dynload").glob("*.so"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(src: Path, dest: str) -> None:
            tar.add(str(src), arcname=dest.lstrip("/"), recursive=False)

        def add_tree(src: Path, dest: str) -> None:
            for path in sorted(src.rglob("*")):
                rel = path.relative_to(src)
                if set(rel.parts) & _SKIP_DIRS or path.name in _SKIP_FILES:
                    continue
                add(path, f"{dest}/{rel}")

        for directory in (
            "bin",
            "usr",
            "usr/bin",
            "usr/lib",
            "usr/local",
            "usr/local/bin",
            "tmp",
            "etc",
            "lib",
            "lib64",
            "lib/x86_64-linux-gnu",
            "opt",
        ):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        add(shell, "/bin/sh")
        add(python, f"/usr/bin/python{version}")
        link = tarfile.TarInfo("usr/bin/python3")
        link.type, link.linkname = tarfile.SYMTYPE, f"python{version}"
        tar.addfile(link)
        add_tree(stdlib, str(stdlib))
        add_tree(pip_dir, f"/usr/local/lib/python{version}/dist-packages/pip")
        extra = _system_libs(EXTRA_LIBS)
        for lib in sorted(_shared_libs([python, shell, *dynload, *extra]) | set(extra)):
            add(lib.resolve(), str(lib))
    return buffer.getvalue()


def make_standin(docker: Docker, tag: str, labels: dict[str, str] | None = None) -> str:
    """docker-import the stand-in rootfs as ``tag`` (with ``labels``); returns the image id."""
    labels = {**(labels or {}), RECIPE_LABEL: RECIPE}
    changes = [
        arg
        for key, value in sorted((labels or {}).items())
        for arg in ("--change", f"LABEL {key}={json.dumps(value)}")
    ]
    docker.run("import", *changes, "-", tag, input_bytes=rootfs_tar())
    image_id = docker.image_id(tag)
    if image_id is None:
        raise StandInError(f"imported stand-in {tag} is not visible in the daemon")
    return image_id


if __name__ == "__main__":  # pragma: no cover - manual use: python -m atomdyn_images.standin TAG
    print(make_standin(Docker(), sys.argv[1]))
