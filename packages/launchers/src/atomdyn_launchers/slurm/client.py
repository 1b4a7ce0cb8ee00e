"""Wrappers over sbatch, scontrol, sacct, squeue, sinfo and scancel for one configured cluster.

Every submission passes ``--account``, ``--partition`` and ``--qos`` from the cluster config explicitly (a
cluster without accounting accepts and ignores account and QoS; the partition must exist).

Job state comes from ``sacct`` when accounting is on. With ``AccountingStorageType=accounting_storage/none``
sacct does not work, so state comes from ``scontrol show job``, which keeps a finished job only for
``MinJobAge`` seconds; every answer is remembered in the :class:`Slurm` object, so a job that has left the
controller still reports what was last seen (``JobInfo.source == "cache"``). A job's ``ExitCode`` hides a
failed step: judge success by ``DerivedExitCode`` as well (:attr:`JobInfo.succeeded`).

Polling is kept light, because a busy slurmdbd gets users banned: :class:`JobPoller` asks ``squeue`` (the
controller's memory, one call for every job of a run) while jobs are queued or running, and asks ``sacct`` (or
``scontrol``) once per job only after it left the queue. It polls every 0.5 s for the first minute, every 2 s
until five minutes, then every 10 s (:func:`poll_interval`). Every command is counted
(:meth:`Slurm.call_counts`); a run records its calls per minute in run.json.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.rundir import TERMINAL_STATES, ExitCode, parse_exit_code

_POLL_S = 0.1  # node states while waiting out a node's grace (sinfo; preflight only)
# Node states (sinfo %T, lower case, '*' when not responding) no job can start on until somebody acts.
UNAVAILABLE_STATE = re.compile(r"(down|drain|fail|inval)")
# (seconds since the watch began, interval from then on): fast at first, then backing off.
POLL_SCHEDULE = ((0.0, 0.5), (60.0, 2.0), (300.0, 10.0))
QUEUE_STATES = frozenset(
    {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
)


def _is_query(args: Sequence[str]) -> bool:
    """Whether a Slurm command only reads (asking it twice changes nothing)."""
    name = Path(args[0]).name if args else ""
    return name in ("squeue", "sinfo", "sacct") or (name == "scontrol" and list(args[1:2]) == ["show"])


class SlurmError(RuntimeError):
    """A Slurm command failed; the message carries the command and its stderr."""


@dataclass(frozen=True)
class JobInfo:
    job_id: int
    name: str
    state: str  # base state: PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, ...
    reason: str | None
    nodes: str | None  # the node list the job ran (or runs) on; None while pending
    exit_code: ExitCode | None
    derived_exit_code: ExitCode | None  # the highest exit code of any step
    source: str  # "squeue", "sacct", "scontrol" or "cache" (the controller forgot the job; the last answer)
    # Set for a job step inside an allocation (``job_id.step_id``); its state comes from srun (steps.py).
    step_id: int | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        """COMPLETED with exit 0:0 and no failed step."""
        return (
            self.state == "COMPLETED"
            and self.exit_code == (0, 0)
            and self.derived_exit_code in (None, (0, 0))
        )


def parse_scontrol_record(line: str) -> dict[str, str]:
    """One ``scontrol show -o`` record into Key -> Value (values may hold spaces, keys never do)."""
    fields: dict[str, str] = {}
    for match in re.finditer(
        r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_:/]*=|\s*$)", line
    ):
        fields.setdefault(match.group(1), match.group(2))
    return fields


SACCT_FORMAT = "JobID,JobName,State,Reason,NodeList,ExitCode,DerivedExitCode"


def parse_sacct(out: str, job_id: int) -> JobInfo | None:
    """The allocation line of ``sacct -X -n -P --format=SACCT_FORMAT`` for ``job_id`` (states like
    "CANCELLED by 0" are reduced to their first word)."""
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 7 or parts[0] != str(job_id):
            continue
        state = parts[2].split()[0] if parts[2].strip() else "UNKNOWN"
        return JobInfo(
            job_id=job_id,
            name=parts[1],
            state=state.rstrip("+"),
            reason=None if parts[3] in ("", "None") else parts[3],
            nodes=None if parts[4] in ("", "None assigned") else parts[4],
            exit_code=parse_exit_code(parts[5]),
            derived_exit_code=parse_exit_code(parts[6]),
            source="sacct",
        )
    return None


@dataclass(frozen=True)
class Allocation:
    """A job whose nodes a run starts its roles on as job steps (``salloc``, or a holder job)."""

    job_id: int
    state: str
    node_list: str  # as Slurm writes it, e.g. node[1-2]
    nodes: tuple[str, ...]  # expanded (scontrol show hostnames)

    def require_running(self) -> None:
        if self.state != "RUNNING":
            raise PreflightError(
                f"allocation {self.job_id} is {self.state}, not RUNNING: a run starts its roles as steps "
                "only on an allocation that holds its nodes (salloc, or a running job)"
            )

    def require_nodes(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            if node not in self.nodes:
                raise PreflightError(
                    f"node {node!r} is not in allocation {self.job_id} (its nodes: {self.node_list}): "
                    "allocate it too, or place the roles on the allocation's nodes"
                )


NO_ALLOCATION = ("none", "no", "off")  # --allocation's help (slurm/flags.py) names the first


class AllocationFlagError(ValueError):
    """``--allocation`` is neither a job id nor ``none``."""


def parse_allocation(value: object, environ: Mapping[str, str]) -> tuple[int | None, bool]:
    """The allocation a command starts its jobs in as steps, and whether it was detected rather than given.

    ``--allocation JOBID``: that job. ``--allocation none``: batch jobs, whatever the environment says. Not
    given: the allocation of the ``salloc`` shell the command runs in, which is where ``SLURM_JOB_ID`` is set
    while ``SLURM_STEP_ID`` is not (inside a step, ``srun``'s) and ``ENVIRONMENT`` is not ``BATCH`` (inside a
    batch script, ``sbatch``'s); anywhere else, batch jobs as always."""
    if value is not None and not (isinstance(value, str) and not value.strip()):
        text = str(value).strip()
        if text.lower() in NO_ALLOCATION:
            return None, False
        if not text.isdigit() or int(text) < 1:
            raise AllocationFlagError(f"--allocation must be a Slurm job id or 'none', not {value!r}")
        return int(text), False
    job = environ.get("SLURM_JOB_ID", "").strip()
    if not job.isdigit() or "SLURM_STEP_ID" in environ or environ.get("ENVIRONMENT") == "BATCH":
        return None, False
    return int(job), True


def held_allocation(slurm: Slurm, job: int, nodes: Iterable[str], *, detected: bool = False) -> Allocation:
    """Allocation ``job`` (``--allocation JOBID``, or the salloc shell's when ``detected``), RUNNING and holding
    every one of ``nodes``; else a PreflightError naming the node and the allocation (and, when the allocation
    was detected, how to opt out), before anything is started in it."""
    hint = (
        f" (allocation {job} is SLURM_JOB_ID of this shell; --allocation none submits batch jobs instead)"
        if detected
        else ""
    )
    try:
        allocation = slurm.allocation(job)
        allocation.require_running()
        allocation.require_nodes(nodes)
    except PreflightError as exc:
        raise PreflightError(f"{exc}{hint}") from None
    return allocation


@dataclass(frozen=True)
class StepInfo:
    """A job step the controller still lists (``squeue --steps``)."""

    job_id: int
    step_id: int
    name: str
    nodes: str | None


def parse_steps(out: str) -> list[StepInfo]:
    """``squeue -s -h -o '%i|%j|%N'`` lines into StepInfo; the batch, extern and interactive steps are left out
    (their ids are not numbers)."""
    found: list[StepInfo] = []
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        job, _, step = parts[0].partition(".")
        if job.isdigit() and step.isdigit():
            found.append(StepInfo(int(job), int(step), parts[1], parts[2] or None))
    return found


class Slurm:
    """Slurm commands against the cluster named by ``config`` (``SLURM_CONF`` when the config sets it)."""

    def __init__(self, config: ClusterConfig, *, timeout: float = 30.0) -> None:
        self.config = config
        self.timeout = timeout
        self.env = dict(os.environ)
        if config.slurm_conf is not None:
            self.env["SLURM_CONF"] = str(config.slurm_conf)
        self._accounting: bool | None = None
        self._seen: dict[int, JobInfo] = {}
        self._calls: Counter[str] = Counter()
        self._created = time.monotonic()
        self._deadline: tuple[float, str] | None = None  # see deadline()

    def call_counts(self) -> dict[str, object]:
        """Slurm commands run so far by this object, per command, and the rate (calls per minute)."""
        seconds = max(time.monotonic() - self._created, 1e-9)
        total = sum(self._calls.values())
        return {
            "calls": dict(sorted(self._calls.items())),
            "total": total,
            "seconds": round(seconds, 1),
            "per_minute": round(total * 60.0 / max(seconds, 60.0), 1),
        }

    # -- running commands --------------------------------------------------------------------------------

    @contextmanager
    def deadline(self, at: float, what: str) -> Iterator[None]:
        """Until the block ends no command waits past ``at`` (``time.monotonic()``): each gets what is left, at
        most its own timeout, and once nothing is left none is sent (a SlurmError naming ``what``, the budget).
        A run's stop works under one: however slow the controller, it ends in a bounded time. Nested blocks
        keep the earlier deadline."""
        previous = self._deadline
        if previous is None or at < previous[0]:
            self._deadline = (at, what)
        try:
            yield
        finally:
            self._deadline = previous

    def command_timeout(self, args: Sequence[str]) -> float:
        """The seconds ``args`` may take: the client's timeout, or what is left of the current deadline."""
        if self._deadline is None:
            return self.timeout
        at, what = self._deadline
        left = at - time.monotonic()
        if left <= 0:
            raise SlurmError(f"{' '.join(args)} not sent: no time left of {what}")
        return min(self.timeout, left)

    def run(self, args: Sequence[str], *, env: Mapping[str, str] | None = None) -> str:
        """Run a Slurm command; return stdout or raise SlurmError naming the command and its stderr.

        A query (squeue, sinfo, sacct, scontrol show) that dies of a signal is asked once more: that is no
        answer but the client's connection dropping under it (scontrol killed by SIGPIPE, empty stderr, seen on
        a loaded local cluster); a command that changes state is never sent twice."""
        done = self._run_once(args, env)
        if done.returncode < 0 and _is_query(args):
            done = self._run_once(args, env)
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip()
            raise SlurmError(f"{' '.join(args)} failed (exit {done.returncode}): {detail}")
        return done.stdout

    def _run_once(
        self, args: Sequence[str], env: Mapping[str, str] | None
    ) -> subprocess.CompletedProcess[str]:
        timeout = self.command_timeout(args)
        self._calls[Path(args[0]).name] += 1
        try:
            return subprocess.run(
                list(args),
                env={**self.env, **(env or {})},
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmError(f"{args[0]} is not installed (Slurm client tools are needed)") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(f"{' '.join(args)} did not answer within {timeout:.0f} s") from exc

    # -- submission --------------------------------------------------------------------------------------

    def sbatch_args(
        self,
        *,
        job_name: str | None = None,
        nodelist: str | None = None,
        gres: str | None = None,
        output: Path | None = None,
        chdir: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> list[str]:
        """The sbatch command line before the script: account, partition and QoS always explicit."""
        cfg = self.config
        args = ["sbatch", "--parsable"]
        args += [
            f"--account={cfg.slurm_account}",
            f"--partition={cfg.slurm_partition}",
            f"--qos={cfg.slurm_qos}",
        ]
        if job_name:
            args.append(f"--job-name={job_name}")
        if nodelist:
            args.append(f"--nodelist={nodelist}")
        if gres:
            args.append(f"--gres={gres}")
        if output is not None:
            args.append(f"--output={output}")
        if chdir is not None:
            args.append(f"--chdir={chdir}")
        return args + list(cfg.slurm_extra_args) + list(extra_args)

    def submit(
        self,
        script: Path,
        *,
        job_name: str | None = None,
        nodelist: str | None = None,
        gres: str | None = None,
        output: Path | None = None,
        chdir: Path | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> int:
        """Submit ``script``; ``env`` adds variables to the job's environment (on top of the caller's)."""
        if not Path(script).is_file():
            raise SlurmError(f"sbatch script {script} does not exist")
        args = self.sbatch_args(
            job_name=job_name, nodelist=nodelist, gres=gres, output=output, chdir=chdir, extra_args=extra_args
        )
        out = self.run([*args, str(script)], env=env).strip()
        match = re.match(r"^(\d+)(;.*)?$", out)
        if not match:
            raise SlurmError(f"sbatch printed {out!r}, not a job id")
        return int(match.group(1))

    def queue(self, job_ids: Iterable[int] = ()) -> dict[int, str]:
        """Job id -> state of the jobs the controller still queues or runs (squeue forgets finished jobs)."""
        ids = ",".join(str(j) for j in job_ids)
        out = self.run(["squeue", "-h", "-o", "%i %T", *([f"--jobs={ids}"] if ids else [])])
        queued: dict[int, str] = {}
        for line in out.splitlines():
            job, _, state = line.strip().partition(" ")
            if job.isdigit():
                queued[int(job)] = state.strip()
        return queued

    def cancel(self, job_ids: Iterable[int], *, signal: str | None = None) -> None:
        ids = [str(j) for j in job_ids]
        if ids:
            self.run(["scancel", *([f"--signal={signal}"] if signal else []), *ids])

    def signal_batch(self, job_ids: Iterable[int], signal: str = "TERM") -> None:
        """Send ``signal`` to the job scripts only (``scancel --batch``): a script that traps it stops its own
        processes, and the job ends COMPLETED rather than CANCELLED."""
        ids = [str(j) for j in job_ids]
        if ids:
            self.run(["scancel", "--batch", f"--signal={signal}", *ids])

    # -- job steps inside an allocation -----------------------------------------------------------------

    def allocation(self, job_id: int) -> Allocation:
        """The job ``job_id`` as an allocation to start steps on: its state and its nodes, expanded."""
        try:
            out = self.run(["scontrol", "show", "job", "-o", str(job_id)])
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                raise PreflightError(f"allocation {job_id} is not a job of this cluster ({exc})") from None
            raise
        lines = [line for line in out.splitlines() if line.strip()]
        rec = parse_scontrol_record(lines[0]) if lines else {}
        node_list = rec.get("NodeList", "")
        nodes: tuple[str, ...] = ()
        if node_list not in ("", "(null)"):
            nodes = tuple(self.run(["scontrol", "show", "hostnames", node_list]).split())
        return Allocation(job_id, rec.get("JobState", "UNKNOWN"), node_list, nodes)

    def srun_args(
        self,
        *,
        allocation: int,
        nodelist: str,
        job_name: str | None = None,
        gres: str | None = None,
        output: Path | None = None,
        chdir: Path | None = None,
    ) -> list[str]:
        """The srun command line before the script: one task on ``nodelist``, a step of ``allocation``.

        ``--overlap``: the step shares the allocation's CPUs, memory and GPUs with its other steps (a holder's
        batch step, a previous run's step still stopping) rather than waiting for them. Its output goes to
        ``output`` as sbatch's ``--output`` would, appended (srun's own messages are appended there too)."""
        args = ["srun", f"--jobid={allocation}", f"--nodelist={nodelist}", "--nodes=1", "--ntasks=1"]
        args += ["--overlap", "--input=none", "--open-mode=append"]
        if job_name:
            args.append(f"--job-name={job_name}")
        if gres:
            args.append(f"--gres={gres}")
        if output is not None:
            args.append(f"--output={output}")
        if chdir is not None:
            args.append(f"--chdir={chdir}")
        return args

    def start_step(
        self, args: Sequence[str], script: Path, *, log: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``args script`` (an srun command line) as a child in its own session, so that neither a
        Ctrl-C at the launcher's terminal nor its exit reaches srun; srun's own messages are appended to
        ``log`` (the file the step's output goes to)."""
        if not Path(script).is_file():
            raise SlurmError(f"step script {script} does not exist")
        self._calls[Path(args[0]).name] += 1
        with open(log, "ab") as out:
            try:
                return subprocess.Popen(
                    [*args, str(script)],
                    env={**self.env, **(env or {})},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except FileNotFoundError as exc:
                raise SlurmError(f"{args[0]} is not installed (Slurm client tools are needed)") from exc

    def steps(self, allocation: int) -> list[StepInfo]:
        """The allocation's job steps the controller lists now (running or being set up)."""
        try:
            out = self.run(["squeue", "-s", "-h", f"--jobs={allocation}", "-o", "%i|%j|%N"])
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return []
            raise
        return [s for s in parse_steps(out) if s.job_id == allocation]

    def signal_step(self, job_id: int, step_id: int, signal: str = "TERM") -> None:
        """Send ``signal`` to every process of one step; the allocation and its other steps are untouched.

        Slurm 22.05's scancel delivers a signal other than KILL to a step and then reports "Invalid job id
        specified" (exit 225): that answer is taken as delivered; the caller waits for the step to end and
        cancels it when it does not."""
        try:
            self.run(["scancel", f"--signal={signal}", f"{job_id}.{step_id}"])
        except SlurmError as exc:
            if "Invalid job id specified" not in str(exc):
                raise

    def cancel_step(self, job_id: int, step_id: int) -> None:
        """scancel one step (SIGKILL after KillWait); never the allocation it belongs to."""
        self.run(["scancel", f"{job_id}.{step_id}"])

    # -- job state ---------------------------------------------------------------------------------------

    def accounting_enabled(self) -> bool:
        if self._accounting is None:
            value = self.config_value("AccountingStorageType") or "accounting_storage/none"
            self._accounting = value != "accounting_storage/none"
        return self._accounting

    def config_value(self, key: str) -> str | None:
        for line in self.run(["scontrol", "show", "config"]).splitlines():
            name, sep, value = line.partition("=")
            if sep and name.strip() == key:
                return value.strip()
        return None

    def job(self, job_id: int) -> JobInfo:
        """The job's current state: sacct with accounting, else scontrol, else the last answer seen."""
        info = self._sacct(job_id) if self.accounting_enabled() else self._scontrol(job_id)
        if info is not None:
            self._seen[job_id] = info
            return info
        if job_id in self._seen:
            return replace(self._seen[job_id], source="cache")
        raise SlurmError(
            f"job {job_id} is unknown to the controller and no earlier state was recorded "
            "(accounting is off and the job left the controller after MinJobAge)"
        )

    def _scontrol(self, job_id: int) -> JobInfo | None:
        try:
            out = self.run(["scontrol", "-d", "show", "job", "-o", str(job_id)])
        except SlurmError as exc:
            if "Invalid job id" in str(exc):
                return None
            raise
        lines = [line for line in out.splitlines() if line.strip()]
        if not lines:
            return None
        rec = parse_scontrol_record(lines[0])  # -d adds DerivedExitCode
        nodes = rec.get("NodeList")
        return JobInfo(
            job_id=job_id,
            name=rec.get("JobName", ""),
            state=rec.get("JobState", "UNKNOWN"),
            reason=None if rec.get("Reason") in (None, "None") else rec.get("Reason"),
            nodes=None if nodes in (None, "(null)", "") else nodes,
            exit_code=parse_exit_code(rec.get("ExitCode")),
            derived_exit_code=parse_exit_code(rec.get("DerivedExitCode")),
            source="scontrol",
        )

    def _sacct(self, job_id: int) -> JobInfo | None:
        out = self.run(["sacct", "-j", str(job_id), "-X", "-n", "-P", f"--format={SACCT_FORMAT}"])
        return parse_sacct(out, job_id)

    def wait_for(
        self, job_id: int, predicate: Callable[[JobInfo], bool], *, timeout: float, what: str
    ) -> JobInfo:
        """Poll the job until ``predicate`` holds; TimeoutError names ``what`` and the last state seen."""
        deadline = time.monotonic() + timeout
        poller = JobPoller(self)
        while True:
            info = poller.poll([job_id], force=True)[job_id]
            if predicate(info):
                return info
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"job {job_id} ({info.name}) not {what} after {timeout:.0f} s: "
                    f"state {info.state}, reason {info.reason}"
                )
            time.sleep(max(0.0, min(poller.next_due(), deadline) - time.monotonic()))

    def wait_terminal(self, job_id: int, *, timeout: float) -> JobInfo:
        return self.wait_for(job_id, lambda i: i.terminal, timeout=timeout, what="finished")

    # -- cluster shape -----------------------------------------------------------------------------------

    def partitions(self) -> list[str]:
        return [p.rstrip("*") for p in self.run(["sinfo", "-h", "-o", "%P"]).split()]

    def node_states(self, partition: str | None = None) -> dict[str, str]:
        """Node name -> Slurm state (idle, mixed, allocated, down*, drained, ...)."""
        args = ["sinfo", "-h", "-N", "-o", "%N %T"] + ([f"--partition={partition}"] if partition else [])
        states: dict[str, str] = {}
        for line in self.run(args).splitlines():
            name, _, state = line.strip().partition(" ")
            if name:
                states[name] = state.strip()
        return states

    def unavailable_nodes(self, nodes: Iterable[str]) -> dict[str, str]:
        """Those of ``nodes`` Slurm will start no job on (down, drained, failed), each with its state and the
        reason Slurm records (``down* (Not responding)``: the node's slurmd does not answer the controller)."""
        wanted = sorted(set(nodes))
        if not wanted:
            return {}
        out = self.run(["sinfo", "-h", "-N", "-n", ",".join(wanted), "-o", "%N|%T|%E"])
        found: dict[str, str] = {}
        for line in out.splitlines():
            name, _, rest = line.strip().partition("|")
            state, _, reason = rest.partition("|")
            if name in wanted and UNAVAILABLE_STATE.match(state):
                found[name] = state + (f" ({reason.strip()})" if reason.strip() not in ("", "none") else "")
        return found

    def check_partition(self) -> None:
        names = self.partitions()
        if self.config.slurm_partition not in names:
            raise PreflightError(
                f"SLURM_PARTITION {self.config.slurm_partition!r} does not exist "
                f"(partitions: {', '.join(names)})"
            )

    def check_nodes(self, nodes: Iterable[str], *, grace: float = 3.0) -> None:
        """Every node exists in the configured partition, is not down or drained, and responds. A node
        marked not responding ('*', also seen for a moment after a resume) gets ``grace`` seconds."""
        wanted = list(nodes)
        deadline = time.monotonic() + grace
        while True:
            states = self.node_states(self.config.slurm_partition)
            for node in wanted:
                if node not in states:
                    raise PreflightError(
                        f"node {node!r} does not exist in partition {self.config.slurm_partition!r} "
                        f"(nodes: {', '.join(sorted(states))})"
                    )
                if UNAVAILABLE_STATE.match(states[node]):
                    raise PreflightError(f"node {node!r} is {states[node]}")
            silent = [n for n in wanted if states[n].endswith("*")]
            if not silent:
                return
            if time.monotonic() >= deadline:
                node = silent[0]
                raise PreflightError(f"node {node!r} is not responding (Slurm state {states[node]})")
            time.sleep(_POLL_S)


def poll_interval(elapsed_s: float) -> float:
    """Seconds between two polls of a run's jobs, ``elapsed_s`` after the watch began."""
    interval = POLL_SCHEDULE[0][1]
    for since, every in POLL_SCHEDULE:
        if elapsed_s >= since:
            interval = every
    return interval


def parse_squeue(out: str) -> dict[int, JobInfo]:
    """``squeue -h -o '%i|%j|%T|%r|%N'`` lines into JobInfo (no exit codes: the job has not ended)."""
    found: dict[int, JobInfo] = {}
    for line in out.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        found[int(parts[0])] = JobInfo(
            job_id=int(parts[0]),
            name=parts[1],
            state=parts[2],
            reason=None if parts[3] in ("", "None") else parts[3],
            nodes=parts[4] or None,
            exit_code=None,
            derived_exit_code=None,
            source="squeue",
        )
    return found


# A controller too busy to answer (slurmctld under load: "Unexpected missing socket error") is asked again at
# the next poll, with the last answers standing in; only this long without an answer fails the run.
TRANSIENT_S = 30.0


class JobPoller:
    """The states of a set of jobs at a bounded rate (see the module docstring).

    :meth:`poll` answers from its last reading until the next poll is due (:func:`poll_interval` of the time
    since the poller was made); ``force`` reads now. One ``squeue`` covers every job still queued; a job that
    left the queue is asked of ``sacct``/``scontrol`` once and then answered from what was read.
    """

    def __init__(self, slurm: Slurm, clock: Callable[[], float] = time.monotonic) -> None:
        self.slurm = slurm
        self.clock = clock
        self.started = clock()
        self._due = self.started
        self._known: dict[int, JobInfo] = {}
        self._failing_since: float | None = None

    def next_due(self) -> float:
        return self._due

    def poll(self, job_ids: Iterable[int], *, force: bool = False) -> dict[int, JobInfo]:
        ids = list(job_ids)
        now = self.clock()
        unread = [j for j in ids if j not in self._known]
        if force or unread or now >= self._due:
            self._read([j for j in ids if not (j in self._known and self._known[j].terminal)])
            self._due = now + poll_interval(now - self.started)
        return {j: self._known[j] for j in ids}

    def _read(self, ids: list[int]) -> None:
        if not ids:
            return
        try:
            queued = parse_squeue(
                self.slurm.run(["squeue", "-h", f"--jobs={','.join(map(str, ids))}", "-o", "%i|%j|%T|%r|%N"])
            )
        except SlurmError as exc:
            if "Invalid job id" in str(exc):  # every job already left the controller
                queued = {}
            else:
                now = self.clock()
                self._failing_since = now if self._failing_since is None else self._failing_since
                if now - self._failing_since >= TRANSIENT_S or any(j not in self._known for j in ids):
                    raise SlurmError(
                        f"{exc} (no answer for {now - self._failing_since:.0f} s; tried again every poll)"
                    ) from exc
                return  # the last answers stand until the controller answers again
        self._failing_since = None
        for job_id in ids:
            info = queued.get(job_id)
            if info is None or info.state not in QUEUE_STATES:
                info = self.slurm.job(job_id)  # the final state, with exit codes
            self._known[job_id] = info
