"""One Docker daemon per local node, so that each node has its own image cache (as real nodes do).

Each daemon runs inside its node (the node's network, mount and UTS namespaces, like slurmd), with its own
data-root and socket and the flags that leave the machine's firewall and forwarding alone
(``atomdyn_core.dockerd``).
Containers with ``--network host`` therefore see the node's own interface. Its mounts live in the node's
private mount namespace and vanish with it. Jobs reach it through ``DOCKER_HOST`` (the generated config's
template names each node's socket).
"""

from __future__ import annotations

import socket
from pathlib import Path

from atomdyn_core.dockerd import dockerd_argv


def exec_root(tag: str, node: str) -> Path:
    """Runtime state (containerd's sockets) under /run: short paths, whatever the state directory's length."""
    return Path("/run") / f"atomdyn-{tag}" / node


def argv(binary: str, data_root: Path, socket_path: Path, run_dir: Path) -> list[str]:
    return dockerd_argv(binary, data_root, socket_path, run_dir, run_dir / "dockerd.pid")


def ping(socket_path: Path, timeout: float = 1.0) -> bool:
    """True when the daemon answers GET /_ping with OK on its socket."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(socket_path))
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
    except OSError:
        return False
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0] and reply.endswith(b"OK")
