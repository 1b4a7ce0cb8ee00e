"""The bug-report bundle: the loopback result and the system facts, sanitized, as files ready to attach."""

from __future__ import annotations

import contextlib
import errno
import getpass
import json
import os
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mori_repro import __version__
from mori_repro.shared import Sanitizer

BUNDLE_FILES = ("report.md", "result.json", "system.json")


def _identities() -> tuple[list[str], list[str]]:
    hosts = {socket.gethostname(), socket.getfqdn()}
    hosts |= {h.split(".", 1)[0] for h in hosts}
    try:
        users = [getpass.getuser()]
    except (KeyError, OSError):
        users = []
    return sorted(h for h in hosts if h), users


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, Mapping):
        return [s for k, v in obj.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(obj, list):
        return [s for item in obj for s in _strings(item)]
    return []


def _scrub(obj: Any, sanitizer: Sanitizer) -> Any:
    """Sanitize every string leaf (keys included): sanitizing serialized JSON could break its quoting."""
    if isinstance(obj, str):
        return sanitizer.sanitize(obj)
    if isinstance(obj, Mapping):
        return {sanitizer.sanitize(str(k)): _scrub(v, sanitizer) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(item, sanitizer) for item in obj]
    return obj


def _yes(value: object) -> str:
    return "yes" if value is True else "no" if value is False else "-"


def render_markdown(result: Mapping[str, Any], system: Mapping[str, Any]) -> str:
    lines = [
        "# Sub-allocated dma-buf registration: loopback result",
        "",
        f"**Verdict:** `{result.get('verdict')}` (exit {result.get('exit_code')})",
        "",
        str(result.get("summary", "")),
        "",
    ]
    missing = (result.get("environment") or {}).get("missing") or []
    if missing:
        lines += ["## What the environment lacks", ""]
        lines += [f"- {m.get('component')}: {m.get('detail')}" for m in missing]
        lines.append("")
    export = result.get("export")
    if export:
        lines += [
            "## Export",
            "",
            f"The dma-buf fd covers the {export.get('covers')} ({export.get('fd_size')} bytes, starting at "
            f"allocation offset {export.get('object_starts_at')}); the exporter's offset of the "
            f"sub-allocation is {export.get('offset')}.",
            "",
        ]
    modes = result.get("modes") or []
    if modes:
        lines += [
            "## Registrations",
            "",
            "| registration | MR offset | registered | WRITE | READ | sentinel intact "
            "| data at sub-allocation | found at | outcome |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for m in modes:
            write = (m.get("write") or {}).get("status", "-")
            read = (m.get("read") or {}).get("status", "-")
            landed = m.get("landed_at")
            lines.append(
                f"| {m.get('name')} ({m.get('role')}) | {m.get('reg_offset')} | {m.get('registration')} "
                f"| {write} | {read} | {_yes(m.get('sentinel_intact'))} "
                f"| {_yes(m.get('data_at_sub_allocation'))} | {'-' if landed is None else landed} "
                f"| {m.get('outcome')} |"
            )
        lines.append("")
    config = result.get("config") or {}
    lines += ["## Configuration", "", "```", json.dumps(config, indent=2), "```", ""]
    lines += [
        "## System",
        "",
        f"- mori-repro: {__version__}",
        f"- kernel: {system.get('kernel')}",
        f"- OS: {system.get('os') or 'unknown'}",
        f"- ROCm: {system.get('rocm_version') or 'not found'}",
    ]
    gpu = result.get("gpu")
    if gpu:
        lines.append(
            f"- GPU runtime: {gpu.get('runtime_version')} ({gpu.get('library')}), device {gpu.get('device')}"
        )
    rdma = result.get("rdma")
    if rdma:
        lines.append(
            f"- RDMA: {rdma.get('device')} fw {rdma.get('fw_ver')}, port {rdma.get('port')} "
            f"{rdma.get('link_layer')}, MTU {rdma.get('active_mtu')}, GID index {rdma.get('gid_index')}"
        )
    for dev in system.get("rdma_devices") or []:
        lines.append(
            f"- {dev.get('name')}: driver {dev.get('driver')} {dev.get('driver_version') or ''}".rstrip()
            + f", firmware {dev.get('fw_ver')}"
        )
    lines.append("")
    for cmd in system.get("commands") or []:
        status = "not run" if cmd.get("returncode") is None else f"exit {cmd.get('returncode')}"
        lines += [
            f"### `{' '.join(cmd.get('argv', []))}` ({status})",
            "",
            "```",
            str(cmd.get("output")),
            "```",
            "",
        ]
    env = system.get("environment") or {}
    lines += ["## Environment variables", "", "```"]
    lines += [f"{k}={v}" for k, v in env.items()] or ["(none of the relevant variables is set)"]
    lines += ["```", ""]
    return "\n".join(lines)


def _write_all(out_dir: Path, files: Mapping[str, str]) -> list[Path]:
    """All the files or none: each is written to a temporary name beside its final one and fsynced, and only
    once every one is there are they renamed into place. A directory this call made is removed on failure."""
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[Path, Path]] = []
    try:
        for name, text in files.items():
            final = out_dir / name
            if final.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(final))
            fd, staging = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
            staged.append((Path(staging), final))
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(staging, 0o644)
        for tmp, final in staged:
            os.replace(tmp, final)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        if created:
            with contextlib.suppress(OSError):  # what else is there now is not ours to remove
                out_dir.rmdir()
        raise
    return [final for _, final in staged]


def write_bundle(out_dir: Path, result: Mapping[str, Any], system: Mapping[str, Any]) -> list[Path]:
    """Write the sanitized bundle, all of it or nothing; one Sanitizer across all files keeps placeholders
    consistent."""
    hosts, users = _identities()
    sanitizer = Sanitizer(hosts=hosts, users=users)
    for text in _strings(result) + _strings(system):
        sanitizer.learn(text)
    clean_result = _scrub(result, sanitizer)
    clean_system = _scrub(system, sanitizer)
    markdown = sanitizer.sanitize(render_markdown(clean_result, clean_system))
    texts = (markdown, json.dumps(clean_result, indent=2) + "\n", json.dumps(clean_system, indent=2) + "\n")
    return _write_all(out_dir, dict(zip(BUNDLE_FILES, texts, strict=True)))
