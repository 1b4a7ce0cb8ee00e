"""Aggregated and disaggregated runs, as a sequence of stages over one context:

  preflight  partition, nodes, model path, etcd, nodes.check: nothing is submitted if one fails
  etcd       the configured etcd, or one the run starts in a job of its own; the role watch and the
             launcher's presence key
  submit     one sbatch job per role, each pinned to its node with --nodelist
  watch      until every role registered in etcd (its processes healthy) and the frontend lists the instances
  smoke      probe until one response is verified (P/D: different prefill and decode workers), then the smoke
             requests, each checked, then the metrics
  stop       SIGTERM to each job script (it stops its processes and exits 0), wait for Slurm to settle
  record     job states and placement from Slurm, run.json

:class:`Launch` runs preflight and builds the :class:`RunContext` once; :class:`Stages` runs the rest over it.
While anything waits, the jobs and the etcd registrations are watched: the first role to fail fails the run,
the other jobs are stopped, and every log is kept. Ctrl-C (or SIGTERM) stops the jobs the same way.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import shutil
import signal
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_core.lock import find_lock_path, load_lock
from atomdyn_launchers import answers, orphans, tinymodel
from atomdyn_launchers import benchmark as serving_benchmark
from atomdyn_launchers import ports as port_leases
from atomdyn_launchers.config.cluster import (
    ClusterConfig,
    PreflightError,
    find_repo_root,
    resolve_cluster_config,
)
from atomdyn_launchers.config.etcd import etcd_access, worker_etcd_env
from atomdyn_launchers.config.recipes import Recipe, resource_problems
from atomdyn_launchers.contract import direct_http
from atomdyn_launchers.contract.kinds import DISAGG_KINDS, KINDS
from atomdyn_launchers.contract.leases import ETCD_LOST_S, LEASE_TTL_S, call_timeout_for
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.contract.readiness import ReadinessError, Registration, frontend_instances, http_json
from atomdyn_launchers.contract.rundir import JobRecord, RunDir, format_exit_code, read_jsonl
from atomdyn_launchers.engines import Engine, EngineError, get_engine
from atomdyn_launchers.engines.base import RoleContext, RolePlan
from atomdyn_launchers.engines.runtime import DockerRuntime, RdmaMounts, Runtime, VenvRuntime
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import launcher_key, run_prefix
from atomdyn_launchers.job.owned_etcd import OwnedEtcdError
from atomdyn_launchers.nodes import jobs
from atomdyn_launchers.nodes.check import CheckReport, check_nodes
from atomdyn_launchers.nodes.etcd_owned import OwnedEtcd, owned_etcd_node
from atomdyn_launchers.nodes.jobs import NodeJobError, docker_host
from atomdyn_launchers.nodes.prepare import shim_current
from atomdyn_launchers.profiles.models import ModelProfile, get_model
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.preflight import preflight
from atomdyn_launchers.run.watch import Presence, RoleEvent, RoleWatcher
from atomdyn_launchers.sbatch import Arg, JobSpec, Shell, failure_file, pid_var, render
from atomdyn_launchers.slurm.client import JobInfo, JobPoller, Slurm, SlurmError
from atomdyn_launchers.smoke import (
    ABORTED,
    SmokeClient,
    SmokeRequest,
    SmokeResult,
    build_requests,
    run_smoke,
)

DEFAULT_REQUESTS = {"agg-single": 8, "agg-two": 32, "disagg": 32}
_POLL_S = 0.2  # how often job states are read while waiting on etcd events
_SIGNAL_RETRY_S = 30.0  # how long a refused SIGTERM is retried before the job is cancelled hard
_SIGNAL_RETRY_INTERVAL_S = 1.0


def model_path(config: ClusterConfig, model: ModelProfile) -> Path:
    """MODEL_PATH, or for a model the project builds itself, its directory under SHARED_DIR/models."""
    return config.shared_dir / "models" / model.name if model.build_digest else config.model_path


class LaunchFailure(RuntimeError):
    """The run failed; the message says which role or step and why."""


@dataclass(frozen=True)
class LaunchOptions:
    kind: str
    engine: str | None = None  # default: the config's ENGINE_PROFILE
    model: str | None = None  # default: the engine's default model profile
    requests: int | None = None  # default: DEFAULT_REQUESTS[kind]
    concurrency: int = 8
    max_tokens: int = 32
    prompt_groups: int = 4
    ready_timeout_s: float | None = None  # default: the engine's timeouts.ready_s
    settle_timeout_s: float | None = None  # default: the engine's timeouts.settle_s
    request_timeout_s: float = 120.0
    time_limit: str | None = None  # default: the engine's timeouts.time_limit (Slurm's --time)
    speedup_ratio: float = 10.0
    runs_root: Path | None = None  # default: <SHARED_DIR>/runs
    lock_path: Path | None = None
    node_check: bool = True  # nodes.check on the run's nodes before submitting (--skip-node-check)
    # xPyD: workers per role of a disaggregated run, each its own job on its own node.
    prefill_workers: int = 1
    decode_workers: int = 1
    nodes: tuple[str, ...] = ()  # placement order (prefill, then decode); default: from the config
    router_mode: str = "kv"  # the frontend's --router-mode
    kv_transfer_bandwidth_gbps: float | None = None  # the mock engine's KV transfer model
    kv_bytes_per_token: int | None = None
    recipe: Recipe | None = None  # the recipe these options came from (recorded in recipe.json)
    offline: bool = False  # dry run only: skip the preflight (an offline review; nothing checked)

    def resolved_requests(self) -> int:
        return self.requests if self.requests is not None else DEFAULT_REQUESTS[self.kind]


@dataclass(frozen=True)
class RoleSpec:
    role: str
    node: str
    mode: str
    with_frontend: bool
    index: int


@dataclass
class Outcome:
    run_id: str
    run_dir: Path
    passed: bool
    failure: str | None
    timeline: list[dict[str, object]] = field(default_factory=list)
    results: list[SmokeResult] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


# Callbacks for tests and tools: called with (event name, details) at each timeline event.
Hook = Callable[[str, dict[str, object]], None]


def plan_roles(
    kind: str,
    config: ClusterConfig,
    prefill_workers: int = 1,
    decode_workers: int = 1,
    nodes: tuple[str, ...] = (),
) -> list[RoleSpec]:
    """One role per job, each pinned to its own node. ``nodes`` (a recipe's layout.nodes) gives the placement
    order; without it one prefill and one decode go to PREFILL_NODE and DECODE_NODE, more to NODE_ADDRS's
    nodes in order (prefill workers first). The first decode (or agg) worker also runs the frontend."""
    if kind == "agg-single":
        return [RoleSpec("agg", nodes[0] if nodes else config.primary_node, "agg", True, 0)]
    if kind == "agg-two":
        if nodes:
            if len(nodes) < 2:
                raise PreflightError("agg-two needs two nodes; the recipe's layout.nodes lists one")
            first, other = nodes[0], nodes[1]
        else:
            first = config.primary_node
            other = config.decode_node if config.decode_node != config.primary_node else config.prefill_node
        if other == first:
            raise PreflightError(
                "agg-two needs two nodes: PREFILL_NODE or DECODE_NODE must differ from PRIMARY_NODE"
            )
        return [RoleSpec("agg1", first, "agg", True, 0), RoleSpec("agg2", other, "agg", False, 1)]
    if kind != "disagg":
        raise PreflightError(f"unknown run kind {kind!r}; known: {', '.join(KINDS)}")
    if prefill_workers < 1 or decode_workers < 1:
        raise PreflightError("a disaggregated run needs at least one prefill and one decode worker")
    need = prefill_workers + decode_workers
    if nodes:
        pool, source = list(nodes), "the recipe's layout.nodes lists"
    elif need == 2:
        pool, source = [config.prefill_node, config.decode_node], "PREFILL_NODE and DECODE_NODE name"
        if config.prefill_node == config.decode_node:
            raise PreflightError("disagg needs two nodes: PREFILL_NODE and DECODE_NODE are the same")
    else:
        pool, source = [n for n, _ in config.node_addrs], "NODE_ADDRS names"
    if len(set(pool)) < need:
        raise PreflightError(
            f"{prefill_workers}P{decode_workers}D needs {need} nodes (one per worker); {source} "
            f"{len(set(pool))}: list the nodes in the recipe's layout.nodes or NODE_ADDRS"
        )
    pool = list(dict.fromkeys(pool))

    def name(mode: str, i: int, count: int) -> str:
        return mode if count == 1 else f"{mode}{i + 1}"

    roles = [
        RoleSpec(name("prefill", i, prefill_workers), pool[i], "prefill", False, 1 + i)
        for i in range(prefill_workers)
    ]
    roles += [
        RoleSpec(
            name("decode", j, decode_workers),
            pool[prefill_workers + j],
            "decode",
            j == 0,
            0 if j == 0 else prefill_workers + j,
        )
        for j in range(decode_workers)
    ]
    return roles


def required_instances(kind: str, prefill_workers: int = 1, decode_workers: int = 1) -> dict[str, int]:
    """Generate instances per Dynamo component the frontend must list before traffic starts."""
    if kind == "disagg":
        return {"prefill": prefill_workers, "backend": decode_workers}
    return {"agg-single": {"backend": 1}, "agg-two": {"backend": 2}}[kind]


def _lock_digest(path: Path | None, project_dir: Path) -> str | None:
    """The digest of the lock this run used: ``path``, else $ATOMDYN_LOCK, else the project's lock."""
    try:
        return load_lock(path or find_lock_path(project_dir)).digest
    except (OSError, ValueError, LookupError):  # no readable lock: the run records None
        return None


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


@dataclass
class RunState:
    """What the stages learn while the run goes on; every field exists from the start."""

    jobs: dict[str, JobRecord] = field(default_factory=dict)
    job_states: dict[str, str] = field(default_factory=dict)
    registrations: dict[str, Registration] = field(default_factory=dict)
    plans: dict[str, RolePlan] = field(default_factory=dict)
    results: list[SmokeResult] = field(default_factory=list)
    failure: str | None = None
    stopping: bool = False
    hard_cancelled: dict[str, str] = field(default_factory=dict)  # role -> why its SIGTERM was not delivered
    done_count: int = 0
    last_poll: float = 0.0
    base_url: str = ""
    deadline: float = 0.0


@dataclass(frozen=True)
class EtcdSession:
    """The etcd a run uses: its endpoint, the run's own etcd job if it started one, the role watch."""

    endpoint: str
    owned: OwnedEtcd | None
    client: EtcdClient
    prefix: str
    events: queue.Queue[RoleEvent]
    watcher: RoleWatcher
    presence: Presence


@dataclass(frozen=True)
class RunContext:
    """Everything the stages share, built once after preflight; the mutable part is ``state``."""

    config: ClusterConfig
    options: LaunchOptions
    engine: Engine
    model: ModelProfile
    roles: list[RoleSpec]
    slurm: Slurm
    progress: Progress
    hook: Hook | None
    rundir: RunDir
    etcd: EtcdSession
    # The run's leased ports per role (ports.allocate); empty: the fixed defaults (Ports.for_role).
    ports: Mapping[str, Ports] = field(default_factory=dict)
    state: RunState = field(default_factory=RunState)

    @property
    def ready_timeout_s(self) -> float:
        if self.options.ready_timeout_s is not None:
            return self.options.ready_timeout_s
        return self.engine.timeouts.ready_s

    @property
    def settle_timeout_s(self) -> float:
        if self.options.settle_timeout_s is not None:
            return self.options.settle_timeout_s
        return self.engine.timeouts.settle_s

    def submission(self) -> Submission:
        return Submission(
            self.config,
            self.options,
            self.engine,
            self.model,
            self.rundir,
            self.etcd.endpoint,
            self.ready_timeout_s,
            self.ports,
        )


class Launch:
    """One run: preflight, then the context, then :class:`Stages`."""

    def __init__(
        self,
        config: ClusterConfig,
        options: LaunchOptions,
        *,
        progress: Progress | None = None,
        slurm: Slurm | None = None,
        hook: Hook | None = None,
    ) -> None:
        self.config = config
        self.options = options
        self.engine: Engine = get_engine(options.engine or config.engine_profile)
        self.progress = progress or Progress()
        self.slurm = slurm or Slurm(config)
        self.hook = hook
        self.model: ModelProfile = get_model(options.model or self.engine.default_model)
        self.roles = plan_roles(
            options.kind, config, options.prefill_workers, options.decode_workers, options.nodes
        )

    def preflight(self) -> CheckReport | None:
        """Refuse what cannot run before anything is created or submitted; the node report, if checked."""
        if self.options.kind not in KINDS:
            raise PreflightError(f"unknown run kind {self.options.kind!r}")
        if self.options.concurrency < 1 or self.options.resolved_requests() < 1:
            raise PreflightError("requests and concurrency must be at least 1")
        if self.config.kv_cross_layer_blocks == "yes" and not self.engine.cross_layer_blocks:
            why = self.engine.cross_layer_blocks_why
            raise PreflightError(f"KV_CROSS_LAYER_BLOCKS=yes: engine {self.engine.name} cannot ({why})")
        if self.options.recipe is not None:
            problems = resource_problems(
                self.options.recipe, self.engine.needs_gpus(), self.model.gpus_per_worker
            )
            if problems:
                raise PreflightError(f"recipe {self.options.recipe.source}: " + "; ".join(problems))
        python = self.config.python_venv / "bin" / "python"
        if self.config.runtime == "venv" and not python.exists():
            raise PreflightError(
                f"PYTHON_VENV {self.config.python_venv} has no bin/python (jobs run with it)"
            )
        if self.config.runtime == "venv":
            module = self.engine.dynamo_module
            venv = self.engine.venv(self.config.python_venv, self.config.project_dir)
            if not any(venv.glob(f"lib/python3*/site-packages/dynamo/{module}/__main__.py")):
                raise PreflightError(
                    f"{venv} has no dynamo.{module} (install ai-dynamo==1.3.0.post1 there; jobs run with "
                    f"that venv{'; scripts/bootstrap.sh makes it' if venv != self.config.python_venv else ''})"
                )
        if self.model.build_digest is not None:
            try:  # built on the shared filesystem before anything is submitted; its digest checked
                tinymodel.build(model_path(self.config, self.model), self.model.build_digest)
            except (tinymodel.TinyModelError, OSError, RuntimeError) as exc:
                raise PreflightError(f"model {self.model.name}: {exc}") from None
        if self.config.runtime == "docker":
            try:
                images = self.engine.images(
                    self.options.kind, self.config.dynamo_atom_image, self.config.nixl_image
                )
            except EngineError as exc:
                raise PreflightError(str(exc)) from None
            if not images:
                raise PreflightError("RUNTIME=docker needs DYNAMO_ATOM_IMAGE")
        problems = self.engine.launch_problems(
            self.options.kind, [r.node for r in self.roles], self.config.ucx_net_devices_for
        )
        if problems:
            raise PreflightError("; ".join(problems))
        if self.engine.needs_gpus() and self.model.gpus_per_worker > self.config.gpus_per_node:
            raise PreflightError(
                f"model profile {self.model.name} needs {self.model.gpus_per_worker} GPUs per worker; "
                f"GPUS_PER_NODE is {self.config.gpus_per_node}"
            )
        nodes = list(dict.fromkeys(r.node for r in self.roles))
        preflight(self.config, nodes, slurm=self.slurm, need_etcd=self.config.etcd_endpoint is not None)
        if self.config.etcd_endpoint is not None:
            EtcdClient(etcd_access(self.config)).version()
        if not self.options.node_check:
            return None
        try:
            with self.progress.heartbeat(f"nodes.check on {', '.join(nodes)}"):
                report = check_nodes(
                    self.config, nodes, engine=self.engine.name, kind=self.options.kind, slurm=self.slurm
                )
        except NodeJobError as exc:
            raise PreflightError(f"node check could not run: {exc}") from exc
        report.require_ok()
        return report

    def run(self) -> Outcome:
        """Run once. Preflight errors raise PreflightError before anything is created or submitted."""
        self.clean_orphans()
        report = self.preflight()
        runs_root = self.options.runs_root or self.config.runs_dir
        rundir = RunDir.create(runs_root, self.options.kind, self.engine.name)
        self.progress.line(f"run {rundir.run_id} -> {rundir.path}")
        write_resolved_recipe(rundir.path, self.options, self.engine, self.model, self.roles)
        if report is not None:  # the node check, kept as evidence
            atomic_write_text(rundir.path / "node-check.json", json.dumps(report.to_json(), indent=2) + "\n")
        lease = port_leases.allocate(
            self.config.shared_dir, rundir.run_id, rundir.path, [(r.role, r.index) for r in self.roles]
        )
        self.progress.line(
            f"ports {lease.block_start}-{lease.block_start + port_leases.BLOCK - 1} (ports.json)"
        )
        try:
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
                etcd=self._etcd(rundir),
                ports=lease.roles,
            )
        except BaseException:
            port_leases.release(self.config.shared_dir, rundir.run_id)
            raise
        try:
            return Stages(ctx).run()
        finally:
            port_leases.release(self.config.shared_dir, rundir.run_id)

    def dry_run(self) -> Path:
        """Preflight (unless offline), then every job script and the resolved recipe in a run directory under
        <runs>/dry-run; nothing is submitted. Returns the directory."""
        if self.options.offline:
            self.progress.line("OFFLINE REVIEW: preflight not run; nothing was checked against the cluster")
            preflight_state = "not run (--offline): an offline review, nothing checked against the cluster"
        else:
            self.preflight()
            preflight_state = "passed"
        runs_root = (self.options.runs_root or self.config.runs_dir) / "dry-run"
        if self.options.offline and self.options.runs_root is None and not self.config.shared_dir.is_dir():
            # The cluster's shared filesystem is not mounted here: the review goes into this checkout.
            runs_root = find_repo_root() / ".atomdyn" / "dry-run"
            self.progress.line(f"SHARED_DIR {self.config.shared_dir} is not here: writing under {runs_root}")
        rundir = RunDir.create(runs_root, self.options.kind, self.engine.name)
        owned = self.config.etcd_endpoint is None
        endpoint = "http://run-owned-etcd.invalid:2379" if owned else self.config.require_etcd()
        submission = Submission(
            self.config, self.options, self.engine, self.model, rundir, endpoint, self._ready_timeout_s()
        )
        runtime = submission.runtime()
        roles: list[dict[str, object]] = []
        for spec in self.roles:
            _, job = submission.role(spec, runtime)
            script = rundir.write_script(spec.role, render(job))
            sbatch = self.slurm.sbatch_args(
                job_name=job.job_name,
                nodelist=spec.node,
                gres=f"gpu:{job.gpus}" if job.gpus else None,
                output=rundir.slurm_out(spec.role),
                chdir=rundir.path,
            )
            roles.append(
                {"role": spec.role, "mode": spec.mode, "node": spec.node, "frontend": spec.with_frontend,
                 "script": str(script.relative_to(rundir.path)), "sbatch": [*sbatch, str(script)]}
            )  # fmt: skip
            self.progress.line(f"dry run: {spec.role} ({spec.mode}) on {spec.node} -> {script}")
        write_resolved_recipe(rundir.path, self.options, self.engine, self.model, self.roles)
        plan = {
            "dry_run": True,
            "submitted": [],
            "preflight": preflight_state,
            "etcd": "run-owned: started in a job of its own at submit (endpoint known then)"
            if owned
            else endpoint,
            "roles": roles,
            "frontend_must_list": required_instances(
                self.options.kind, self.options.prefill_workers, self.options.decode_workers
            ),
        }
        atomic_write_text(rundir.path / "dry-run.json", json.dumps(plan, indent=2) + "\n")
        self.progress.line(f"dry run: nothing submitted; scripts and recipe.json in {rundir.path}")
        return rundir.path

    def _ready_timeout_s(self) -> float:
        if self.options.ready_timeout_s is not None:
            return self.options.ready_timeout_s
        return self.engine.timeouts.ready_s

    def clean_orphans(self) -> None:
        """Stop what runs whose launcher died left behind (their jobs, etcd keys and port leases)."""
        try:
            found = orphans.find(self.config.shared_dir, self.slurm)
        except (port_leases.PortError, SlurmError) as exc:
            raise PreflightError(f"looking for orphaned runs: {exc}") from exc
        if not found:
            return
        etcd: EtcdClient | None = None
        if self.config.etcd_endpoint is not None:
            etcd = EtcdClient(etcd_access(self.config))
        for line in orphans.clean(self.config.shared_dir, self.slurm, found, etcd):
            self.progress.line(line)

    def _etcd(self, rundir: RunDir) -> EtcdSession:
        """The etcd stage: ETCD_ENDPOINT, else etcd at the lock's version in a job of its own."""
        owned: OwnedEtcd | None = None
        if self.config.etcd_endpoint is None:
            node = owned_etcd_node(self.config, self.options.kind)
            try:
                owned = OwnedEtcd.start(
                    self.config, rundir.path, node, slurm=self.slurm, lock_path=self.options.lock_path
                )
            except (OwnedEtcdError, SlurmError) as exc:
                raise PreflightError(f"run-owned etcd: {exc}") from exc
            self.progress.line(f"run-owned etcd at {owned.endpoint} (job {owned.job_id} on {node})")
        endpoint = owned.endpoint if owned is not None else self.config.require_etcd()
        client = EtcdClient(etcd_access(self.config, owned.endpoint if owned is not None else None))
        prefix = run_prefix(rundir.run_id)
        events: queue.Queue[RoleEvent] = queue.Queue()
        return EtcdSession(
            endpoint=endpoint,
            owned=owned,
            client=client,
            prefix=prefix,
            events=events,
            watcher=RoleWatcher(client, prefix, events),
            presence=Presence(
                EtcdClient(
                    client.access,
                    call_timeout_for(self.engine.timeouts.etcd_grace_s, client.timeout_s),
                ),
                launcher_key(rundir.run_id),
                ttl_s=self.engine.timeouts.lease_s,
                lost_after_s=self.engine.timeouts.etcd_grace_s,
            ),
        )


class Stages:
    """submit -> watch -> smoke -> stop -> record over one :class:`RunContext`."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.poller = JobPoller(ctx.slurm)  # squeue while queued, at a rate that backs off

    def run(self) -> Outcome:
        ctx = self.ctx
        with _interrupts_as_keyboard():
            try:
                try:
                    ctx.etcd.watcher.start()
                    ctx.etcd.presence.start()
                    self.submit()
                    self.watch()
                    self.smoke()
                    self.benchmark()
                except (LaunchFailure, ReadinessError, SlurmError, PreflightError) as exc:
                    self._fail(str(exc))
                    # What the running workers counted is what explains a failure (e.g. failed KV transfers).
                    self._scrape_metrics()
                except KeyboardInterrupt:
                    self._fail("interrupted (Ctrl-C or SIGTERM): jobs stopped")
                finally:
                    self.stop()
            except KeyboardInterrupt:
                self._fail("interrupted again during shutdown: jobs were cancelled")
                self._cancel_hard()
            finally:
                ctx.etcd.watcher.stop()
                ctx.etcd.presence.stop()  # after the jobs settled: its expiry is what stops orphaned jobs
                self._stop_owned_etcd()
                outcome = self.record()
        return outcome

    # -- small helpers -----------------------------------------------------------------------------------

    def _event(
        self, event: str, *, role: str | None = None, job_id: int | None = None, detail: str | None = None
    ) -> None:
        record = self.ctx.rundir.event(event, role=role, job_id=job_id, detail=detail)
        if self.ctx.hook is not None:
            self.ctx.hook(event, {**record, "run": self.ctx})

    def _show(self) -> None:
        total = self.ctx.options.resolved_requests()
        state = self.state
        done = state.done_count if state.results or state.done_count else None
        modes = {r.role: r.mode for r in self.ctx.roles}
        self.ctx.progress.status(dict(state.job_states), set(state.registrations), done, total, modes)

    def _fail(self, message: str) -> None:
        if self.state.failure is None:
            self.state.failure = message
            self.ctx.progress.line(f"FAILED: {message}")
            self._event("failed", detail=message)

    def _stop_owned_etcd(self) -> None:
        owned = self.ctx.etcd.owned
        if owned is None:
            return
        try:
            owned.stop()
        except (OwnedEtcdError, SlurmError, TimeoutError) as exc:
            self._fail(f"run-owned etcd did not stop: {exc}")

    # -- submit ------------------------------------------------------------------------------------------

    def submit(self) -> None:
        ctx = self.ctx
        submission = ctx.submission()
        runtime = submission.runtime()
        for spec in ctx.roles:
            plan, job = submission.role(spec, runtime)
            self.state.plans[spec.role] = plan
            script = ctx.rundir.write_script(spec.role, render(job))
            self.state.jobs[spec.role] = JobRecord(spec.role, None, spec.node)
            job_id = ctx.slurm.submit(
                script,
                job_name=job.job_name,
                nodelist=spec.node,
                gres=f"gpu:{job.gpus}" if job.gpus else None,
                output=ctx.rundir.slurm_out(spec.role),
                chdir=ctx.rundir.path,
                env={"DOCKER_HOST": docker_host(ctx.config, spec.node)} if ctx.config.docker_host else None,
            )
            self.state.jobs[spec.role].job_id = job_id
            self.state.job_states[spec.role] = "SUBMITTED"
            self._event("submitted", role=spec.role, job_id=job_id, detail=f"node {spec.node}")
            ctx.progress.line(f"submitted {spec.role} as job {job_id} on {spec.node}")

    # -- watch -------------------------------------------------------------------------------------------

    def _poll(self, timeout_s: float = _POLL_S) -> None:
        """Wait up to ``timeout_s`` for an etcd event, then read job states; raise on the first failure."""
        events = self.ctx.etcd.events
        try:
            event: RoleEvent | None = events.get(timeout=timeout_s)
        except queue.Empty:
            event = None
        while event is not None:
            self._on_role_event(event)
            try:
                event = events.get_nowait()
            except queue.Empty:
                event = None
        if time.monotonic() - self.state.last_poll >= _POLL_S:
            self.state.last_poll = time.monotonic()
            lost = None if self.state.stopping else self.ctx.etcd.presence.lost()
            if lost is not None:
                raise LaunchFailure(lost)
            self._check_jobs()
        self._show()

    def _role_failure(self, role: str) -> str:
        """What the role's job script recorded as the reason it failed ("" when it recorded none)."""
        path = Path(failure_file(str(self.ctx.rundir.path / "logs"), role))
        try:
            text = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""
        return f": {text}" if text else ""

    def _on_role_event(self, event: RoleEvent) -> None:
        if event.kind == "watch-error":
            raise LaunchFailure(f"lost the etcd watch: {event.detail}")
        if event.kind == "registered" and event.registration is not None:
            reg = event.registration
            self.state.registrations[event.role] = reg
            job = self.state.jobs.get(event.role)
            self._event(
                "registered",
                role=event.role,
                job_id=job.job_id if job else None,
                detail=f"node {reg.node} host {reg.host} ports {dict(reg.ports)}",
            )
        elif event.kind == "deregistered" and not self.state.stopping:
            reason = self._role_failure(event.role) or " (its processes stopped)"
            raise LaunchFailure(
                f"role {event.role} left etcd{reason} "
                f"(see logs/{event.role}.slurm.out and logs/{event.role}.*.log)"
            )

    def _check_jobs(self) -> None:
        infos = self.poller.poll(self._active_jobs().values())
        for role, record in self.state.jobs.items():
            if record.job_id is None:
                continue
            info = infos[record.job_id]
            previous = self.state.job_states.get(role, "").split(" ")[0]
            waiting = info.state == "PENDING" and info.reason not in (None, "None", "Priority")
            self.state.job_states[role] = f"{info.state} ({info.reason})" if waiting else info.state
            if info.state != previous and info.state in ("PENDING", "RUNNING"):
                detail = f"reason {info.reason}" if info.state == "PENDING" and info.reason else info.nodes
                self._event(info.state.lower(), role=role, job_id=record.job_id, detail=detail)
            if info.terminal and not self.state.stopping:
                raise LaunchFailure(
                    f"job {record.job_id} ({role}) ended early: {info.state}, "
                    f"exit {format_exit_code(info.exit_code)}{self._role_failure(role)} (see logs/{role}.slurm.out)"
                )

    def _wait_until(self, what: str, done: Callable[[], str | None]) -> None:
        while True:
            missing = done()
            if missing is None:
                return
            if time.monotonic() >= self.state.deadline:
                raise LaunchFailure(
                    f"timed out after {self.ctx.ready_timeout_s:.0f} s waiting for {what}: {missing}"
                )
            self._poll()

    def watch(self) -> None:
        ctx, state = self.ctx, self.state
        state.deadline = time.monotonic() + ctx.ready_timeout_s

        def roles_missing() -> str | None:
            missing = [r.role for r in ctx.roles if r.role not in state.registrations]
            if not missing:
                return None
            states = ", ".join(f"{r}: {state.job_states.get(r, '?')}" for r in missing)
            return f"roles not registered in etcd: {states}"

        self._wait_until("every role to register", roles_missing)
        frontend_role = next(r for r in ctx.roles if r.with_frontend)
        reg = state.registrations[frontend_role.role]
        state.base_url = f"http://{reg.host}:{reg.ports['frontend']}"
        wanted = required_instances(ctx.options.kind, ctx.options.prefill_workers, ctx.options.decode_workers)

        def instances_missing() -> str | None:
            try:
                _, body = http_json(f"{state.base_url}/health")
            except OSError as exc:
                return f"frontend {state.base_url}/health not answering ({exc})"
            have = frontend_instances(body)
            short = {c: n for c, n in wanted.items() if have.get(c, 0) < n}
            return None if not short else f"frontend lists {have or 'no'} generate instances, needs {wanted}"

        self._wait_until("the frontend to list every worker", instances_missing)
        self._event("healthy", role=frontend_role.role, detail=f"{state.base_url} lists {wanted}")
        ctx.progress.line(f"healthy: {state.base_url}")

    # -- smoke -------------------------------------------------------------------------------------------

    def _client(self) -> SmokeClient:
        served = next(iter(self.state.plans.values())).served_model_name
        return SmokeClient(self.state.base_url, served, timeout_s=self.ctx.options.request_timeout_s)

    def smoke(self) -> None:
        self._first_good()
        self._fixed_answer()
        self._requests()
        self._scrape_metrics()

    def _fixed_answer(self) -> None:
        """For engines whose P/D answers are checked against aggregated ones: ask the fixed prompt once; an
        aggregated run records the reference, a P/D run takes the reference it finds (answers.py)."""
        ctx = self.ctx
        if not ctx.engine.expectations.aggregated_answer:
            return
        key, reference = answer_reference(ctx.config, ctx.engine, ctx.model, ctx.options.lock_path)
        served = next(iter(self.state.plans.values())).served_model_name
        try:
            tokens, text = answers.ask(self.state.base_url, served, ctx.options.request_timeout_s)
        except answers.AnswerError as exc:
            raise LaunchFailure(str(exc)) from None
        answer = answers.Answer(ctx.rundir.run_id, key, answers.FIXED_PROMPT, tokens, text)
        out = ctx.rundir.path / answers.ANSWERS_DIR
        answers.write(out / answers.ANSWER_FILE, answer)
        if ctx.options.kind not in DISAGG_KINDS:
            answers.write(reference, answer)
            ctx.progress.line(
                f"fixed prompt answered ({len(tokens)} tokens): the reference for P/D runs ({key})"
            )
        elif reference.is_file():
            shutil.copyfile(reference, out / answers.REFERENCE_FILE)
            ctx.progress.line(
                f"fixed prompt answered ({len(tokens)} tokens); aggregated reference {key} taken"
            )
        else:
            ctx.progress.line(
                f"fixed prompt answered; no aggregated reference for {key} yet "
                f"(an aggregated run of engine {ctx.engine.name} records it)"
            )

    def _first_good(self) -> None:
        client = self._client()
        probe = SmokeRequest(index=-1, prompt_group=-1, prompt="Readiness probe: say hello.", max_tokens=8)
        attempts = 0
        last: SmokeResult | None = None

        def verified() -> str | None:
            nonlocal attempts, last
            attempts += 1
            last = client.send(probe, self.ctx.options.kind == "disagg")
            return None if last.ok else f"last probe: {last.error}"

        self._wait_until("a verified response", verified)
        assert last is not None
        detail = f"after {attempts} probe(s): prefill {last.prefill_worker_id} decode {last.decode_worker_id}"
        self._event("first_good_response", detail=detail)
        self.ctx.progress.line(f"first verified response {detail}")
        self._scrape_metrics(at_ready=True)

    def _requests(self) -> None:
        options, state = self.ctx.options, self.state
        total = options.resolved_requests()
        requests = build_requests(total, options.prompt_groups, max_tokens=options.max_tokens)
        client = self._client()
        stop = threading.Event()
        lock = threading.Lock()

        def on_result(result: SmokeResult) -> None:
            if result.error == ABORTED:
                return  # never sent: not a smoke request of this run
            with lock:
                state.results.append(result)
                state.done_count += 1
            self.ctx.rundir.request(result.record())

        worker = threading.Thread(
            target=lambda: run_smoke(
                client,
                requests,
                concurrency=options.concurrency,
                require_pd=options.kind == "disagg",
                on_result=on_result,
                stop=stop,
            ),
            name="smoke",
            daemon=True,
        )
        state.done_count = 0
        worker.start()
        try:
            while worker.is_alive():
                self._poll()
                worker.join(timeout=0)
        except BaseException:
            stop.set()
            # Requests in flight end quickly once the jobs stop; do not let one hold up the shutdown.
            worker.join(timeout=5)
            raise
        bad = [r for r in state.results if not r.ok]
        ok = total - len(bad)
        self._event("requests_done", detail=f"{ok}/{total} ok")
        self.ctx.progress.line(f"requests done: {ok}/{total} ok")
        if bad:
            first = sorted(bad, key=lambda r: r.index)[0]
            raise LaunchFailure(
                f"{len(bad)} of {total} smoke requests failed; first: #{first.index}: {first.error}"
            )

    # -- benchmark ---------------------------------------------------------------------------------------

    def benchmark(self) -> None:
        """The recipe's serving benchmark (aiperf sweep) against the frontend, after the smoke traffic."""
        ctx = self.ctx
        recipe = ctx.options.recipe
        if recipe is None or recipe.benchmark is None:
            return
        out = ctx.rundir.path / "benchmark"
        try:
            result = serving_benchmark.run_sweep(
                recipe.benchmark,
                base_url=self.state.base_url,
                model=next(iter(self.state.plans.values())).served_model_name,
                tokenizer=str(model_path(ctx.config, ctx.model)),
                out_dir=out,
                project_dir=ctx.config.project_dir,
                workers=len(ctx.roles),
                gpus=sum(plan.gpus for plan in self.state.plans.values()),
                progress=ctx.progress,
            )
        except serving_benchmark.BenchmarkError as exc:
            raise LaunchFailure(f"benchmark: {exc}") from None
        atomic_write_text(out / "benchmark.json", json.dumps(result.to_json(), indent=2) + "\n")
        ctx.progress.line(f"benchmark: {result.verdict}")
        if not result.passed:
            raise LaunchFailure(f"benchmark {result.verdict}")

    def _scrape_metrics(self, at_ready: bool = False) -> None:
        for role, reg in self.state.registrations.items():
            for process, port in reg.ports.items():
                url = f"http://{reg.host}:{port}/metrics"
                try:
                    with direct_http.urlopen(url, timeout=5) as response:
                        text = response.read().decode("utf-8", "replace")
                except (OSError, urllib.error.URLError) as exc:
                    self.ctx.progress.line(f"metrics from {role}.{process} ({url}) unavailable: {exc}")
                    continue
                atomic_write_text(self.ctx.rundir.metrics(role, process, at_ready), text)

    # -- stop --------------------------------------------------------------------------------------------

    def _active_jobs(self) -> dict[str, int]:
        return {role: rec.job_id for role, rec in self.state.jobs.items() if rec.job_id is not None}

    def stop(self) -> None:
        """Stop every job gracefully (SIGTERM to the job script only), then wait until Slurm settles."""
        slurm = self.ctx.slurm
        self.state.stopping = True
        active = self._active_jobs()
        if not active:
            return
        live: dict[str, tuple[int, str]] = {}
        for role, job_id in active.items():
            try:
                info = slurm.job(job_id)
            except SlurmError:
                continue
            if not info.terminal:
                live[role] = (job_id, info.state)
        for role, (job_id, job_state) in live.items():
            if job_state == "PENDING":
                try:
                    slurm.cancel([job_id])  # no script to signal yet
                except SlurmError as exc:
                    self.ctx.progress.line(f"{role}: could not cancel pending job {job_id}: {exc}")
                    continue
                self._event("cancelled", role=role, job_id=job_id, detail="cancelled while pending")
                continue
            self._signal_job_script(role, job_id)
        self.ctx.progress.line(f"stopping {', '.join(live) or 'nothing'}; waiting for Slurm to settle")
        if not self._settle(self.ctx.settle_timeout_s):
            self.ctx.progress.line("jobs did not stop within the settle timeout: cancelling them")
            self._cancel_hard()

    def _signal_job_script(self, role: str, job_id: int) -> None:
        """SIGTERM the job script only (it forwards it and waits for its processes). A refused scancel is
        retried while the job still runs: under load slurmctld can time out, and cancelling then would end a
        healthy job as CANCELLED. Cancelled hard only when the signal cannot be delivered for _SIGNAL_RETRY_S."""
        slurm = self.ctx.slurm
        deadline = time.monotonic() + _SIGNAL_RETRY_S
        while True:
            try:
                slurm.signal_batch([job_id])
            except SlurmError as exc:
                error = str(exc)
            else:
                self._event("cancelled", role=role, job_id=job_id, detail="SIGTERM to the job script")
                return
            try:
                info: JobInfo | None = slurm.job(job_id)
            except SlurmError:
                info = None
            if info is not None and (info.terminal or info.state == "COMPLETING"):
                detail = f"scancel failed ({error}); the job was already {info.state}"
                self._event("cancelled", role=role, job_id=job_id, detail=detail)
                return
            if time.monotonic() >= deadline:
                self.ctx.progress.line(
                    f"{role}: SIGTERM could not be delivered ({error}): cancelling job {job_id}"
                )
                self.state.hard_cancelled[role] = error
                with suppress(SlurmError):
                    slurm.cancel([job_id])
                self._event("cancelled", role=role, job_id=job_id, detail=f"SIGTERM not delivered ({error})")
                return
            self.ctx.progress.line(f"{role}: SIGTERM not delivered ({error}); retrying")
            time.sleep(_SIGNAL_RETRY_INTERVAL_S)  # a retry interval: nothing to wait on but the controller

    def _settle(self, timeout_s: float) -> bool:
        """Wait until every job has ended, up to ``timeout_s``. A controller that does not answer (slurmctld
        frozen or overloaded) is asked again until then: a stop never fails on a Slurm error."""
        deadline = time.monotonic() + timeout_s
        pending = dict(self._active_jobs())
        poller = JobPoller(self.ctx.slurm)  # a fresh schedule: polled fast while the jobs stop
        silent = False
        while pending:
            try:
                infos = poller.poll(pending.values())
            except SlurmError as exc:
                if not silent:
                    self.ctx.progress.line(f"Slurm did not answer while the jobs stop ({exc}); asking again")
                silent, infos = True, {}
            for role, job_id in list(pending.items()):
                info = infos.get(job_id)
                if info is None:
                    continue
                self.state.job_states[role] = info.state
                if info.terminal:
                    del pending[role]
            if not pending:
                break
            if time.monotonic() >= deadline:
                return False
            with suppress(SlurmError):  # the jobs are read above; this waits on etcd and shows progress
                self._poll()
        return True

    def _cancel_hard(self) -> None:
        active = list(self._active_jobs().values())
        if active:
            try:
                self.ctx.slurm.cancel(active)
            except SlurmError as exc:
                self.ctx.progress.line(f"could not cancel jobs {active}: {exc}")
            if not self._settle(self.ctx.settle_timeout_s):
                self.ctx.progress.line(
                    f"jobs {active} had not ended {self.ctx.settle_timeout_s:.0f} s after scancel"
                )

    # -- record ------------------------------------------------------------------------------------------

    def _final_jobs(self) -> bool:
        """Fill job records from Slurm; return True when placement matches what was asked."""
        verified = True
        for role, record in self.state.jobs.items():
            info: JobInfo | None = None
            if record.job_id is not None:
                try:
                    info = self.ctx.slurm.job(record.job_id)
                except SlurmError:
                    info = None
            if info is not None:
                record.state = info.state
                record.node_ran = info.nodes
                record.exit_code = format_exit_code(info.exit_code)
                record.derived_exit_code = format_exit_code(info.derived_exit_code)
            reg = self.state.registrations.get(role)
            if record.node_ran != record.node_requested or reg is None or reg.node != record.node_requested:
                verified = False
        nodes = [r.node_ran for r in self.state.jobs.values()]
        if len(nodes) > 1 and len(set(nodes)) != len(nodes):
            verified = False
        return verified and bool(self.state.jobs)

    def record(self) -> Outcome:
        ctx, state = self.ctx, self.state
        placement = self._final_jobs()
        if state.failure is None:
            unclean = [
                f"{role} ({rec.state}, exit {rec.exit_code}"
                + (
                    f"; cancelled: SIGTERM not delivered: {state.hard_cancelled[role]})"
                    if role in state.hard_cancelled
                    else ")"
                )
                for role, rec in state.jobs.items()
                if rec.state != "COMPLETED" or rec.exit_code != "0:0"
            ]
            if unclean:
                self._fail("jobs did not stop cleanly: " + ", ".join(unclean))
            elif not placement:
                self._fail(
                    "placement not verified: "
                    + ", ".join(
                        f"{r} asked {j.node_requested} ran {j.node_ran}" for r, j in state.jobs.items()
                    )
                )
        with suppress(ReadinessError):
            ctx.etcd.client.delete_prefix(ctx.etcd.prefix)
        passed = state.failure is None
        if state.failure is not None:  # a failed run's benchmark figures are never a result
            serving_benchmark.mark_failed(ctx.rundir.path, state.failure)
        fingerprints = role_files(ctx.rundir.path, "fingerprints")
        lock_digest, lock_source = run_lock_digest(
            ctx.config.runtime,
            role_files(ctx.rundir.path, "images"),
            _lock_digest(ctx.options.lock_path, ctx.config.project_dir),
        )
        ctx.rundir.write_run(
            kind=ctx.options.kind,
            engine=ctx.engine.name,
            model=ctx.model.name,
            runtime=ctx.config.runtime,
            platform=ctx.engine.platform_of(fingerprints),
            lock_digest=lock_digest,
            config=ctx.config.redacted(),
            jobs=list(state.jobs.values()),
            placement_verified=placement,
            result="pass" if passed else "fail",
            failure=state.failure,
            extra={
                "requests_total": ctx.options.resolved_requests(),
                "requests_ok": sum(1 for r in state.results if r.ok),
                "registrations": {r: json.loads(reg.to_json()) for r, reg in state.registrations.items()},
                "lock_digest_source": lock_source,
                "ports": {role: dataclasses.asdict(p) for role, p in ctx.ports.items()},
                "slurm_calls": ctx.slurm.call_counts(),
                # The KV correctness check was part of this run (answers.py); evidence of older runs lacks it.
                **(
                    {"fixed_prompt": answers.FIXED_PROMPT}
                    if ctx.engine.expectations.aggregated_answer
                    else {}
                ),
            },
        )
        calls = ctx.slurm.call_counts()
        ctx.progress.line(
            f"slurm: {calls['total']} commands in {calls['seconds']} s ({calls['per_minute']} a minute), "
            "run.json slurm_calls"
        )
        self._event("done", detail="pass" if passed else f"fail: {state.failure}")
        ctx.progress.line(f"{'PASS' if passed else 'FAIL'}: {ctx.rundir.path}")
        return Outcome(
            run_id=ctx.rundir.run_id,
            run_dir=ctx.rundir.path,
            passed=passed,
            failure=state.failure,
            timeline=read_jsonl(ctx.rundir.path / "timeline.jsonl"),
            results=list(state.results),
        )


# -- what the record stage reads back from the jobs ---------------------------------------------------------


def role_files(run_path: Path, sub: str) -> dict[str, dict[str, Any]]:
    """role -> the JSON object each job wrote to <run dir>/<sub>/<role>.json (unreadable ones left out)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((run_path / sub).glob("*.json")):
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(loaded, dict):
            found[path.stem] = loaded
    return found


def run_lock_digest(
    runtime: str, images: dict[str, dict[str, Any]], checkout_digest: str | None
) -> tuple[str | None, str]:
    """(the lock digest the run used, where it was read). Docker: the io.atomdyn.lock.digest label of the image
    every job ran, read on its node at run time; none when a label is missing or the roles disagree. Venv: the
    checkout's lock, which is what the venv was built from."""
    if runtime != "docker":
        return checkout_digest, "checkout lock (venv runtime)"
    digests = {role: str(info.get("lock_digest") or "") for role, info in images.items()}
    if not digests:
        return None, "unknown: no job recorded its image (images/<role>.json)"
    missing = sorted(role for role, digest in digests.items() if not digest)
    if missing:
        return None, f"unknown: the image of {', '.join(missing)} carries no io.atomdyn.lock.digest label"
    if len(set(digests.values())) > 1:
        return None, "unknown: the roles ran images of different locks: " + ", ".join(
            f"{role} {digest}" for role, digest in sorted(digests.items())
        )
    return next(iter(digests.values())), "image label io.atomdyn.lock.digest"


# -- what the submit stage renders (no live objects: the golden snapshots build one with a fixed config) ----


@dataclass(frozen=True)
class Submission:
    """The inputs of every job script and command line of a run."""

    config: ClusterConfig
    options: LaunchOptions
    engine: Engine
    model: ModelProfile
    rundir: RunDir
    etcd_endpoint: str
    ready_timeout_s: float
    ports: Mapping[str, Ports] = field(default_factory=dict)  # per role; empty: Ports.for_role

    @property
    def etcd_prefix(self) -> str:
        return run_prefix(self.rundir.run_id)

    def runtime(self) -> Runtime:
        config = self.config
        if config.runtime == "venv":
            return VenvRuntime(self.engine.venv(config.python_venv, config.project_dir))
        images = self.engine.images(self.options.kind, config.dynamo_atom_image, config.nixl_image)
        if not images:
            raise PreflightError("RUNTIME=docker needs DYNAMO_ATOM_IMAGE")
        mounts = sorted({str(config.shared_dir), str(config.model_path), str(config.project_dir)})
        return DockerRuntime(
            images[0], f"atomdyn-{self.rundir.run_id}", mounts, lock_memory=self.engine.vendor != "none"
        )

    def node_python(self) -> list[str]:
        """How a job runs this project's modules on the node, outside any container: in the venv runtime its
        venv (preflight requires it), else as the node jobs do."""
        if self.config.runtime == "venv":
            return [str(self.config.python_venv / "bin" / "python")]
        return jobs.node_python(self.config)

    def role_context(self, spec: RoleSpec, runtime: Runtime) -> RoleContext:
        run_id = self.rundir.run_id
        return RoleContext(
            run_id=run_id,
            role=spec.role,
            mode=spec.mode,
            with_frontend=spec.with_frontend,
            index=spec.index,
            model=self.model,
            model_path=str(model_path(self.config, self.model)),
            etcd_endpoint=self.etcd_endpoint,
            namespace=f"atomdyn-{run_id.lower()}",
            home_dir=str(self.rundir.home / spec.role),
            ports=self.ports[spec.role] if self.ports else Ports.for_role(spec.index),
            runtime=runtime,
            speedup_ratio=self.options.speedup_ratio,
            router_mode=self.options.router_mode,
            worker_args=tuple(self.worker_args(spec)),
            prepared_shim=str(shim_current(self.config)),
            run_dir=str(self.rundir.path),
            cache_dir=str(self.config.shared_dir / "cache"),
            node_python=tuple(self.node_python()),
            etcd_env=worker_etcd_env(self.config),
            dynamo_lease_ttl_s=self.dynamo_lease_ttl_s(),
            ucx_net_devices=self.config.ucx_net_devices_for(spec.node),
            ucx_path=self.config.atom_ucx_path,
            kv_cross_layer_blocks=self.config.kv_cross_layer_blocks == "yes",
            rdma=RdmaMounts(
                str(self.config.rdma_verbs_config_dir),
                tuple(str(p) for p in self.config.rdma_provider_libs),
            ),
        )

    def worker_args(self, spec: RoleSpec) -> list[str]:
        """Engine flags from the run's options: the mock engine's KV transfer model on P/D workers."""
        opts = self.options
        if self.engine.name != "mocker" or spec.mode == "agg":
            return []
        args = []
        if opts.kv_transfer_bandwidth_gbps is not None:
            args += ["--kv-transfer-bandwidth", f"{opts.kv_transfer_bandwidth_gbps:g}"]
        if opts.kv_bytes_per_token is not None:
            args += ["--kv-bytes-per-token", str(opts.kv_bytes_per_token)]
        return args

    def dynamo_lease_ttl_s(self) -> int:
        """Dynamo's lease for an engine with a longer etcd grace (as the helpers' leases); 0: Dynamo's default."""
        timeouts = self.engine.timeouts
        return timeouts.lease_s if timeouts.lease_s != LEASE_TTL_S else 0

    def register_command(self, spec: RoleSpec, plan: RolePlan, ports: Ports) -> list[Arg]:
        """The registration helper: runs on the node, outside any container, after every process started."""
        args: list[Arg] = [*self.node_python(), "-m", "atomdyn_launchers.job.readiness", "register"]
        access = etcd_access(self.config, None if self.config.etcd_endpoints else self.etcd_endpoint)
        args += [*access.cli_args(), "--key", self.etcd_prefix + spec.role, "--role", spec.role]
        args += ["--job-id", Shell('"${SLURM_JOB_ID:-}"'), "--timeout", f"{self.ready_timeout_s:.0f}"]
        args += ["--launcher-key", launcher_key(self.rundir.run_id)]
        timeouts = self.engine.timeouts
        if timeouts.etcd_grace_s != ETCD_LOST_S:
            args += ["--etcd-lost-s", f"{timeouts.etcd_grace_s:g}"]
        if timeouts.lease_s != LEASE_TTL_S:  # outlives the grace (Timeouts.lease_s)
            args += ["--ttl", str(timeouts.lease_s)]
        for proc in plan.processes:
            args += ["--pid", Shell(f'{proc.name}="${pid_var(proc.name)}"')]
        if spec.with_frontend:
            args += [
                "--port",
                f"frontend={ports.http}",
                "--frontend-health",
                f"http://127.0.0.1:{ports.http}/health",
            ]
        args += [
            "--port",
            f"{plan.worker_process}={ports.system}",
            "--worker-health",
            f"http://127.0.0.1:{ports.system}/health",
        ]
        return args

    def gres_gpus(self, plan: RolePlan) -> int:
        """GPUs asked of Slurm (--gres) for a role: only when SLURM_GPU_GRES=yes."""
        return plan.gpus if self.config.slurm_gpu_gres else 0

    def role(self, spec: RoleSpec, runtime: Runtime) -> tuple[RolePlan, JobSpec]:
        """One role's plan and job."""
        role_ctx = self.role_context(spec, runtime)
        plan = self.engine.plan(role_ctx)
        job = JobSpec(
            role=spec.role,
            job_name=f"atomdyn-{spec.role}",
            node=spec.node,
            account=self.config.slurm_account,
            partition=self.config.slurm_partition,
            qos=self.config.slurm_qos,
            output=str(self.rundir.slurm_out(spec.role)),
            log_dir=str(self.rundir.path / "logs"),
            processes=plan.processes,
            env=plan.env,
            prelude=plan.prelude,
            gpus=self.gres_gpus(plan),
            time_limit=self.options.time_limit or self.engine.timeouts.time_limit,
            register=self.register_command(spec, plan, role_ctx.ports),
            ports=port_leases.named_ports(role_ctx.ports, with_frontend=spec.with_frontend),
            header_comment=(
                f"atomdyn run {self.rundir.run_id}: role {spec.role} ({spec.mode}) on {spec.node}, "
                f"engine {self.engine.name}, runtime {self.config.runtime}. Generated; do not edit."
            ),
        )
        return plan, job


def write_resolved_recipe(
    path: Path, options: LaunchOptions, engine: Engine, model: ModelProfile, roles: list[RoleSpec]
) -> None:
    """recipe.json: the recipe as read (if any) and what the run resolved it to, flags included."""
    resolved = {
        "kind": options.kind,
        "engine": engine.name,
        "model": model.name,
        "layout": f"{options.prefill_workers}P{options.decode_workers}D"
        if options.kind == "disagg"
        else options.kind,
        "roles": [
            {"role": r.role, "mode": r.mode, "node": r.node, "frontend": r.with_frontend} for r in roles
        ],
        "router_mode": options.router_mode,
        "time_limit": options.time_limit or engine.timeouts.time_limit,
        "requests": options.resolved_requests(),
        "concurrency": options.concurrency,
        "max_tokens": options.max_tokens,
        "speedup_ratio": options.speedup_ratio if engine.name == "mocker" else None,
        "kv_transfer_bandwidth_gbps": options.kv_transfer_bandwidth_gbps,
        "kv_bytes_per_token": options.kv_bytes_per_token,
    }
    recipe = options.recipe.to_json() if options.recipe is not None else None
    text = json.dumps({"recipe": recipe, "resolved": resolved}, indent=2) + "\n"
    atomic_write_text(path / "recipe.json", text)


def answer_reference(
    config: ClusterConfig, engine: Engine, model: ModelProfile, lock_path: Path | None
) -> tuple[str, Path]:
    """The key and file of the fixed prompt's aggregated answer for this engine, model and build."""
    lock = _lock_digest(lock_path, config.project_dir) or ""
    key = answers.reference_key(engine.name, model.name, model.build_digest or "", lock)
    return key, answers.reference_path(config.shared_dir, key)


def aggregated_reference_missing(engine: str, config: ClusterConfig | None = None) -> bool:
    """Whether a P/D run of ``engine`` would find no aggregated answer to compare with (``nox -s demo`` then
    runs an aggregated one first)."""
    cfg = config or resolve_cluster_config(None)
    chosen = get_engine(engine)
    if not chosen.expectations.aggregated_answer:
        return False
    return not answer_reference(cfg, chosen, get_model(chosen.default_model), None)[1].is_file()


def run(
    kind: str,
    config: ClusterConfig | None = None,
    *,
    config_path: Path | None = None,
    progress: Progress | None = None,
    hook: Hook | None = None,
    **options: object,
) -> Outcome:
    """One call for tools (``nox -s demo``): resolve the cluster config, run ``kind``, return the outcome."""
    cfg = config or resolve_cluster_config(config_path)
    for name, kind_of in (("requests", int), ("concurrency", int), ("ready_timeout_s", float)):
        value = options.get(name)
        if isinstance(value, str):  # from a command line (invoke passes untyped options as text)
            try:
                options[name] = kind_of(value)
            except ValueError:
                raise PreflightError(f"{name} must be a number, not {value!r}") from None
    opts = LaunchOptions(kind=kind, **options)  # type: ignore[arg-type]
    return Launch(cfg, opts, progress=progress, hook=hook).run()


def dry_run(
    kind: str,
    config: ClusterConfig | None = None,
    *,
    config_path: Path | None = None,
    progress: Progress | None = None,
    slurm: Slurm | None = None,
    **options: object,
) -> Path:
    """Preflight (unless ``offline=True``) and write every script of ``kind`` without submitting; the run
    directory's path. Offline, a config file that cannot be resolved against this machine is read as is."""
    if config is None and config_path is not None and options.get("offline"):
        from atomdyn_launchers.config.cluster import load_cluster_config

        cfg = load_cluster_config(config_path)
    else:
        cfg = config or resolve_cluster_config(config_path)
    opts = LaunchOptions(kind=kind, **options)  # type: ignore[arg-type]
    return Launch(cfg, opts, progress=progress, slurm=slurm).dry_run()
