"""The Docker engine, driven through the docker CLI with BuildKit.

The CLI (not the Python SDK) because the SDK builds with the legacy builder only: no ``RUN --mount`` (wheels
would be copied into a layer), no per-step CACHED report to assert cache hits against. The client must have
BuildKit: docker.io's 20.10 client has it built in; a client 23+ needs the buildx plugin.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

START_HINT = (
    "start one, e.g. `dockerd --data-root DIR -H unix:///PATH/docker.sock --iptables=false --ip6tables=false "
    "--ip-forward=false --ip-masq=false --bridge=none`, then pass --docker-host unix:///PATH/docker.sock "
    "(or set DOCKER_HOST); or rehearse the whole build on this machine, in a private daemon it starts and "
    "stops itself, with `atomdyn-images build --rehearsal` (`nox -s build_images -- --rehearsal`)"
)
CLIENT_ENV = "ATOMDYN_DOCKER"
_STEP = re.compile(r"^#(\d+) \[(?:(?P<stage>[\w.-]+) )?(?P<n>\d+)/(?P<m>\d+)\] (?P<op>[A-Z]+)\b")
_CACHED = re.compile(r"^#(\d+) CACHED\s*$")


class DockerError(RuntimeError):
    """A docker command failed; the message carries the command's last output lines."""


class DaemonUnreachable(DockerError):
    pass


class ClientError(DockerError):
    """No docker client with BuildKit was found."""


@dataclass
class BuildResult:
    image_id: str
    seconds: float
    steps: dict[str, str] = field(default_factory=dict)  # "[stage n/m] OP" -> "CACHED" | "RAN"

    @property
    def all_cached(self) -> bool:
        return bool(self.steps) and all(state == "CACHED" for state in self.steps.values())


def _major_version(client: str) -> int:
    out = subprocess.run([client, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"version (\d+)\.", out)
    return int(match.group(1)) if match else 0


def find_client() -> str:
    """$ATOMDYN_DOCKER, else the first docker on PATH (then /usr/bin/docker) that can build with BuildKit."""
    explicit = os.environ.get(CLIENT_ENV)
    candidates = [explicit] if explicit else []
    candidates += [c for c in (shutil.which("docker"), "/usr/bin/docker") if c]
    rejected = []
    for client in dict.fromkeys(candidates):
        if not os.access(client, os.X_OK):
            rejected.append(f"{client} (not executable)")
            continue
        major = _major_version(client)
        if 0 < major < 23:
            return client
        buildx = subprocess.run([client, "buildx", "version"], capture_output=True, check=False)
        if buildx.returncode == 0:
            return client
        rejected.append(f"{client} (client {major} without the buildx plugin)")
    raise ClientError(
        "no docker client that builds with BuildKit: "
        + (", ".join(rejected) or "none found")
        + f"; install docker.io (its client has BuildKit built in) or buildx, or set ${CLIENT_ENV}"
    )


@dataclass
class Docker:
    host: str = ""
    client: str = ""
    stream: Callable[[str], None] | None = None  # progress lines as they arrive

    def __post_init__(self) -> None:
        self.host = self.host or os.environ.get("DOCKER_HOST", "")
        self.client = self.client or find_client()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ, DOCKER_BUILDKIT="1")
        if self.host:
            env["DOCKER_HOST"] = self.host
        return env

    def run(self, *args: str, input_bytes: bytes | None = None) -> str:
        completed = subprocess.run(
            [self.client, *args], input=input_bytes, capture_output=True, env=self._env(), check=False
        )
        if completed.returncode != 0:
            tail = completed.stderr.decode(errors="replace").strip().splitlines()[-5:]
            raise DockerError(f"docker {args[0]} failed: {' | '.join(tail)}")
        return completed.stdout.decode(errors="replace").strip()

    def ping(self) -> str:
        """The daemon's version; DaemonUnreachable (saying how to start one) when there is no daemon."""
        try:
            return self.run("version", "--format", "{{.Server.Version}}")
        except DockerError as exc:
            where = self.host or "the default socket"
            raise DaemonUnreachable(f"cannot reach a Docker daemon at {where} ({exc}); {START_HINT}") from exc

    def image_id(self, reference: str) -> str | None:
        try:
            return self.run("image", "inspect", "--format", "{{.Id}}", reference)
        except DockerError:
            return None

    def labels(self, reference: str) -> dict[str, str]:
        raw = self.run("image", "inspect", "--format", "{{json .Config.Labels}}", reference)
        loaded = json.loads(raw) if raw and raw != "null" else {}
        return {str(k): str(v) for k, v in loaded.items()}

    def tag(self, image_id: str, tag: str) -> None:
        self.run("tag", image_id, tag)

    def build(self, context: Path, dockerfile: Path, network: str = "none") -> BuildResult:
        """Build without tagging (the caller tags only after every check passed); stream plain progress."""
        with tempfile.TemporaryDirectory(prefix="atomdyn-build-") as tmp:
            iidfile = Path(tmp) / "iid"
            command = [
                self.client,
                "build",
                "--progress=plain",
                "--network",
                network,
                "--iidfile",
                str(iidfile),
            ]
            command += ["-f", str(dockerfile), str(context)]
            started = time.monotonic()
            lines: list[str] = []
            with subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self._env(),
                text=True,
                errors="replace",
            ) as proc:
                assert proc.stdout is not None
                for line in proc.stdout:
                    lines.append(line.rstrip("\n"))
                    if self.stream:
                        self.stream(line.rstrip("\n"))
                returncode = proc.wait()
            seconds = time.monotonic() - started
            if returncode != 0:
                tail = [line for line in lines if line.strip()][-12:]
                if any("Cannot connect to the Docker daemon" in line for line in tail):
                    raise DaemonUnreachable(f"cannot reach a Docker daemon ({tail[-1]}); {START_HINT}")
                raise DockerError(
                    f"docker build of {dockerfile.name} failed (exit {returncode}):\n" + "\n".join(tail)
                )
            image_id = iidfile.read_text().strip()
        return BuildResult(image_id=image_id, seconds=seconds, steps=parse_steps(lines))


def parse_steps(lines: list[str]) -> dict[str, str]:
    """BuildKit's plain progress: each layer step ("#7 [native 2/4] RUN …") and whether it was CACHED."""
    named: dict[str, str] = {}
    cached: set[str] = set()
    for line in lines:
        step = _STEP.match(line)
        if step and step.group("op") in ("RUN", "COPY", "ADD"):
            stage = step.group("stage") or "final"
            named.setdefault(
                step.group(1), f"[{stage} {step.group('n')}/{step.group('m')}] {step.group('op')}"
            )
        hit = _CACHED.match(line)
        if hit:
            cached.add(hit.group(1))
    return {label: ("CACHED" if number in cached else "RAN") for number, label in named.items()}


def echo_progress(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
