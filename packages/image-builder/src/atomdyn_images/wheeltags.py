"""Does a wheel fit this Python? Checked inside the image build, with the image's own interpreter.

pip's answer ("not a supported wheel on this platform") names neither the image's Python nor what the wheel
was built for, and a wheel renamed to other tags would pass on its file name alone. This check reads the tags
from the file name AND from the wheel's own ``WHEEL`` metadata, requires them to agree, and requires one of
them to fit the running interpreter (version, ABI, machine, glibc), naming both sides when none does.

Standard library only, and runnable as a script (``python3 wheeltags.py WHEEL...``): it is copied into the
images and runs with whatever Python the base image has. Exit status: 0 all fit, 1 some do not, 2 bad input.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import sysconfig
import zipfile
from dataclasses import dataclass

# The legacy manylinux names and the glibc each stands for (PEP 513, 571, 599).
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(.+)")


class WheelTagError(ValueError):
    """A wheel file that cannot be read as a wheel (name or metadata); the message names the file."""


@dataclass(frozen=True)
class Interpreter:
    """What decides whether a wheel installs: the running Python's version, ABI, machine and C library."""

    implementation: str  # "cp" for CPython
    major: int
    minor: int
    abi: str  # e.g. "cp311", "cp313t" (free-threaded)
    machine: str  # e.g. "x86_64", "aarch64"
    glibc: tuple[int, int] | None  # None: not glibc (e.g. musl), so no manylinux wheel fits

    def describe(self) -> str:
        libc = f"glibc {self.glibc[0]}.{self.glibc[1]}" if self.glibc else "no glibc"
        return f"Python {self.major}.{self.minor} ({self.abi}, {self.machine}, {libc})"


def running_interpreter() -> Interpreter:
    impl = {"cpython": "cp", "pypy": "pp"}.get(sys.implementation.name, sys.implementation.name)
    major, minor = sys.version_info[:2]
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    abi = f"{impl}{major}{minor}{'t' if free_threaded else ''}"
    machine = sysconfig.get_platform().split("-", 1)[-1].replace("-", "_").replace(".", "_")
    return Interpreter(impl, major, minor, abi, machine, _glibc())


def _glibc() -> tuple[int, int] | None:
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    except (ValueError, OSError, AttributeError):
        found = ""
    if not found:
        name, version = platform.libc_ver()
        found = f"{name} {version}" if name == "glibc" else ""
    match = re.fullmatch(r"glibc (\d+)\.(\d+).*", found)
    return (int(match.group(1)), int(match.group(2))) if match else None


def filename_tags(filename: str) -> frozenset[str]:
    """The tags a wheel's file name claims, compressed tag sets expanded (``py2.py3-none-any``)."""
    name = os.path.basename(filename)
    if not name.endswith(".whl"):
        raise WheelTagError(f"{name}: not a wheel file name (no .whl suffix)")
    parts = name[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise WheelTagError(
            f"{name}: a wheel file name has 5 or 6 dash-separated parts, this has {len(parts)}"
        )
    pythons, abis, platforms = parts[-3:]
    return frozenset(
        f"{p}-{a}-{plat}"
        for p in pythons.split(".")
        for a in abis.split(".")
        for plat in platforms.split(".")
    )


def metadata_tags(path: str) -> frozenset[str]:
    """The ``Tag:`` lines of the wheel's ``*.dist-info/WHEEL`` file: what its builder says it is."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/WHEEL", n)]
            if len(names) != 1:
                raise WheelTagError(
                    f"{os.path.basename(path)}: expected one .dist-info/WHEEL, found {len(names)}"
                )
            text = archive.read(names[0]).decode("utf-8")
    except (OSError, zipfile.BadZipFile) as exc:
        raise WheelTagError(f"{path}: cannot read the wheel: {exc}") from exc
    tags = frozenset(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:"))
    if not tags:
        raise WheelTagError(f"{os.path.basename(path)}: its WHEEL metadata names no Tag")
    return tags


def _python_fits(python: str, interp: Interpreter, abi: str) -> bool:
    if python == f"py{interp.major}":
        return True
    match = re.fullmatch(r"(py|cp|pp)(\d)(\d+)", python)
    if not match or int(match.group(2)) != interp.major:
        return False
    kind, minor = match.group(1), int(match.group(3))
    if kind == "py":
        return minor <= interp.minor
    if kind != interp.implementation:
        return False
    # An abi3 wheel for cp3X runs on every later CPython 3; anything else only on its own version.
    return minor <= interp.minor if abi == "abi3" else minor == interp.minor


def _abi_fits(abi: str, interp: Interpreter) -> bool:
    if abi == "none":
        return True
    if abi == "abi3":
        return interp.implementation == "cp" and not interp.abi.endswith("t")
    return abi == interp.abi


def _platform_fits(plat: str, interp: Interpreter) -> bool:
    if plat == "any":
        return True
    if plat == f"linux_{interp.machine}":
        return True
    match = _MANYLINUX.fullmatch(plat)
    if match:
        needed, arch = (int(match.group(1)), int(match.group(2))), match.group(3)
    else:
        legacy, _, arch = plat.partition("_")
        if legacy not in _LEGACY_MANYLINUX:
            return False
        needed = _LEGACY_MANYLINUX[legacy]
    return arch == interp.machine and interp.glibc is not None and needed <= interp.glibc


def tag_fits(tag: str, interp: Interpreter) -> bool:
    python, abi, plat = tag.split("-", 2)
    return _python_fits(python, interp, abi) and _abi_fits(abi, interp) and _platform_fits(plat, interp)


def check_wheel(path: str, interp: Interpreter) -> str:
    """The matching tag; raises WheelTagError naming the wheel, its tags and the interpreter when none fits."""
    name = os.path.basename(path)
    claimed, built = filename_tags(name), metadata_tags(path)
    if claimed != built:
        raise WheelTagError(
            f"{name}: the file name claims {', '.join(sorted(claimed))} but its WHEEL metadata says "
            f"{', '.join(sorted(built))}: a renamed wheel, refused"
        )
    fitting = sorted(t for t in claimed if tag_fits(t, interp))
    if not fitting:
        raise WheelTagError(
            f"{name}: built for {', '.join(sorted(claimed))}, which does not fit this image's "
            f"{interp.describe()}; build it with the image's own Python"
        )
    return fitting[0]


def main(argv: list[str] | None = None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print("usage: wheeltags.py WHEEL...", file=sys.stderr)
        return 2
    interp = running_interpreter()
    failed = bad_input = False
    for path in paths:
        if not os.path.isfile(path):
            print(f"wheel-tags: error: {path}: no such wheel file", file=sys.stderr)
            bad_input = True
            continue
        try:
            print(
                f"wheel-tags: {os.path.basename(path)} fits {interp.describe()} as {check_wheel(path, interp)}"
            )
        except WheelTagError as exc:
            print(f"wheel-tags: error: {exc}", file=sys.stderr)
            failed = True
    return 2 if bad_input else 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
