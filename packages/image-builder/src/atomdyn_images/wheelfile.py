"""Small deterministic pure-Python wheels: the overlay's stand-in nixl_rocm and test fixtures.

Fixed timestamps and sorted members, so the same inputs give the same bytes (and the same sha256).
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import zipfile
from pathlib import Path

from atomdyn_core.atomic import atomic_write_bytes

_EPOCH = (1980, 1, 1, 0, 0, 0)


def _normalize(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_bytes(
    project: str,
    version: str,
    files: dict[str, str],
    entry_points: dict[str, dict[str, str]] | None = None,
    summary: str = "",
    tag: str = "py3-none-any",
) -> tuple[str, bytes]:
    """(file name, content) of a wheel holding ``files`` (path -> text), tagged ``tag`` (py3-none-any)."""
    dist_info = f"{_normalize(project)}-{version}.dist-info"
    members = dict(files)
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
    members[f"{dist_info}/METADATA"] = metadata + (f"Summary: {summary}\n" if summary else "")
    members[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: atomdyn-images\nRoot-Is-Purelib: true\nTag: {tag}\n"
    )
    if entry_points:
        text = ""
        for group in sorted(entry_points):
            text += (
                f"[{group}]\n"
                + "".join(f"{k} = {v}\n" for k, v in sorted(entry_points[group].items()))
                + "\n"
            )
        members[f"{dist_info}/entry_points.txt"] = text
    record_name = f"{dist_info}/RECORD"
    record = "".join(
        f"{name},{_record_hash(text.encode())},{len(text.encode())}\n"
        for name, text in sorted(members.items())
    )
    members[record_name] = record + f"{record_name},,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, members[name])
    filename = f"{_normalize(project)}-{version}-{tag}.whl"
    return filename, buffer.getvalue()


def write_wheel(
    directory: Path,
    project: str,
    version: str,
    files: dict[str, str],
    entry_points: dict[str, dict[str, str]] | None = None,
    filename: str | None = None,
    tag: str = "py3-none-any",
) -> Path:
    name, data = wheel_bytes(project, version, files, entry_points, tag=tag)
    path = directory / (filename or name)
    atomic_write_bytes(path, data)
    return path
