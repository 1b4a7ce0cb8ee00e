"""Render Slurm batch scripts that start a role's processes and shut them all down together.

What every job script does to supervise its processes (the port check, starting them, the first exit, the
failure line, forwarding SIGTERM, the grace period's SIGKILL, the sweep of what they left behind, stopping and
removing containers by name) is bash in ``supervisor.sh`` beside this module, package data, shellchecked as a
file; its header says what a job does and how the file is laid out. :func:`render` writes the job's own lines
(the ``#SBATCH`` header, its exports, prelude, ports and processes) amid the supervisor's parts, inlined, so
that a job script is self-contained: a node needs nothing of this package at any path to run it.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources


@dataclass(frozen=True)
class Shell:
    """A fragment written into the script as is (already quoted), e.g. ``"$MGMT_ADDR"``."""

    text: str


Arg = str | Shell

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROCESS = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class Container:
    """The container a process's client runs, by name, and the client that can stop it."""

    name: str
    cli: str = "docker"


@dataclass(frozen=True)
class ProcessSpec:
    """One long-running process of a role; ``name`` names its log (frontend, prefill, decode, worker)."""

    name: str
    argv: Sequence[Arg]
    env: Mapping[str, Arg] = field(default_factory=dict)
    container: Container | None = None  # set when the process is a container's client (docker run)


@dataclass(frozen=True)
class JobSpec:
    role: str
    job_name: str
    node: str
    account: str
    partition: str
    qos: str
    output: str
    log_dir: str
    processes: Sequence[ProcessSpec]
    env: Mapping[str, Arg] = field(default_factory=dict)
    # Shell lines run before any process starts (probes); they may set variables the processes use.
    prelude: Sequence[str] = ()
    gpus: int = 0
    time_limit: str = "00:30:00"
    # The registration helper starts last and receives every process id through $PID_<name>.
    register: Sequence[Arg] | None = None
    header_comment: str = ""
    # Ports the processes will listen on (name -> port), checked free on the node before anything starts.
    ports: Mapping[str, int] = field(default_factory=dict)
    # Seconds a process gets between SIGTERM and SIGKILL.
    stop_grace_s: int = 5
    # A job with work that ends (a probe), not a service: its first process to exit with status 0 has done
    # the job's work, and the job stops the others and exits 0. Any other exit still fails the role.
    one_shot: bool = False


# Exit status of a job whose ports are taken on its node (EADDRINUSE's errno).
PORTS_TAKEN_EXIT = 98


def failure_file(log_dir: str, role: str) -> str:
    """Where a job writes why it failed (one line): the process that exited first, or the taken port."""
    return f"{log_dir}/{role}.failure"


def render_arg(arg: Arg) -> str:
    return arg.text if isinstance(arg, Shell) else shlex.quote(arg)


def render_assignment(name: str, value: Arg) -> str:
    if not _NAME.match(name):
        raise ValueError(f"invalid environment variable name {name!r}")
    return f"{name}={render_arg(value)}"


def _sbatch_value(key: str, value: str) -> str:
    if not value or any(c.isspace() for c in value) or "#" in value:
        raise ValueError(f"sbatch option --{key} has an unusable value {value!r}")
    return f"#SBATCH --{key}={value}"


def pid_var(process: str) -> str:
    return "PID_" + process.upper().replace("-", "_")


SUPERVISOR = "supervisor.sh"  # package data beside this module
_PART = re.compile(r"^#@ ([a-z-]+)$")


@functools.cache
def supervisor_parts() -> dict[str, tuple[str, ...]]:
    """The supervisor's parts by name, as inlined: without its ``##`` notes and its ``example`` parts."""
    text = resources.files(__package__).joinpath(SUPERVISOR).read_text(encoding="utf-8")
    parts: dict[str, list[str]] = {}
    lines: list[str] = []  # the file's header, before the first part
    for line in text.splitlines():
        if match := _PART.match(line):
            lines = parts.setdefault(match.group(1), [])
        elif not line.startswith("##"):
            lines.append(line)
    return {name: tuple(lines) for name, lines in parts.items() if name != "example"}


def _part(name: str, settings: Mapping[str, str] | None = None, client: str = "docker") -> list[str]:
    """One part of the supervisor, each assignment of a setting given the job's value, docker its client."""
    settings = settings or {}
    out = []
    for line in supervisor_parts()[name]:
        key, assigns, _ = line.partition("=")
        out.append(f"{key}={settings[key]}" if assigns and key in settings else line)
    missing = set(settings) - {line.partition("=")[0] for line in out}
    if missing:
        raise ValueError(f"{SUPERVISOR}'s part {name} assigns no {sorted(missing)}")
    return [re.sub(r"\bdocker\b", lambda _: client, line) for line in out]


def _container_client(containers: Sequence[Container]) -> str:
    clients = {c.cli for c in containers}
    if len(clients) != 1:
        raise ValueError(f"one job's containers are stopped with one client, not {sorted(clients)}")
    return shlex.quote(clients.pop())


def _port_specs(ports: Mapping[str, int]) -> str:
    for name, port in ports.items():
        if not _PROCESS.match(name) or not 0 < int(port) < 65536:
            raise ValueError(f"invalid port {name}={port}")
    return " ".join(f"{name}={int(port)}" for name, port in ports.items())


def _starts(job: JobSpec) -> list[str]:
    """A ``start`` line per process (its pid kept where the registration helper gets it), the helper last."""
    registered = " ".join(render_arg(a) for a in job.register or ())
    lines = []
    for proc in job.processes:
        env = [render_assignment(k, v) for k, v in sorted(proc.env.items())]
        command = " ".join([*(["env", *env] if env else []), *(render_arg(a) for a in proc.argv)])
        lines.append(f"start {proc.name} {command}")
        if pid_var(proc.name) in registered:
            lines.append(f"{pid_var(proc.name)}=$!")
    if job.register is not None:
        lines.append(f"start register {registered}")
    return lines


def render(job: JobSpec) -> str:
    """Return the text of the batch script for ``job``: the job's own lines amid the supervisor's parts."""
    names = [p.name for p in job.processes]
    if not names:
        raise ValueError(f"role {job.role!r} has no processes to start")
    if len(set(names)) != len(names):
        raise ValueError(f"role {job.role!r} starts two processes with the same name")
    for name in [*names, job.role]:
        if not _PROCESS.match(name):
            raise ValueError(f"invalid role or process name {name!r}")
    header = [("job-name", job.job_name), ("account", job.account), ("partition", job.partition)]
    header += [("qos", job.qos), ("nodelist", job.node)]
    lines = ["#!/bin/bash", *(f"# {line}" for line in job.header_comment.splitlines())]
    lines += [*(_sbatch_value(k, v) for k, v in header), "#SBATCH --nodes=1", "#SBATCH --ntasks=1"]
    lines += [_sbatch_value("time", job.time_limit), _sbatch_value("output", job.output)]
    lines += [f"#SBATCH --gres=gpu:{int(job.gpus)}"] if job.gpus else []
    settings = {"LOG_DIR": job.log_dir, "ROLE": job.role, "STOP_GRACE_S": str(int(job.stop_grace_s))}
    lines += _part("setup", {k: shlex.quote(v) for k, v in settings.items()})
    containers = [p.container for p in job.processes if p.container is not None]
    if containers:
        listed = " ".join(shlex.quote(c.name) for c in containers)
        lines += _part("containers", {"CONTAINERS": f"({listed})"}, _container_client(containers))
    lines += [*_part("stop-all"), *(_part("stop-containers") if containers else []), *_part("supervise")]
    lines += [f"export {render_assignment(key, value)}" for key, value in sorted(job.env.items())]
    lines += ["", *job.prelude] if job.prelude else []
    lines += _part("remove-containers") if containers else []
    lines += [*_part("ports"), f"check_ports {_port_specs(job.ports)}"] if job.ports else []
    lines += ["", *_starts(job), *_part("wait"), *(_part("one-shot") if job.one_shot else [])]
    return "\n".join([*lines, *_part("finish"), ""])
