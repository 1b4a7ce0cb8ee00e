"""How this project starts a private Docker daemon: its own data-root and socket, the host's network left alone.

dockerd's defaults rewrite the machine's iptables rules and forwarding and create a bridge; every daemon the
project starts (the image rehearsal, the tests, the local cluster's per-node caches) runs with the flags below
instead, so builds use ``--network none`` or ``host``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

NO_HOST_NETWORK_FLAGS = (
    "--iptables=false",
    "--ip6tables=false",
    "--ip-forward=false",
    "--ip-masq=false",
    "--bridge=none",
)


def find_dockerd() -> str | None:
    """The dockerd binary (Debian's docker.io), or None when it is not installed."""
    return shutil.which("dockerd") or ("/usr/sbin/dockerd" if Path("/usr/sbin/dockerd").exists() else None)


def dockerd_argv(
    binary: str, data_root: Path, socket_path: Path, exec_root: Path, pidfile: Path
) -> list[str]:
    return [
        binary,
        f"--data-root={data_root}",
        f"--exec-root={exec_root}",
        f"--pidfile={pidfile}",
        f"--host=unix://{socket_path}",
        "--log-level=warn",
        *NO_HOST_NETWORK_FLAGS,
    ]
