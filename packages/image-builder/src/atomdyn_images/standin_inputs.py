"""Stand-in build inputs for the rehearsal and the tests: an ATOM wheel and UCX/NIXL source archives.

The real ones (GitHub release assets and archives) are not reachable here and their hashes are not in the lock
yet. Every stand-in says what it is: the wheel's summary and an ``atom.STAND_IN`` attribute, a ``STAND_IN``
file at the top of each archive. The ATOM wheel carries the entry points the in-image validator inspects; the
NIXL archive holds, for each file the patch series touches, the lines its hunks expect, so the series applies.
All bytes are deterministic (fixed times, sorted members) so an unchanged rehearsal rebuilds from cache.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from atomdyn_core.atomic import atomic_write_bytes
from atomdyn_images.patching import Patch
from atomdyn_images.wheelfile import wheel_bytes

STAND_IN_NOTE = "STAND-IN for the rehearsal and tests: not the real {what}"
ATOM_ENTRY_POINTS = {
    "vllm.platform_plugins": {"atom": "atom.plugin.vllm.register:register_platform"},
    "vllm.general_plugins": {"atom_model_registry": "atom.plugin.vllm.register:register_model"},
}


def atom_wheel_files() -> dict[str, str]:
    note = STAND_IN_NOTE.format(what="ROCm/ATOM")
    return {
        "atom/__init__.py": f"STAND_IN = {note!r}\n",
        "atom/plugin/__init__.py": "",
        "atom/plugin/vllm/__init__.py": "",
        "atom/plugin/vllm/register.py": (
            "def register_platform():\n    return 'atom.plugin.vllm.platform.AtomPlatform'\n\n"
            "def register_model():\n    import vllm\n"
            "    vllm.ModelRegistry.register_model('Qwen3ForCausalLM', 'atom.models.qwen3:Qwen3ForCausalLM')\n"
        ),
    }


def write_if_changed(path: Path, data: bytes) -> Path:
    """Rewrite only when the bytes differ, so an unchanged input keeps its file (and the caches stay warm)."""
    if not path.is_file() or path.read_bytes() != data:
        atomic_write_bytes(path, data)
    return path


def write_atom_wheel(directory: Path, version: str, filename: str | None = None) -> Path:
    """A stand-in ATOM wheel at ``version`` under the lock's file name."""
    name, data = wheel_bytes(
        "atom",
        version,
        atom_wheel_files(),
        ATOM_ENTRY_POINTS,
        summary=STAND_IN_NOTE.format(what="ROCm/ATOM wheel"),
    )
    directory.mkdir(parents=True, exist_ok=True)
    return write_if_changed(directory / (filename or name), data)


def preimage_files(patches: list[Patch]) -> dict[str, str]:
    """For each file the series touches, the context and removed lines its hunks expect (filler between hunks).

    A file's text comes from the first patch that touches it; a later patch in the series that needs lines the
    earlier one does not show will not apply, and the rehearsal stops with the patch error.
    """
    files: dict[str, list[str]] = {}
    for patch in patches:
        current: str | None = None
        seen: set[str] = set()
        for line in patch.path.read_text(encoding="utf-8").splitlines():
            if line.startswith("diff --git"):
                current = None
            elif line.startswith("--- a/"):
                name = line[len("--- a/") :]
                current = name if name not in files or name in seen else None
                if current is not None:
                    seen.add(current)
                    files.setdefault(current, [])
            elif current is None:
                continue
            elif line.startswith("@@"):
                files[current].append(f"// filler before hunk {len(files[current])}")
            elif line[:1] in (" ", "-") and not line.startswith("---"):
                files[current].append(line[1:])
    return {name: "\n".join(lines) + "\n" for name, lines in files.items()}


def preimage_tree(root: Path, patches: list[Patch]) -> Path:
    """``preimage_files`` written out as a plain directory tree (for tests of the series)."""
    for name, text in preimage_files(patches).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def tarball_bytes(top: str, files: dict[str, str]) -> bytes:
    """A deterministic .tar.gz with ``files`` (path -> text) under the directory ``top``."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        directories = sorted({str(Path(name).parent) for name in files} - {"."})
        for directory in ["", *directories]:
            info = tarfile.TarInfo(f"{top}/{directory}".rstrip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name in sorted(files):
            data = files[name].encode("utf-8")
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def write_source_archive(directory: Path, name: str, commit: str, files: dict[str, str]) -> Path:
    """``<name>-<commit>.tar.gz`` (the name the source mirror expects) with a STAND_IN marker on top."""
    marked = {"STAND_IN": STAND_IN_NOTE.format(what=f"{name} source at {commit}") + "\n", **files}
    directory.mkdir(parents=True, exist_ok=True)
    return write_if_changed(directory / f"{name}-{commit}.tar.gz", tarball_bytes(f"{name}-{commit}", marked))
