"""Render Slurm batch scripts that start a role's processes and shut them all down together.

The script first checks that the ports its processes will listen on are free on the node (another run or
another user's service may hold one): a taken port fails the role at once, naming the port. Then it starts
every process in the background and waits for the first one to exit. If that happens on its own (a crash),
it writes which process it was and the last line of its log to ``<log dir>/<role>.failure`` (the launcher's
headline), stops the rest and exits non-zero so Slurm records the failure at once. If the job is cancelled,
it forwards SIGTERM to every process and waits until all have exited: otherwise slurmstepd kills them
mid-shutdown and their etcd registrations outlive them. A process still running ``stop_grace_s`` after
SIGTERM (one blocked on a hung etcd, say) gets SIGKILL: a job honours SIGTERM within seconds.

A process that is a container's client (``docker run``) is not the container: killing the client leaves the
container running, holding the GPUs, the ports and its etcd lease. So the containers are stopped by name
(``docker stop -t <grace>``) with their clients, removed (``docker rm -f``) on every exit path of the script,
and removed before anything starts when an earlier attempt left one of the same name.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


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


def _port_checks(ports: Mapping[str, int]) -> list[str]:
    for name, port in ports.items():
        if not _PROCESS.match(name) or not 0 < int(port) < 65536:
            raise ValueError(f"invalid port {name}={port}")
    if not ports:
        return []
    specs = " ".join(f"{name}={int(port)}" for name, port in ports.items())
    return [
        "",
        "# port_in_use PORT: a TCP socket listens on PORT in this node's network namespace (any address).",
        "port_in_use() {",
        "  local files=() f",
        '  for f in /proc/net/tcp /proc/net/tcp6; do if [ -r "$f" ]; then files+=("$f"); fi; done',
        '  awk -v port="$(printf \'%04X\' "$1")" \'$4 == "0A" { split($2, a, ":"); if (a[2] == port) found = 1 }',
        '    END { exit !found }\' "${files[@]}"',
        "}",
        "",
        "# check_ports NAME=PORT...: fail the role, naming every taken port, before anything starts.",
        "check_ports() {",
        "  local spec taken=''",
        '  for spec in "$@"; do',
        '    if port_in_use "${spec#*=}"; then taken="$taken, port ${spec#*=} (${spec%%=*})"; fi',
        "  done",
        '  if [ -n "$taken" ]; then',
        '    record_failure "${taken#, } already in use on $(hostname): another run or service holds it"',
        f"    exit {PORTS_TAKEN_EXIT}",
        "  fi",
        "}",
        "",
        "# Ports this job listens on must be free here (another run or service may hold one).",
        f"check_ports {specs}",
    ]


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


def _container_functions(containers: Sequence[Container]) -> list[str]:
    if not containers:
        return []
    clis = {c.cli for c in containers}
    if len(clis) != 1:
        raise ValueError(f"one job's containers are stopped with one client, not {sorted(clis)}")
    cli = shlex.quote(clis.pop())
    names = " ".join(shlex.quote(c.name) for c in containers)
    return [
        "",
        "# This job's containers, by name: a container outlives its client (its PID 1 may ignore the TERM the",
        "# client forwards), keeping the GPUs, the ports and its etcd lease. Stopped with the clients, removed on",
        "# every exit path, and removed before anything starts when an earlier attempt left one.",
        f"CONTAINERS=({names})",
        "stop_containers() {",
        "  local name",
        '  for name in "${CONTAINERS[@]}"; do',
        f'    {cli} stop -t "$STOP_GRACE_S" "$name" >/dev/null 2>&1 &',
        "  done",
        "}",
        "# shellcheck disable=SC2317  # also called from the EXIT trap",
        "remove_containers() {",
        "  local name",
        '  [ "$BASHPID" = "$$" ] || return 0  # the grace timer, a subshell, runs this EXIT trap too',
        '  for name in "${CONTAINERS[@]}"; do',
        f'    {cli} container inspect "$name" >/dev/null 2>&1 || continue',
        f'    if {cli} rm -f "$name" >/dev/null; then log "removed container $name"; fi',
        "  done",
        "}",
        "trap remove_containers EXIT",
    ]


def pid_var(process: str) -> str:
    return "PID_" + process.upper().replace("-", "_")


def render(job: JobSpec) -> str:
    """Return the text of the batch script for ``job``."""
    if not job.processes:
        raise ValueError(f"role {job.role!r} has no processes to start")
    names = [p.name for p in job.processes]
    if len(set(names)) != len(names):
        raise ValueError(f"role {job.role!r} starts two processes with the same name")
    for name in [*names, job.role]:
        if not _PROCESS.match(name):
            raise ValueError(f"invalid role or process name {name!r}")
    lines = ["#!/bin/bash"]
    if job.header_comment:
        lines += [f"# {line}" for line in job.header_comment.splitlines()]
    lines += [
        _sbatch_value("job-name", job.job_name),
        _sbatch_value("account", job.account),
        _sbatch_value("partition", job.partition),
        _sbatch_value("qos", job.qos),
        _sbatch_value("nodelist", job.node),
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        _sbatch_value("time", job.time_limit),
        _sbatch_value("output", job.output),
    ]
    if job.gpus:
        lines.append(f"#SBATCH --gres=gpu:{int(job.gpus)}")
    containers = [p.container for p in job.processes if p.container is not None]
    lines += [
        "set -u",
        "",
        f"LOG_DIR={shlex.quote(job.log_dir)}",
        f"ROLE={shlex.quote(job.role)}",
        "PIDS=()",
        "NAMES=()",
        "STOPPING=0",
        "FAILING=0",
        f"STOP_GRACE_S={int(job.stop_grace_s)}",
        "KILL_TIMER=''",
        'FAILURE_FILE="$LOG_DIR/$ROLE.failure"',
        "",
        'log() { echo "[$(date -u +%H:%M:%S.%3N)] $ROLE: $*"; }',
        "",
        "# record_failure TEXT: one line saying why this role failed, for the launcher's headline.",
        "record_failure() {",
        '  printf \'%s\\n\' "$1" >"$FAILURE_FILE.tmp" && mv -f "$FAILURE_FILE.tmp" "$FAILURE_FILE"',
        '  log "FAILED: $1"',
        "}",
        "",
        "# shellcheck disable=SC2317  # called from the USR1 trap",
        "kill_stragglers() {",
        "  local i",
        '  for i in "${!PIDS[@]}"; do',
        '    if kill -0 "${PIDS[$i]}" 2>/dev/null; then',
        '      log "${NAMES[$i]} still running ${STOP_GRACE_S} s after SIGTERM: SIGKILL"',
        '      kill -KILL "${PIDS[$i]}" 2>/dev/null || true',
        "    fi",
        "  done",
        "}",
        "trap kill_stragglers USR1",
        *_container_functions(containers),
        "",
        "stop_all() {",
        '  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done',
        *(["  stop_containers"] if containers else []),
        "  # A timer sends USR1 after the grace period; it is stopped (with its sleep) once all have exited.",
        '  if [ -z "$KILL_TIMER" ] && [ "${#PIDS[@]}" -gt 0 ]; then',
        "    # shellcheck disable=SC2016  # expanded by the timer's own shell",
        "    (",
        """      trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM""",
        '      sleep "$STOP_GRACE_S" &',
        "      sleeper=$!",
        '      wait "$sleeper" && kill -USR1 $$',
        "    ) &",
        "    KILL_TIMER=$!",
        "  fi",
        "}",
        "",
        "# shellcheck disable=SC2317  # called from the traps below",
        "on_signal() {",
        "  # Already failing (a process exited on its own): keep that status, the others are being stopped.",
        '  if [ "$FAILING" = 1 ]; then log "$1 received while failing"; return 0; fi',
        '  log "$1 received: stopping ${#PIDS[@]} processes"',
        "  STOPPING=1",
        "  stop_all",
        "}",
        "trap 'on_signal TERM' TERM",
        "trap 'on_signal INT' INT",
        "",
        "# Processes of this job's process group that are neither this script nor its own helpers: what a",
        "# process left behind when it exited (vLLM's engine core can outlive the worker that started it).",
        "group_leftovers() {",
        "  local pid info",
        '  for pid in $(pgrep -g "$$"); do',
        '    [ "$pid" = "$$" ] && continue',
        '    info=$(ps -o ppid=,stat= -p "$pid" 2>/dev/null) || continue',
        "    # shellcheck disable=SC2086  # split into ppid and stat",
        "    set -- $info",
        '    [ "$#" -eq 2 ] && [ "$1" != "$$" ] && [ "${2#Z}" = "$2" ] && echo "$pid"',
        "  done",
        "  return 0  # not the status of the last test: callers test the list, not the function",
        "}",
        "",
        "# Stop what the processes left behind: reparented away from this script, it would outlive the job and",
        "# keep its memory (and its etcd lease alive). Only when this script leads its process group, as a",
        "# Slurm batch step does: the group is then this job's alone.",
        "sweep_group() {",
        "  local left deadline",
        '  [ "$(ps -o pgid= -p $$ | tr -d \' \')" = "$$" ] || return 0',
        "  left=$(group_leftovers)",
        '  [ -n "$left" ] || return 0',
        "  # shellcheck disable=SC2086  # a list of pids",
        '  log "processes left behind in the job\'s process group:" $left "(SIGTERM)"',
        "  # shellcheck disable=SC2086",
        "  kill -TERM $left 2>/dev/null || true",
        "  deadline=$((SECONDS + STOP_GRACE_S))",
        '  while left=$(group_leftovers) && [ -n "$left" ] && [ "$SECONDS" -lt "$deadline" ]; do',
        "    sleep 0.2  # polling for their exit, up to the grace period",
        "  done",
        '  if [ -n "$left" ]; then',
        "    # shellcheck disable=SC2086",
        '    log "still running ${STOP_GRACE_S} s after SIGTERM:" $left "(SIGKILL)"',
        "    # shellcheck disable=SC2086",
        "    kill -KILL $left 2>/dev/null || true",
        "  fi",
        "}",
        "",
        "# start NAME COMMAND...: run in the background, output to LOG_DIR/ROLE.NAME.log",
        "start() {",
        "  local name=$1",
        "  shift",
        '  if [ "$STOPPING" = 1 ]; then return 0; fi',
        '  "$@" >"$LOG_DIR/$ROLE.$name.log" 2>&1 &',
        '  PIDS+=("$!")',
        '  NAMES+=("$name")',
        '  log "started $name (pid $!)"',
        "}",
        "",
        'log "job ${SLURM_JOB_ID:-?} on $(hostname)"',
        'mkdir -p "$LOG_DIR"',
    ]
    for key, value in sorted(job.env.items()):
        lines.append(f"export {render_assignment(key, value)}")
    if job.prelude:
        lines += ["", *job.prelude]
    if containers:
        lines += ["", "remove_containers  # an earlier attempt's, before the ports are checked"]
    lines += _port_checks(job.ports)
    lines.append("")
    registered = " ".join(render_arg(a) for a in job.register or ())
    for proc in job.processes:
        env = [render_assignment(k, v) for k, v in sorted(proc.env.items())]
        command = " ".join([*(["env", *env] if env else []), *(render_arg(a) for a in proc.argv)])
        lines.append(f"start {proc.name} {command}")
        if pid_var(proc.name) in registered:
            lines.append(f"{pid_var(proc.name)}=$!")
    if job.register is not None:
        lines.append("start register " + " ".join(render_arg(a) for a in job.register))
    lines += [
        "",
        "# Wait for the first process to exit, or for a signal.",
        "first_pid=''",
        "wait -n -p first_pid",
        "first_status=$?",
        "failed=''",
        "first=''",
        'for i in "${!PIDS[@]}"; do',
        '  if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then failed="$failed ${NAMES[$i]}"; fi',
        '  if [ "${PIDS[$i]}" = "${first_pid:-}" ]; then first=${NAMES[$i]}; fi',
        "done",
        *(
            [
                "# A one-shot job: the first process to exit with 0 did the job's work.",
                'if [ "$STOPPING" = 0 ] && [ "$first_status" = 0 ]; then',
                '  log "${first:-?} finished its work: stopping the others"',
                "  STOPPING=1",
                "  stop_all",
                "fi",
            ]
            if job.one_shot
            else []
        ),
        'if [ "$STOPPING" = 0 ]; then',
        "  FAILING=1",
        '  log "process(es)${failed} exited (status $first_status) on their own: stopping the others"',
        '  how="status $first_status"',
        "  last=''",
        '  if [ "$first_status" -gt 128 ]; then',
        '    how="$how, signal $(kill -l "$((first_status - 128))")"',
        "  else  # its own exit: the last line of its log says why (colour codes removed)",
        "    last=$(tail -n 1 \"$LOG_DIR/$ROLE.${first:-?}.log\" 2>/dev/null | sed 's/\\x1b\\[[0-9;]*m//g' | cut -c1-300)",
        "  fi",
        '  record_failure "process ${first:-?} exited first, on its own ($how)${last:+: $last}"',
        "  stop_all",
        "fi",
        "",
        "# Reap every process; a signal (a second SIGTERM, the grace timer's USR1) interrupts wait: loop.",
        'for pid in "${PIDS[@]}"; do',
        '  while kill -0 "$pid" 2>/dev/null; do wait "$pid" 2>/dev/null || true; done',
        "done",
        'if [ -n "$KILL_TIMER" ]; then kill "$KILL_TIMER" 2>/dev/null || true; fi',
        "sweep_group",
        'if [ "$STOPPING" = 1 ]; then',
        '  log "all processes stopped"',
        "  exit 0",
        "fi",
        'if [ "$first_status" = 0 ]; then first_status=1; fi',
        'log "failed: exit $first_status"',
        'exit "$first_status"',
        "",
    ]
    return "\n".join(lines)
