"""A run, stage by stage: aggregated or disaggregated, from the options to ``run.json``.

  preflight  options, engine, recipe, venv or images, tiny model, partition, nodes, model path, etcd and
             nodes.check (run/preflight.py): nothing is created or submitted when one fails
  etcd       ETCD_ENDPOINTS, or an etcd the run starts in a job of its own (run/etcd_session.py)

then, over one RunContext and its Monitor, the stages of SERVING in order (run/stages/):

  watch_etcd the role watch and the launcher's presence key
  submit     one sbatch job per role, each pinned to its node with --nodelist (inside an allocation,
             --allocation: one srun job step per role on its node instead, the same script)
  watch      until every role registered in etcd (its processes healthy) and the frontend lists them
  smoke      a verified response (P/D: different prefill and decode workers), the fixed prompt where the
             engine's answers are compared, the smoke requests, each checked, the metrics
  accuracy   the recipe's accuracy check (its task's items through the frontend, greedy, scored as the task's
             row in profiles/accuracy_tasks.py says: gsm8k as lm-eval scores it, capitals by the capital in
             the answer's first line), when it asks for one: performance numbers are only trusted once
             accuracy passes
  benchmark  the recipe's serving benchmark (aiperf sweep), when it asks for one

or, for the cross-node NIXL probe (a run with ProbeOptions: every role runs the probe in its worker's
runtime instead of the engine), watch_etcd, submit and

  probe      until both one-shot jobs exited 0 (the probe verified every byte)

and always, however the stages ended:

  stop       SIGTERM to each job script (it stops its processes and exits 0), wait for Slurm to settle
  record     job states and placement from Slurm, run.json

While a stage waits, the monitor watches the jobs and the etcd registrations: the first role to fail fails the
run, the stages left are skipped, the jobs are stopped and every log is kept. Ctrl-C (or SIGTERM) stops the jobs
the same way. A dry run is the same pipeline stopped before submit: the preflight (unless offline), then every
job script and the sbatch command that would submit it.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.cluster import (
    ClusterConfig,
    PreflightError,
    load_cluster_config,
    resolve_cluster_config,
)
from atomdyn_launchers.contract.readiness import ReadinessError
from atomdyn_launchers.engines import Engine, get_engine
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.nodes.check import CheckReport
from atomdyn_launchers.nodes.etcd_owned import owned_etcd_node
from atomdyn_launchers.profiles.models import ModelProfile, get_model
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run import ports as port_leases
from atomdyn_launchers.run.context import Hook, LaunchFailure, RunContext
from atomdyn_launchers.run.dry_run import write_dry_run
from atomdyn_launchers.run.etcd_session import close_session, open_session
from atomdyn_launchers.run.metrics import scrape_metrics
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.orphans import clean_before_run
from atomdyn_launchers.run.plan import new_run_dir, plan_roles
from atomdyn_launchers.run.preflight import check_allocation, check_run
from atomdyn_launchers.run.stages.accuracy import accuracy
from atomdyn_launchers.run.stages.benchmark import benchmark
from atomdyn_launchers.run.stages.etcd import watch_etcd
from atomdyn_launchers.run.stages.probe import probe
from atomdyn_launchers.run.stages.record import Outcome, record
from atomdyn_launchers.run.stages.smoke import smoke
from atomdyn_launchers.run.stages.stop import cancel_hard, stop
from atomdyn_launchers.run.stages.submit import submit
from atomdyn_launchers.run.stages.watch import watch
from atomdyn_launchers.slurm.client import Allocation, Slurm, SlurmError

Stage = Callable[[RunContext, Monitor], None]

SERVING: tuple[Stage, ...] = (watch_etcd, submit, watch, smoke, accuracy, benchmark)
# The cross-node NIXL probe (ProbeOptions): the same run up to the jobs, which end on their own.
PROBE: tuple[Stage, ...] = (watch_etcd, submit, probe)

# What fails a run (and skips the stages left); anything else is a bug and propagates after the jobs stopped.
RUN_FAILURES = (LaunchFailure, ReadinessError, SlurmError, PreflightError)


class Launch:
    """One run of ``options`` on the cluster ``config`` describes."""

    def __init__(
        self,
        config: ClusterConfig,
        options: LaunchOptions,
        *,
        progress: Progress | None = None,
        slurm: Slurm | None = None,
        hook: Hook | None = None,
        probe: ProbeOptions | None = None,
    ) -> None:
        self.config = config
        self.options = options
        self.probe = probe
        self.engine: Engine = get_engine(options.engine or config.engine_profile)
        if probe is not None and self.engine.kv_probe_engine:  # an engine that moves no KV over NIXL
            self.engine = get_engine(self.engine.kv_probe_engine)
        self.progress = progress or Progress()
        self.slurm = slurm or Slurm(config)
        self.hook = hook
        self.model: ModelProfile = get_model(options.model or self.engine.default_model)
        self.roles = plan_roles(
            options.kind, config, options.prefill_workers, options.decode_workers, options.nodes
        )
        self.allocation: Allocation | None = None  # read in preflight

    def preflight(self, problems: list[str] | None = None) -> CheckReport | None:
        """Refuse what cannot run before anything is created or submitted; the node report, if checked.
        ``problems``: list the engine's launch problems there instead (a dry run). Inside an allocation
        (``--allocation``), first that it runs and holds every role's node."""
        nodes = [r.node for r in self.roles]
        if self.config.etcd_endpoint is None:  # the run-owned etcd is a step of the allocation too
            nodes.append(owned_etcd_node(self.config, self.options.kind))
        self.allocation = check_allocation(self.slurm, self.options, nodes)
        return check_run(
            self.config,
            self.options,
            self.engine,
            self.model,
            self.roles,
            slurm=self.slurm,
            progress=self.progress,
            problems=problems,
        )

    def clean_orphans(self) -> None:
        """Stop what runs whose launcher died left behind (their jobs, etcd keys and port leases)."""
        clean_before_run(self.config, self.slurm, self.progress)

    def run(self) -> Outcome:
        """Run once. Preflight errors raise PreflightError before anything is created or submitted."""
        self.clean_orphans()
        report = self.preflight()
        rundir = new_run_dir(
            self.options.runs_root or self.config.runs_dir, self.options, self.engine, self.model, self.roles
        )
        self.progress.line(f"run {rundir.run_id} -> {rundir.path}")
        if report is not None:  # the node check, kept as evidence
            atomic_write_text(rundir.path / "node-check.json", json.dumps(report.to_json(), indent=2) + "\n")
        lease = port_leases.allocate(
            self.config.shared_dir, rundir.run_id, rundir.path, [(r.role, r.index) for r in self.roles]
        )
        self.progress.line(
            f"ports {lease.block_start}-{lease.block_start + port_leases.BLOCK - 1} (ports.json)"
        )
        try:
            etcd = open_session(
                self.config,
                self.engine,
                self.options.kind,
                rundir.path,
                rundir.run_id,
                slurm=self.slurm,
                progress=self.progress,
                lock_path=self.options.lock_path,
                allocation=self.allocation.job_id if self.allocation is not None else None,
            )
            ctx = RunContext(
                config=self.config,
                options=self.options,
                engine=self.engine,
                model=self.model,
                roles=self.roles,
                slurm=self.slurm,
                progress=self.progress,
                hook=self.hook,
                rundir=rundir,
                etcd=etcd,
                ports=lease.roles,
                probe=self.probe,
                allocation=self.allocation,
            )
            return serve(ctx, Monitor(ctx))
        finally:
            port_leases.release(self.config.shared_dir, rundir.run_id)

    def dry_run(self) -> Path:
        """Preflight (unless offline), then every job script and the resolved recipe in a run directory under
        <runs>/dry-run; nothing is submitted. A dry run is a review: what the preflight refuses is listed in
        dry-run.json (``problems``) and the scripts are written all the same. Returns the directory."""
        problems: list[str] = []
        if self.options.offline:
            self.progress.line("OFFLINE REVIEW: preflight not run; nothing was checked against the cluster")
            preflight_state = "not run (--offline): an offline review, nothing checked against the cluster"
        else:
            try:
                self.preflight(problems)
            except PreflightError as exc:  # the first check that refused; the ones after it did not run
                problems.append(str(exc))
            preflight_state = "failed" if problems else "passed"
        return write_dry_run(
            self.config,
            self.options,
            self.engine,
            self.model,
            self.roles,
            slurm=self.slurm,
            progress=self.progress,
            preflight_state=preflight_state,
            problems=problems,
        )


def serve(ctx: RunContext, monitor: Monitor) -> Outcome:
    """SERVING in order until one fails; then, always, stop and record."""
    with _interrupts_as_keyboard():
        try:
            try:
                for stage in PROBE if ctx.probe is not None else SERVING:
                    stage(ctx, monitor)
            except RUN_FAILURES as exc:
                monitor.fail(str(exc))
                # What the running workers counted is what explains a failure (e.g. failed KV transfers).
                scrape_metrics(ctx, monitor)
            except KeyboardInterrupt:
                monitor.fail("interrupted (Ctrl-C or SIGTERM): jobs stopped")
            finally:
                stop(ctx, monitor)
        except KeyboardInterrupt:
            monitor.fail("interrupted again during shutdown: jobs were cancelled")
            cancel_hard(ctx, monitor)
        finally:
            # However slow the controller, the launcher exits: each step of the shutdown has a deadline, and
            # what it could not confirm by then is said last (run/stages/stop.py).
            closing = f"closing the run's etcd ({CLOSE_SLURM_S:.0f} s)"
            with ctx.slurm.deadline(time.monotonic() + CLOSE_SLURM_S, closing):
                close_session(ctx.etcd, monitor.fail)
            if monitor.unconfirmed:
                monitor.fail("the stop could not confirm: " + "; ".join(monitor.unconfirmed))
            reading = f"the record's {RECORD_SLURM_S:.0f} s to read the jobs' final states"
            with ctx.slurm.deadline(time.monotonic() + RECORD_SLURM_S, reading):
                outcome = record(ctx, monitor)
            _say_unconfirmed(ctx, monitor)
    return outcome


# The Slurm commands of the shutdown after the stop: the run-owned etcd's job stopped, the final job states read.
CLOSE_SLURM_S = 60.0
RECORD_SLURM_S = 30.0


def _say_unconfirmed(ctx: RunContext, monitor: Monitor) -> None:
    """Name, last, what the shutdown could not confirm: a job not seen ended, a final state not read."""
    unread = [
        f"the final state of {monitor.job_label(role)} ({role}): Slurm did not answer in {RECORD_SLURM_S:.0f} s"
        for role, job in monitor.jobs.items()
        if job.job_id is not None and job.state is None
    ]
    for what in [*monitor.unconfirmed, *unread]:
        ctx.progress.line(f"NOT CONFIRMED: {what}")


@contextmanager
def _interrupts_as_keyboard() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while a run is active, so both stop the jobs cleanly."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(
    options: LaunchOptions,
    config: ClusterConfig | None = None,
    *,
    config_path: Path | None = None,
    progress: Progress | None = None,
    hook: Hook | None = None,
) -> Outcome:
    """One call for tools (``nox -s demo``, the invoke tasks): resolve the cluster config, run, return the
    outcome."""
    cfg = config or resolve_cluster_config(config_path)
    return Launch(cfg, options, progress=progress, hook=hook).run()


def dry_run(
    options: LaunchOptions,
    config: ClusterConfig | None = None,
    *,
    config_path: Path | None = None,
    progress: Progress | None = None,
    slurm: Slurm | None = None,
) -> Path:
    """Preflight (unless ``options.offline``) and write every script without submitting; the run directory's
    path. Offline, a config file that cannot be resolved against this machine is read as is."""
    if config is None and config_path is not None and options.offline:
        cfg = load_cluster_config(config_path)
    else:
        cfg = config or resolve_cluster_config(config_path)
    return Launch(cfg, options, progress=progress, slurm=slurm).dry_run()
