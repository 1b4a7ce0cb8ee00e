"""A private Docker daemon: its own data-root and socket, and none of the flags that touch the host's network.

dockerd's defaults rewrite the machine's iptables rules and forwarding and create a bridge; here it runs with
``--iptables=false --ip6tables=false --ip-forward=false --ip-masq=false --bridge=none`` (builds then use
``--network none``). Used by the rehearsal (``atomdyn-images build --rehearsal``) and by the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_core.atomic import atomic_write_json
from atomdyn_core.dockerd import dockerd_argv, find_dockerd
from atomdyn_images.engine import Docker, DockerError

READY_DEADLINE_S = 30.0
STOP_DEADLINE_S = 30.0
POLL_S = 0.1  # polling interval for the socket or the process, always bounded by a deadline
SOCKET_PATH_MAX = 107  # sun_path is 108 bytes including the terminating NUL
STATE_FILE = "daemon.json"


class DaemonError(RuntimeError):
    """The private daemon could not be started or stopped; the message names its log."""


def require_dockerd() -> str:
    found = find_dockerd()
    if found is None:
        raise DaemonError("dockerd not found: install the Debian package docker.io (the daemon runs as root)")
    return found


def unmount_below(root: Path) -> None:
    """dockerd can leave mounts under its exec root (exec/netns/default): unmount them, deepest first."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


@dataclass
class PrivateDaemon:
    """A dockerd whose data-root is ``root/data`` and whose socket is ``root/docker.sock``."""

    root: Path
    exec_root: Path
    pid: int
    started_here: bool
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def log(self) -> Path:
        return self.root / "dockerd.log"

    def docker(self) -> Docker:
        return Docker(host=self.host)

    def is_ours(self) -> bool:
        """The PID is alive and is the dockerd of this root (a recycled PID is left alone)."""
        return _alive(self.pid) and f"--data-root={self.root / 'data'}" in _cmdline(self.pid)

    def detach(self) -> None:
        """Leave the daemon running past this process (``--keep-daemon``); a later run stops it by its PID."""
        if self.process is not None:
            # Popen warns when destroyed with its child alive; the child is deliberately left running here.
            self.process.returncode = 0
            self.process = None

    def stop(self, deadline_s: float = STOP_DEADLINE_S) -> None:
        """SIGTERM to this daemon's PID, wait until it has exited, then release its mounts and exec root."""
        if self.is_ours():
            os.kill(self.pid, signal.SIGTERM)
            if self.process is not None:
                try:
                    self.process.wait(timeout=deadline_s)
                except subprocess.TimeoutExpired as exc:
                    raise DaemonError(
                        f"dockerd (pid {self.pid}) did not exit within {deadline_s} s of SIGTERM; log: {self.log}"
                    ) from exc
            else:
                deadline = time.monotonic() + deadline_s
                while _alive(self.pid):
                    if time.monotonic() > deadline:
                        raise DaemonError(
                            f"dockerd (pid {self.pid}) did not exit within {deadline_s} s of SIGTERM; log: {self.log}"
                        )
                    time.sleep(POLL_S)
        unmount_below(self.exec_root)
        unmount_below(self.root / "data")
        shutil.rmtree(self.exec_root, ignore_errors=True)
        (self.root / STATE_FILE).unlink(missing_ok=True)


def _reuse(root: Path) -> PrivateDaemon | None:
    """A daemon a previous run left running on this root (``--keep-daemon``), if it still answers."""
    state_path = root / STATE_FILE
    try:
        state = json.loads(state_path.read_text())
        pid, exec_root = int(state["pid"]), Path(state["exec_root"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    daemon = PrivateDaemon(root, exec_root, pid, started_here=False)
    if daemon.is_ours():
        try:
            daemon.docker().ping()
        except DockerError as exc:
            # A second daemon cannot take the same data-root; say which process holds it.
            raise DaemonError(
                f"dockerd pid {pid} holds {root / 'data'} but does not answer on {daemon.socket} ({exc}); "
                f"stop it (kill {pid}) and run again; log: {daemon.log}"
            ) from exc
        return daemon
    # Gone (or not answering): release what it left behind before a new one starts on the same data-root.
    if not _alive(pid):
        unmount_below(exec_root)
        shutil.rmtree(exec_root, ignore_errors=True)
        state_path.unlink(missing_ok=True)
    return None


def start_daemon(root: Path, *, reuse: bool = True, deadline_s: float = READY_DEADLINE_S) -> PrivateDaemon:
    """Start dockerd on ``root`` (or reuse one already running there) and wait until it answers."""
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    socket = root / "docker.sock"
    if len(str(socket)) > SOCKET_PATH_MAX:
        raise DaemonError(
            f"socket path {socket} is longer than {SOCKET_PATH_MAX} bytes: choose a shorter root"
        )
    if reuse:
        running = _reuse(root)
        if running is not None:
            return running
    dockerd = require_dockerd()
    # The exec root holds containerd's sockets: a short path under /tmp keeps them within the socket limit.
    exec_root = Path(tempfile.mkdtemp(prefix="atomdyn-dockerd-"))
    command = dockerd_argv(dockerd, root / "data", socket, exec_root, root / "dockerd.pid")
    with (root / "dockerd.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    daemon = PrivateDaemon(root, exec_root, process.pid, started_here=True, process=process)
    atomic_write_json(root / STATE_FILE, {"pid": process.pid, "exec_root": str(exec_root)})
    docker = daemon.docker()
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            docker.ping()
            return daemon
        except DockerError as exc:
            if process.poll() is not None or time.monotonic() > deadline:
                why = f"exited with {process.returncode}" if process.poll() is not None else "not ready"
                if process.poll() is None:
                    daemon.stop()
                else:
                    unmount_below(exec_root)
                    shutil.rmtree(exec_root, ignore_errors=True)
                    (root / STATE_FILE).unlink(missing_ok=True)
                raise DaemonError(
                    f"dockerd at {socket} {why} within {deadline_s} s: {exc}; log: {daemon.log}"
                ) from exc
            time.sleep(POLL_S)
