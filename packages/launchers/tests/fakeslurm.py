"""A fake Slurm for the run's stages: a controller in the test's process behind the real client.

:class:`FakeSlurm` is the real :class:`~atomdyn_launchers.slurm.client.Slurm` with one method replaced: ``run``,
through which the client sends every command. The client still builds every command line and parses every
answer; :class:`FakeCluster` reads the command line as sbatch, squeue, scontrol, sacct, scancel and sinfo would and
answers in their formats (``squeue -o`` fields, ``scontrol show -o`` records, ``sacct -P`` lines), or fails as
they fail (the client's ``SlurmError``, naming the command, its exit status and stderr). A command the fake
does not know fails the test (:class:`Unmodelled`): a change to the client's command lines is noticed here.
It is what submitit's tests do with a mocked ``subprocess``, with state kept between calls.

Jobs move through Slurm's states on the clock: PENDING (for ``Script.pending_s``, or held) -> RUNNING ->
COMPLETING (``completing_s``) -> COMPLETED, FAILED, CANCELLED or TIMEOUT; a finished job stays in the
controller for ``min_job_age_s`` (then squeue and scontrol forget it; with ``accounting`` sacct keeps it).
What a job's batch script does is simulated from the script the run rendered: once RUNNING, the readiness
helper's registration is put into etcd under a lease, with the key, role and ports its ``readiness register``
line names (the fake reads the line as the job would run it); on SIGTERM to the batch script (``scancel
--batch --signal=TERM``) the processes stop, the lease is revoked and the job ends COMPLETED 0:0, as the
supervisor does. :class:`Script` says how a job departs from that (held in the queue, processes that exit on
their own with a failure line, a SIGTERM ignored, a time limit). Refusals (:meth:`FakeCluster.refuse`) make the
next commands of a kind fail as a loaded controller does, and :meth:`FakeCluster.stop_answering` makes them wait out
the client's timeout, as a frozen one does.

Job steps of an allocation (``--allocation``): :meth:`FakeCluster.allocate` makes a RUNNING allocation;
:meth:`FakeSlurm.start_step` stands for srun (a :class:`FakeSrun` in place of the child process), the step is
listed by ``squeue --steps`` and ends as a batch job does, its end read from the fake srun's exit status.

Around it, what the stages talk to besides Slurm: a real etcd on loopback (:func:`loopback_etcd`; the launcher's
watch, presence and the registrations are etcd's own), Dynamo's frontend as an HTTP server (:func:`fake_frontend`:
/health, chat completions with P/D evidence, /metrics), and :func:`fake_run`, the context ``Launch.run`` builds
after its preflight, over the fake.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, cast

from golden_launch import CLUSTER_ENV, ETCD

from atomdyn_launchers.config.cluster import ClusterConfig, parse_cluster_env
from atomdyn_launchers.contract.leases import LEASE_TTL_S
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.contract.readiness import ReadinessError, Registration
from atomdyn_launchers.contract.rundir import TERMINAL_STATES, read_jsonl
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.context import Hook, RunContext
from atomdyn_launchers.run.etcd_session import open_session
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import new_run_dir, plan_roles
from atomdyn_launchers.sbatch import failure_file
from atomdyn_launchers.slurm.client import Slurm, SlurmError

# slurm_strerror of the controller's replies, as the commands print them.
INVALID_JOB = "Invalid job id specified"
TIMED_OUT = "Socket timed out on send/recv operation"
# scancel's exit status is the Slurm error number, truncated to a byte (2017 and 2021).
EXIT_INVALID_JOB = 2017 & 0xFF
EXIT_ALREADY_DONE = 2021 & 0xFF


SQUEUE_FIELDS = ("i", "j", "T", "r", "N", "P", "Z")  # the ``squeue -o`` fields the fake fills in


class Unmodelled(AssertionError):
    """The client sent a command (or option) the fake does not model: extend the fake, or fix the client."""


@dataclass
class Script:
    """What a fake job's batch script does; the defaults are a healthy role."""

    pending_s: float = 0.0  # queued this long after submission
    pending_reason: str = "Priority"
    hold: bool = False  # queued until FakeCluster.release
    register: bool = True  # once running, the readiness helper's registration (its key, lease, ports)
    register_after_s: float = 0.0
    exit_after_s: float | None = None  # the processes exit on their own this long after the job started
    exit_code: int = 1  # ... with this status (the supervisor's: the first process's)
    failure: str | None = None  # ... and the line the supervisor writes to logs/<role>.failure
    exit_grace_s: float = 0.0  # ... and the script exits this long after (stopping the other processes)
    on_term: Literal["stop", "ignore"] = "stop"  # SIGTERM: stop the processes and exit 0, or nothing
    stop_s: float = 0.05  # from SIGTERM to the script's exit
    time_limit_s: float | None = None  # --time: the job ends TIMEOUT
    runs_on: str | None = None  # Slurm starts it on this node, not the one asked for (a misplacement)


@dataclass
class FakeJob:
    """One batch job, or one step of an allocation (``step_id`` set)."""

    job_id: int
    name: str
    node: str | None  # asked for (--nodelist); where it runs once RUNNING
    script: Script
    argv: list[str]
    role: str | None = None
    register_args: dict[str, Any] | None = None
    log_dir: Path | None = None
    workdir: str = ""  # sbatch --chdir (squeue's %Z)
    step_id: int | None = None
    state: str = "PENDING"
    reason: str | None = "Priority"
    submitted: float = 0.0
    started: float | None = None
    term_at: float | None = None  # SIGTERM reached the script
    signals: list[str] = field(default_factory=list)  # every signal delivered, in order
    final: str | None = None  # the state after COMPLETING
    exit_code: tuple[int, int] | None = None
    end_at: float | None = None  # COMPLETING ends
    purged: bool = False  # the controller forgot it (MinJobAge)
    exited: bool = False  # its processes exited on their own (Script.exit_after_s)
    lease: int | None = None
    history: list[str] = field(default_factory=list)  # every state it was in, in order

    @property
    def label(self) -> str:
        return str(self.job_id) if self.step_id is None else f"{self.job_id}.{self.step_id}"

    def set_state(self, state: str) -> None:
        self.state = state
        self.history.append(state)


@dataclass
class Refusal:
    command: str
    times: int
    stderr: str
    returncode: int
    match: Callable[[Sequence[str]], bool] | None
    then: Callable[[], None] | None  # what happened meanwhile (e.g. the job ended), once refused


def expand_hostlist(text: str) -> list[str]:
    """``node[1-2,5],gpu7`` -> node1, node2, node5, gpu7 (scontrol show hostnames)."""
    hosts: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            width = len(low)
            for n in range(int(low), int(high or low) + 1):
                hosts.append(f"{prefix}{n:0{width}d}")
    return hosts


def _options(args: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """``--key=value`` and bare flags into a dict (flags map to ""), the rest positional."""
    opts: dict[str, str] = {}
    rest: list[str] = []
    for arg in args:
        if arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            opts[key] = value
        elif arg.startswith("-") and len(arg) > 1 and not arg[1].isdigit():
            opts[arg[1:]] = ""
        else:
            rest.append(arg)
    return opts, rest


def _register_line(text: str) -> dict[str, Any] | None:
    """The readiness helper's arguments, from the ``... -m atomdyn_launchers.job.readiness register`` line."""
    for line in text.splitlines():
        if "atomdyn_launchers.job.readiness register" not in line:
            continue
        words = shlex.split(line.split("atomdyn_launchers.job.readiness register", 1)[1])
        found: dict[str, Any] = {"port": {}, "pid": {}}
        for flag, value in itertools.pairwise(words):
            if not flag.startswith("--"):
                continue
            name = flag[2:]
            if name in ("port", "pid"):
                key, _, number = value.partition("=")
                found[name][key] = int(number) if number.isdigit() else 4242
            else:
                found[name] = value
        return found
    return None


class FakeCluster:
    """The controller: its nodes, one partition, the jobs and steps, the commands it was sent."""

    def __init__(
        self,
        nodes: Sequence[str] = ("gpu-node-01", "gpu-node-02", "gpu-node-03"),
        *,
        partition: str = "gpu",
        accounting: bool = False,
        completing_s: float = 0.05,
        min_job_age_s: float = 300.0,  # MinJobAge; 0: kept for ever
        tick_s: float = 0.01,
        registration_host: str = "127.0.0.1",
    ) -> None:
        self.nodes = list(nodes)
        self.partition = partition
        self.accounting = accounting
        self.completing_s = completing_s
        self.min_job_age_s = min_job_age_s
        self.registration_host = registration_host
        self.jobs: dict[int, FakeJob] = {}
        self.steps: dict[tuple[int, int], FakeJob] = {}
        self.commands: list[list[str]] = []  # every command line sent, in order
        self.envs: list[dict[str, str]] = []  # the environment each sbatch added
        self.scripts: dict[str, Script] = {}  # by role (or job name): what its job does
        self._refusals: list[Refusal] = []
        self._next_id = 1000
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._tick_s = tick_s
        self._ticker = threading.Thread(target=self._tick, name="fake-slurmctld", daemon=True)
        self._ticker.start()
        self._etcd: dict[str, EtcdClient] = {}
        self._silent: set[str] | None = None  # commands that get no answer (stop_answering); empty: all
        self._answering = threading.Event()
        self.down: dict[str, str] = {}  # node -> Slurm's reason, for the nodes marked down (mark_down)

    # -- the test's controls ----------------------------------------------------------------------------

    def script(self, role: str, script: Script) -> None:
        """The role's next job behaves as ``script`` says."""
        self.scripts[role] = script

    def mark_down(self, node: str, reason: str = "Not responding") -> None:
        """The controller marks ``node`` down (as when its slurmd stops answering: ``down*``); sinfo says so.
        Its jobs are left as they are (a dead slurmd's job steps outlive it; the job cannot be signalled)."""
        self.down[node] = reason

    def stop_answering(self, *commands: str) -> None:
        """From now on ``commands`` (every command when none is named) get no answer: each waits out the
        client's timeout for it (``Slurm.command_timeout``), as with a frozen or overloaded slurmctld."""
        self._silent = set(commands)
        self._answering.clear()

    def silent(self, command: str) -> bool:
        return self._silent is not None and (not self._silent or command in self._silent)

    def refuse(
        self,
        command: str,
        times: int,
        stderr: str,
        *,
        returncode: int = 1,
        match: Callable[[Sequence[str]], bool] | None = None,
        then: Callable[[], None] | None = None,
    ) -> None:
        """The next ``times`` runs of ``command`` (matching ``match``) fail with ``stderr``, changing nothing but
        what ``then`` does after each."""
        self._refusals.append(Refusal(command, times, stderr, returncode, match, then))

    def cancel(self, job_id: int) -> None:
        """Someone else's ``scancel JOB`` (an operator, a preemption): the job ends CANCELLED."""
        with self._lock:
            self._cancel(self.jobs[job_id])

    def finish(self, job_id: int, state: str = "COMPLETED", code: tuple[int, int] = (0, 0)) -> None:
        """The job ends now as ``state`` (through COMPLETING), whatever its script does."""
        with self._lock:
            self._end(self.jobs[job_id], state, code, time.monotonic())

    def release(self, job_id: int) -> None:
        with self._lock:
            self.jobs[job_id].script.hold = False

    def allocate(self, nodes: Sequence[str], name: str = "hold") -> int:
        """A RUNNING allocation on ``nodes`` (salloc, or a holder job) to start steps in."""
        with self._lock:
            job = self._new_job(name, ",".join(nodes), Script(register=False), ["salloc"])
            self._start(job, time.monotonic())
            return job.job_id

    def job(self, job_id: int) -> FakeJob:
        with self._lock:
            return self.jobs[job_id]

    def by_role(self, role: str) -> FakeJob:
        """The role's last batch job or step."""
        with self._lock:
            found = [j for j in [*self.jobs.values(), *self.steps.values()] if j.role == role]
        if not found:
            raise KeyError(f"no job of role {role!r}; jobs: {[j.name for j in self.jobs.values()]}")
        return max(found, key=lambda j: j.submitted)

    def ran(self, command: str) -> list[list[str]]:
        """Every command line of ``command`` sent so far."""
        with self._lock:
            return [list(c) for c in self.commands if c[0] == command]

    def wait(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("the fake cluster did not get there in time")
            time.sleep(0.01)

    def close(self) -> None:
        """Stop the clock; revoke the registrations still held (the jobs' processes gone with the test)."""
        self._stop.set()
        self._answering.set()  # commands still waiting for an answer give up
        self._ticker.join(timeout=2)
        with self._lock:
            for job in [*self.jobs.values(), *self.steps.values()]:
                self._deregister(job)

    # -- the commands -----------------------------------------------------------------------------------

    def run(self, args: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
        """One command: (exit status, stdout, stderr)."""
        argv = [str(a) for a in args]
        with self._lock:
            self.commands.append(argv)
            for refusal in self._refusals:
                if (
                    refusal.times > 0
                    and argv[0] == refusal.command
                    and (refusal.match is None or refusal.match(argv))
                ):
                    refusal.times -= 1
                    if refusal.then is not None:
                        refusal.then()
                    return refusal.returncode, "", refusal.stderr
            self._advance(time.monotonic())
            handler = {
                "sbatch": self._sbatch,
                "squeue": self._squeue,
                "scontrol": self._scontrol,
                "sacct": self._sacct,
                "scancel": self._scancel,
                "sinfo": self._sinfo,
            }.get(Path(argv[0]).name)
            if handler is None:
                raise Unmodelled(f"the fake Slurm has no {argv[0]}: {argv}")
            if argv[0] == "sbatch":
                self.envs.append(dict(env or {}))
            return handler(argv[1:])

    def _sbatch(self, args: list[str]) -> tuple[int, str, str]:
        opts, rest = _options(args)
        known = {"parsable", "account", "partition", "qos", "job-name", "nodelist", "gres", "output", "chdir"}
        if set(opts) - known or len(rest) != 1 or "parsable" not in opts:
            raise Unmodelled(f"sbatch {args}")
        if opts.get("partition") != self.partition:
            return 1, "", "sbatch: error: Batch job submission failed: Invalid partition name specified"
        node = opts.get("nodelist")
        if node is not None and any(n not in self.nodes for n in expand_hostlist(node)):
            return (
                1,
                "",
                "sbatch: error: Batch job submission failed: Requested node configuration is not available",
            )
        text = Path(rest[0]).read_text(encoding="utf-8")
        name = opts.get("job-name") or Path(rest[0]).name
        job = self._new_job(name, node, None, ["sbatch", *args], text=text)
        if "output" in opts:
            job.log_dir = Path(opts["output"]).parent
        job.workdir = opts.get("chdir", "")
        return 0, f"{job.job_id}\n", ""

    def _squeue(self, args: list[str]) -> tuple[int, str, str]:
        if "-o" not in args or args.index("-o") + 1 >= len(args):
            raise Unmodelled(f"squeue {args}")
        at = args.index("-o")
        fmt = args[at + 1]
        opts, rest = _options([*args[:at], *args[at + 2 :]])
        if rest or set(opts) - {"h", "jobs", "s", "steps", "me"} or "h" not in opts:
            raise Unmodelled(f"squeue {args}")
        if set(re.findall(r"%([A-Za-z])", fmt)) - set(SQUEUE_FIELDS):
            raise Unmodelled(f"squeue format {fmt!r}: the fake answers only %{', %'.join(SQUEUE_FIELDS)}")
        if "s" in opts or "steps" in opts:  # the steps of the listed jobs (every job is the user's: --me)
            wanted = {int(j) for j in opts["jobs"].split(",")} if opts.get("jobs") else None
            alive = [j for j in self.jobs.values() if not j.purged and (wanted is None or j.job_id in wanted)]
            if wanted and not alive:
                return 1, "", f"slurm_load_jobs error: {INVALID_JOB}"
            lines = []
            for alloc in alive:
                if alloc.state == "RUNNING":
                    lines.append(self._format(fmt, alloc, step="batch"))
                lines += [
                    self._format(fmt, s)
                    for s in self.steps.values()
                    if s.job_id == alloc.job_id and s.state in ("RUNNING", "COMPLETING")
                ]
            return 0, "".join(f"{line}\n" for line in lines), ""
        if opts.get("jobs"):
            ids = [int(j) for j in opts["jobs"].split(",")]
            listed = [self.jobs[j] for j in ids if j in self.jobs and not self.jobs[j].purged]
            if not listed:
                return 1, "", f"slurm_load_jobs error: {INVALID_JOB}"
        else:
            listed = [j for j in self.jobs.values() if j.state in ("PENDING", "RUNNING", "COMPLETING")]
        return 0, "".join(self._format(fmt, j) + "\n" for j in listed), ""

    def _format(self, fmt: str, job: FakeJob, step: str | None = None) -> str:
        running = job.state != "PENDING"
        fields = {
            "i": job.label if step is None else f"{job.job_id}.{step}",
            "j": job.name if step is None else step,
            "T": job.state,
            "r": job.reason or "None",
            "N": (job.node or "") if running else "",
            "P": self.partition,
            "Z": job.workdir,
        }

        def field_of(match: re.Match[str]) -> str:
            if match.group(1) not in fields:
                raise Unmodelled(f"squeue field %{match.group(1)}")
            return fields[match.group(1)]

        return re.sub(r"%([A-Za-z])", field_of, fmt)

    def _scontrol(self, args: list[str]) -> tuple[int, str, str]:
        detail = args[:1] == ["-d"]
        words = args[1:] if detail else args
        if words == ["show", "config"]:
            storage = "accounting_storage/slurmdbd" if self.accounting else "accounting_storage/none"
            return (
                0,
                f"AccountingStorageType   = {storage}\nMinJobAge               = {self.min_job_age_s:.0f} sec\n",
                "",
            )
        if words[:2] == ["show", "hostnames"] and len(words) == 3:
            return 0, "".join(f"{h}\n" for h in expand_hostlist(words[2])), ""
        if words[:3] == ["show", "job", "-o"] and len(words) == 4:
            job = self.jobs.get(int(words[3]))
            if job is None or job.purged:
                return 1, "", f"slurm_load_jobs error: {INVALID_JOB}"
            return 0, self._record(job, detail) + "\n", ""
        raise Unmodelled(f"scontrol {args}")

    def _record(self, job: FakeJob, detail: bool) -> str:
        code = job.exit_code or (0, 0)
        fields = [
            f"JobId={job.job_id}",
            f"JobName={job.name}",
            "UserId=tester(1000)",
            f"JobState={job.state}",
            f"Reason={job.reason or 'None'}",
            "Dependency=(null)",
            f"ExitCode={code[0]}:{code[1]}",
            *([f"DerivedExitCode={code[0]}:{code[1]}"] if detail else []),
            f"Partition={self.partition}",
            f"NodeList={job.node if job.state != 'PENDING' and job.node else '(null)'}",
            f"BatchHost={job.node if job.state != 'PENDING' and job.node else '(null)'}",
            f"Command={job.argv[-1]}",
        ]
        return " ".join(fields)

    def _sacct(self, args: list[str]) -> tuple[int, str, str]:
        if not self.accounting:
            return 1, "", "sacct: error: Slurm accounting storage is disabled"
        opts, rest = _options(args)
        if set(opts) - {"j", "X", "n", "P", "format"} or "format" not in opts:
            raise Unmodelled(f"sacct {args}")
        job = self.jobs.get(int(rest[0]))
        if job is None:
            return 0, "", ""
        code = job.exit_code or (0, 0)
        state = f"{job.state} by 1000" if job.state == "CANCELLED" else job.state
        values = {
            "JobID": str(job.job_id),
            "JobName": job.name,
            "State": state,
            "Reason": job.reason or "None",
            "NodeList": job.node if job.state != "PENDING" and job.node else "None assigned",
            "ExitCode": f"{code[0]}:{code[1]}",
            "DerivedExitCode": f"{code[0]}:{code[1]}",
        }
        try:
            line = "|".join(values[f] for f in opts["format"].split(","))
        except KeyError as exc:
            raise Unmodelled(f"sacct field {exc}") from None
        return 0, line + "\n", ""

    def _scancel(self, args: list[str]) -> tuple[int, str, str]:
        opts, rest = _options(args)
        if set(opts) - {"batch", "signal"} or not rest:
            raise Unmodelled(f"scancel {args}")
        signal = opts.get("signal") or None
        worst, errors = 0, []
        for target in rest:
            job_text, _, step_text = target.partition(".")
            job = (
                self.steps.get((int(job_text), int(step_text))) if step_text else self.jobs.get(int(job_text))
            )
            if job is None or job.purged:
                if signal is None:
                    continue  # SIGKILL to what is gone: scancel ignores it
                worst = max(worst, EXIT_INVALID_JOB)
                errors.append(f"scancel: error: Kill job error on job id {target}: {INVALID_JOB}")
                continue
            if job.state in TERMINAL_STATES or job.state == "COMPLETING":
                if signal is not None:  # silent, but the status says so (ESLURM_ALREADY_DONE)
                    worst = max(worst, EXIT_ALREADY_DONE)
                continue
            if signal is None:
                self._cancel(job)
            elif job.state == "PENDING":
                worst = max(worst, 1)
                errors.append(f"scancel: error: Kill job error on job id {target}: Job is pending execution")
            else:
                self._signal(job, signal, batch="batch" in opts)
        return worst, "", "\n".join(errors)

    def _sinfo(self, args: list[str]) -> tuple[int, str, str]:
        if args == ["-h", "-o", "%P"]:
            return 0, f"{self.partition}*\n", ""
        opts, _ = _options(args)
        busy = {j.node for j in self.jobs.values() if j.state == "RUNNING"}

        def state(node: str) -> str:
            return "down*" if node in self.down else "allocated" if node in busy else "idle"

        if args[:4] == ["-h", "-N", "-o", "%N %T"]:
            return 0, "".join(f"{n} {state(n)}\n" for n in self.nodes), ""
        if args[:3] == ["-h", "-N", "-n"] and args[4:] == ["-o", "%N|%T|%E"]:
            named = [n for n in self.nodes if n in expand_hostlist(args[3])]
            return 0, "".join(f"{n}|{state(n)}|{self.down.get(n, 'none')}\n" for n in named), ""
        raise Unmodelled(f"sinfo {args} {opts}")

    # -- what happens on the clock ----------------------------------------------------------------------

    def _new_job(
        self, name: str, node: str | None, script: Script | None, argv: list[str], text: str = ""
    ) -> FakeJob:
        self._next_id += 1
        register = _register_line(text)
        role = str(register["role"]) if register and "role" in register else name.removeprefix("atomdyn-")
        chosen = script or self.scripts.get(role) or self.scripts.get(name) or Script()
        job = FakeJob(self._next_id, name, node, chosen, argv, role=role, register_args=register)
        job.submitted = time.monotonic()
        job.reason = chosen.pending_reason
        job.history.append("PENDING")
        self.jobs[job.job_id] = job
        return job

    def _start(self, job: FakeJob, now: float) -> None:
        job.set_state("RUNNING")
        job.reason = None
        job.started = now
        if job.script.runs_on is not None:
            job.node = job.script.runs_on
        elif job.node is None:
            job.node = self.nodes[0]

    def _tick(self) -> None:
        last_keepalive = time.monotonic()
        while not self._stop.wait(self._tick_s):
            with self._lock:
                now = time.monotonic()
                self._advance(now)
                if now - last_keepalive >= 1.0:
                    last_keepalive = now
                    for job in [*self.jobs.values(), *self.steps.values()]:
                        if job.lease is not None and job.register_args is not None:
                            with suppress(ReadinessError):
                                self._client(job).keepalive(job.lease)

    def _advance(self, now: float) -> None:
        for job in [*self.jobs.values(), *self.steps.values()]:
            script = job.script
            if job.state == "PENDING" and not script.hold and now >= job.submitted + script.pending_s:
                self._start(job, now)
            if job.state == "RUNNING":
                assert job.started is not None
                ran = now - job.started
                if (
                    script.register
                    and job.lease is None
                    and not job.exited
                    and ran >= script.register_after_s
                ):
                    self._register(job)
                if script.time_limit_s is not None and ran >= script.time_limit_s:
                    self._end(job, "TIMEOUT", (0, 0), now, reason="TimeLimit")
                elif script.exit_after_s is not None and ran >= script.exit_after_s:
                    if not job.exited:  # the first process exits: the supervisor says so, then stops the
                        job.exited = True  # helper (its lease revoked) with the other processes
                        if script.failure is not None and job.log_dir is not None and job.role is not None:
                            Path(failure_file(str(job.log_dir), job.role)).write_text(script.failure + "\n")
                        self._deregister(job)
                    signalled = job.term_at is not None and now >= job.term_at + script.stop_s
                    if signalled or ran >= script.exit_after_s + script.exit_grace_s:  # the sweep, then exit
                        state = "COMPLETED" if script.exit_code == 0 else "FAILED"
                        self._end(job, state, (script.exit_code, 0), now, reason="NonZeroExitCode")
                elif (
                    job.term_at is not None
                    and script.on_term == "stop"
                    and now >= job.term_at + script.stop_s
                ):
                    self._end(job, "COMPLETED", (0, 0), now)
            if job.state == "COMPLETING" and job.end_at is not None and now >= job.end_at:
                assert job.final is not None
                job.set_state(job.final)
            aged = job.end_at is not None and now >= job.end_at + self.min_job_age_s
            if job.state in TERMINAL_STATES and self.min_job_age_s > 0 and aged:
                job.purged = True  # MinJobAge=0: never purged, as in Slurm

    def _end(
        self, job: FakeJob, final: str, code: tuple[int, int], now: float, reason: str | None = None
    ) -> None:
        """The job's processes are gone: its registration with them; Slurm completes it."""
        self._deregister(job)
        job.final, job.exit_code, job.end_at = final, code, now + self.completing_s
        job.reason = reason if final not in ("COMPLETED", "CANCELLED") else None
        job.set_state("COMPLETING")

    def _cancel(self, job: FakeJob) -> None:
        now = time.monotonic()
        job.signals.append("KILL")
        if job.state == "PENDING":
            job.final, job.exit_code, job.end_at = "CANCELLED", (0, 0), now
            job.set_state("CANCELLED")
            return
        self._end(job, "CANCELLED", (0, 15), now)

    def _signal(self, job: FakeJob, signal: str, *, batch: bool) -> None:
        job.signals.append(f"{signal}{' (batch)' if batch else ''}")
        if signal in ("TERM", "INT", "SIGTERM") and job.term_at is None:
            job.term_at = time.monotonic()
        elif signal in ("KILL", "9"):
            self._end(job, "CANCELLED", (0, 9), time.monotonic())

    # -- the simulated readiness helper -----------------------------------------------------------------

    def _client(self, job: FakeJob) -> EtcdClient:
        assert job.register_args is not None
        url = str(job.register_args["etcd"])
        if url not in self._etcd:
            self._etcd[url] = EtcdClient(url, timeout_s=2.0)
        return self._etcd[url]

    def _register(self, job: FakeJob) -> None:
        args = job.register_args
        if args is None:
            job.script.register = False  # nothing in its script registers (a one-shot job)
            return
        client = self._client(job)
        lease = client.grant(int(args.get("ttl", LEASE_TTL_S)))
        registration = Registration(
            role=str(args["role"]),
            job_id=str(job.job_id),
            node=job.node or "",
            host=self.registration_host,
            ports=dict(args["port"]),
            pids=dict(args["pid"]),
            registered_at=time.time(),
        )
        client.put(str(args["key"]), registration.to_json(), lease)
        job.lease = lease

    def _deregister(self, job: FakeJob) -> None:
        if job.lease is None:
            return
        with suppress(ReadinessError):
            self._client(job).revoke(job.lease)
        job.lease = None

    # -- steps ------------------------------------------------------------------------------------------

    def start_step(self, argv: Sequence[str], text: str) -> FakeSrun:
        opts, _ = _options(argv[1:])
        allocation = int(opts["jobid"])
        with self._lock:
            self.commands.append([str(a) for a in argv])
            alloc = self.jobs.get(allocation)
            node = opts.get("nodelist")
            if alloc is None or alloc.state != "RUNNING" or node not in expand_hostlist(alloc.node or ""):
                return FakeSrun(self, None, returncode=1)
            step_id = sum(1 for key in self.steps if key[0] == allocation)
            register = _register_line(text)
            role = str(register["role"]) if register and "role" in register else opts.get("job-name", "")
            step = FakeJob(
                allocation,
                opts.get("job-name", "bash"),
                node,
                self.scripts.get(role) or Script(),
                list(argv),
                role=role,
                register_args=register,
                step_id=step_id,
            )
            step.submitted = time.monotonic()
            step.history.append("PENDING")
            if "output" in opts:
                step.log_dir = Path(opts["output"]).parent
            self.steps[(allocation, step_id)] = step
            return FakeSrun(self, step)


class FakeSrun:
    """srun as the launcher's child: running while its step runs, then the step's exit status (the task's)."""

    def __init__(self, cluster: FakeCluster, step: FakeJob | None, returncode: int | None = None) -> None:
        self.cluster = cluster
        self.step = step
        self.pid = 0
        self._returncode = returncode
        self.terminated = False

    def poll(self) -> int | None:
        if self._returncode is not None or self.step is None:
            return self._returncode
        with self.cluster._lock:
            self.cluster._advance(time.monotonic())
            step = self.step
            if step.state in TERMINAL_STATES:
                code = step.exit_code or (0, 0)
                self._returncode = code[0] if code[0] else (128 + code[1] if code[1] else 0)
        return self._returncode

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("srun", timeout or 0.0)
            time.sleep(0.01)
        return code

    def terminate(self) -> None:
        """srun stopped: a step not started yet is withdrawn; a running one is signalled."""
        self.terminated = True
        if self.step is None:
            self._returncode = -15
            return
        with self.cluster._lock:
            if self.step.state == "PENDING":
                self.step.set_state("CANCELLED")
                self._returncode = -15
            elif self.step.state == "RUNNING":
                self.cluster._signal(self.step, "TERM", batch=False)


class FakeSlurm(Slurm):
    """The real client, its commands answered by ``cluster`` instead of the Slurm tools."""

    def __init__(self, config: ClusterConfig, cluster: FakeCluster) -> None:
        super().__init__(config)
        self.cluster = cluster

    def run(self, args: Sequence[str], *, env: Mapping[str, str] | None = None) -> str:
        timeout = self.command_timeout(args)  # the client's, or what is left of its deadline
        self._calls[Path(args[0]).name] += 1
        if self.cluster.silent(args[0]):
            self.cluster._answering.wait(timeout)  # a controller that does not answer: the command times out
            raise SlurmError(f"{' '.join(args)} did not answer within {timeout:.0f} s")
        code, out, err = self.cluster.run(args, env)
        if code != 0:
            raise SlurmError(f"{' '.join(args)} failed (exit {code}): {(err or out).strip()}")
        return out

    def start_step(
        self, args: Sequence[str], script: Path, *, log: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        if not Path(script).is_file():
            raise SlurmError(f"step script {script} does not exist")
        self._calls[Path(args[0]).name] += 1
        srun = self.cluster.start_step([*args, str(script)], Path(script).read_text(encoding="utf-8"))
        return cast("subprocess.Popen[bytes]", srun)


# -- Dynamo's frontend, as the stages see it --------------------------------------------------------------


@dataclass
class FrontendBehaviour:
    """What the fake frontend answers: /health lists ``instances``; completions are verified P/D responses
    (``disagg``) or, with ``completion_status`` other than 200, an error as Dynamo's when a worker is gone."""

    instances: dict[str, int] = field(default_factory=lambda: {"prefill": 1, "backend": 1})
    disagg: bool = True
    completion_status: int = 200
    completions: int = 0  # answered so far


def completion_body(disagg: bool) -> dict[str, Any]:
    """A chat completion shaped like Dynamo 1.3's (tests/run/test_smoke.py's GOOD)."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"content": "ogu cougu tuli", "role": "assistant"},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
        "nvext": {
            "worker_id": {"prefill_worker_id": 11, "decode_worker_id": 12}
            if disagg
            else {"decode_worker_id": 12},
            "timing": {"ttft_ms": 7.4, "total_time_ms": 68.2, "kv_hit_rate": 0.5},
        },
    }


@contextmanager
def fake_frontend(behaviour: FrontendBehaviour) -> Iterator[int]:
    """An HTTP server on loopback answering /health, /v1/chat/completions and /metrics; yields its port."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: object, content_type: str = "application/json") -> None:
            raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            if self.path == "/health":
                instances = [
                    {"component": c, "endpoint": "generate", "instance_id": i}
                    for c, n in behaviour.instances.items()
                    for i in range(n)
                ]
                self._send(200, {"status": "healthy", "instances": instances})
            elif self.path == "/metrics":
                self._send(200, "# TYPE fake_requests counter\nfake_requests_total 1\n", "text/plain")
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            behaviour.completions += 1
            if behaviour.completion_status != 200:
                self._send(behaviour.completion_status, {"error": "Failed to generate completions"})
            else:
                self._send(200, completion_body(behaviour.disagg))

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-frontend", daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


# -- a run over the fake: its context, the etcd it watches ------------------------------------------------


@contextmanager
def loopback_etcd(directory: Path) -> Iterator[str]:
    """A real etcd on loopback (Debian's etcd-server), its data in ``directory``; yields its URL."""
    exe = shutil.which("etcd")
    if exe is None:
        raise AssertionError("etcd is not installed (apt-get install etcd-server)")
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
    url, peer = f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
    name = f"fake{os.getpid()}"
    with (directory / "etcd.log").open("w") as log:
        proc = subprocess.Popen(
            [exe, "--name", name, "--data-dir", str(directory / "data"), "--listen-client-urls", url,
             "--advertise-client-urls", url, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"{name}={peer}"],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                EtcdClient(url, timeout_s=1).version()
                break
            except ReadinessError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((directory / "etcd.log").read_text()[-500:]) from exc
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def fake_config(etcd_url: str, shared: Path, engine: str = "mocker") -> ClusterConfig:
    """The golden two-node cluster (gpu-node-01, gpu-node-02, partition gpu), its etcd ``etcd_url``."""
    text = CLUSTER_ENV.replace(ETCD, etcd_url).replace(
        "SHARED_DIR=/shared/atomdyn\n", f"SHARED_DIR={shared}\n"
    )
    return parse_cluster_env(text + f"ENGINE_PROFILE={engine}\nRUNTIME=venv\n", "fake.env")


@dataclass
class FakeRun:
    """One run's context over a fake cluster, its monitor, and what its progress printed."""

    ctx: RunContext
    monitor: Monitor
    cluster: FakeCluster
    output: io.StringIO

    @property
    def path(self) -> Path:
        return self.ctx.rundir.path

    def timeline(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path / "timeline.jsonl")

    def events(self, name: str | None = None) -> list[tuple[str, str | None, str | None]]:
        """(event, role, detail) of the timeline, in order; only ``name``'s when given."""
        return [
            (str(e["event"]), e.get("role"), e.get("detail"))
            for e in self.timeline()
            if name is None or e["event"] == name
        ]

    def run_json(self) -> dict[str, Any]:
        loaded = json.loads((self.path / "run.json").read_text(encoding="utf-8"))
        assert isinstance(loaded, dict)
        return loaded

    def printed(self) -> str:
        return self.output.getvalue()


def fake_run(
    cluster: FakeCluster,
    etcd_url: str,
    runs: Path,
    frontend_port: int,
    options: LaunchOptions,
    *,
    hook: Hook | None = None,
    probe: ProbeOptions | None = None,
) -> FakeRun:
    """What Launch.run builds after its preflight (run directory, etcd session, ports), over ``cluster``; every
    role's ports are the fake frontend's, so that its registration leads the launcher there."""
    config = fake_config(etcd_url, runs.parent, options.engine or "mocker")
    engine = get_engine(options.engine or config.engine_profile)
    model = get_model(options.model or engine.default_model)
    roles = plan_roles(options.kind, config, options.prefill_workers, options.decode_workers, options.nodes)
    rundir = new_run_dir(runs, options, engine, model, roles)
    output = io.StringIO()
    progress = Progress(stream=output)
    slurm = FakeSlurm(config, cluster)
    etcd = open_session(
        config, engine, options.kind, rundir.path, rundir.run_id, slurm=slurm, progress=progress
    )
    port = frontend_port
    ports = {
        r.role: Ports(http=port, system=port, bootstrap=port, nixl_side_channel=port, kv_events=port)
        for r in roles
    }
    allocation = slurm.allocation(options.allocation) if options.allocation is not None else None
    ctx = RunContext(
        config=config,
        options=options,
        engine=engine,
        model=model,
        roles=roles,
        slurm=slurm,
        progress=progress,
        hook=hook,
        probe=probe,
        rundir=rundir,
        etcd=etcd,
        ports=ports,
        allocation=allocation,
    )
    return FakeRun(ctx, Monitor(ctx), cluster, output)
