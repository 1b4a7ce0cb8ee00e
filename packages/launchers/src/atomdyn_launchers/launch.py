"""Aggregated and disaggregated runs: plan the roles, submit pinned jobs, wait, smoke-test, stop, record.

One run, start to end:
  preflight (partition, nodes, model path, etcd: nothing is submitted if one fails)
  -> one sbatch job per role, each pinned to its node with --nodelist
  -> watch etcd until every role registered (its processes healthy) and the frontend lists the instances
  -> probe until one response is verified (P/D: different prefill and decode workers)
  -> smoke requests, each checked -> scrape metrics -> stop the jobs (SIGTERM to each job script, which
     stops its processes and exits 0) -> wait for Slurm to settle -> record the run directory.
While anything waits, the jobs and the etcd registrations are watched: the first role to fail fails the run,
the other jobs are stopped, and every log is kept. Ctrl-C (or SIGTERM) stops the jobs the same way.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from atomdyn_core.atomic import atomic_write_text
from atomdyn_core.lock import find_lock_path, load_lock
from atomdyn_launchers import readiness
from atomdyn_launchers.config import ClusterConfig, PreflightError, resolve_cluster_config
from atomdyn_launchers.engines import Engine, get_engine
from atomdyn_launchers.engines.base import Ports, RoleContext, RolePlan
from atomdyn_launchers.engines.runtime import DockerRuntime, Runtime, VenvRuntime
from atomdyn_launchers.nodes.check import CheckReport, check_nodes
from atomdyn_launchers.nodes.etcd_owned import OwnedEtcd, OwnedEtcdError, owned_etcd_node
from atomdyn_launchers.nodes.jobs import NodeJobError, docker_host
from atomdyn_launchers.nodes.prepare import shim_current
from atomdyn_launchers.profiles.models import DEFAULT_MODEL, ModelProfile, get_model
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.rundir import KINDS, JobRecord, RunDir, read_jsonl
from atomdyn_launchers.sbatch import Arg, JobSpec, Shell, pid_var, render
from atomdyn_launchers.slurm import JobInfo, Slurm, SlurmError, preflight
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


class LaunchFailure(RuntimeError):
    """The run failed; the message says which role or step and why."""


@dataclass(frozen=True)
class LaunchOptions:
    kind: str
    engine: str | None = None  # default: the config's ENGINE_PROFILE
    model: str = DEFAULT_MODEL
    requests: int | None = None  # default: DEFAULT_REQUESTS[kind]
    concurrency: int = 8
    max_tokens: int = 32
    prompt_groups: int = 4
    ready_timeout_s: float | None = None  # default: 120 s for the mocker, 3600 s for real engines
    settle_timeout_s: float | None = None  # default: 60 s for the mocker, 300 s for GPU engines
    request_timeout_s: float = 120.0
    time_limit: str | None = None  # default: 00:30:00 for the mocker, 04:00:00 for real engines
    speedup_ratio: float = 10.0
    runs_root: Path | None = None  # default: <SHARED_DIR>/runs
    lock_path: Path | None = None
    node_check: bool = True  # nodes.check on the run's nodes before submitting (--skip-node-check)

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


def plan_roles(kind: str, config: ClusterConfig) -> list[RoleSpec]:
    if kind == "agg-single":
        return [RoleSpec("agg", config.primary_node, "agg", True, 0)]
    if kind == "agg-two":
        other = config.decode_node if config.decode_node != config.primary_node else config.prefill_node
        if other == config.primary_node:
            raise PreflightError(
                "agg-two needs two nodes: PREFILL_NODE or DECODE_NODE must differ from PRIMARY_NODE"
            )
        return [
            RoleSpec("agg1", config.primary_node, "agg", True, 0),
            RoleSpec("agg2", other, "agg", False, 1),
        ]
    if kind == "disagg":
        if config.prefill_node == config.decode_node:
            raise PreflightError("disagg needs two nodes: PREFILL_NODE and DECODE_NODE are the same")
        return [
            RoleSpec("prefill", config.prefill_node, "prefill", False, 1),
            RoleSpec("decode", config.decode_node, "decode", True, 0),
        ]
    raise PreflightError(f"unknown run kind {kind!r}; known: {', '.join(KINDS)}")


def required_instances(kind: str) -> dict[str, int]:
    """Generate instances per Dynamo component the frontend must list before traffic starts."""
    return {"agg-single": {"backend": 1}, "agg-two": {"backend": 2}, "disagg": {"prefill": 1, "backend": 1}}[
        kind
    ]


def _lock_digest(path: Path | None, project_dir: Path) -> str | None:
    """The digest of the lock this run used: ``path``, else $ATOMDYN_LOCK, else the project's lock."""
    try:
        return load_lock(path or find_lock_path(project_dir)).digest
    except (OSError, ValueError, LookupError):  # no readable lock: the run records None
        return None


def _fmt_exit(code: tuple[int, int] | None) -> str | None:
    return None if code is None else f"{code[0]}:{code[1]}"


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


class Launch:
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
        self.engine_impl: Engine = get_engine(options.engine or config.engine_profile)
        self.engine = self.engine_impl.name
        self.progress = progress or Progress()
        self.slurm = slurm or Slurm(config)
        self.hook = hook
        self.model: ModelProfile = get_model(options.model)
        self.roles = plan_roles(options.kind, config)
        self.jobs: dict[str, JobRecord] = {}
        self.job_states: dict[str, str] = {}
        self.registrations: dict[str, readiness.Registration] = {}
        self.plans: dict[str, RolePlan] = {}
        self.events: queue.Queue[readiness.RoleEvent] = queue.Queue()
        self.stopping = False
        self.failure: str | None = None
        self.results: list[SmokeResult] = []
        self._done_count = 0
        self._last_poll = 0.0

    # -- small helpers -----------------------------------------------------------------------------------

    def _event(
        self, event: str, *, role: str | None = None, job_id: int | None = None, detail: str | None = None
    ) -> None:
        record = self.rundir.event(event, role=role, job_id=job_id, detail=detail)
        if self.hook is not None:
            self.hook(event, {**record, "launch": self})

    def _show(self) -> None:
        total = self.options.resolved_requests()
        done = self._done_count if self.results or self._done_count else None
        self.progress.status(dict(self.job_states), set(self.registrations), done, total)

    @property
    def etcd_endpoint(self) -> str:
        owned: OwnedEtcd | None = getattr(self, "owned_etcd", None)  # ETCD_ENDPOINT empty: the run's own
        return owned.endpoint if owned is not None else self.config.require_etcd()

    def _runtime(self) -> Runtime:
        if self.config.runtime == "venv":
            return VenvRuntime(self.config.python_venv)
        # P/D runs use the NIXL overlay image (ROCm UCX + upstream NIXL) when one is configured.
        image = self.config.dynamo_atom_image
        if self.options.kind == "disagg" and self.config.nixl_image:
            image = self.config.nixl_image
        if image is None:
            raise PreflightError("RUNTIME=docker needs DYNAMO_ATOM_IMAGE")
        mounts = sorted(
            {str(self.config.shared_dir), str(self.config.model_path), str(self.config.project_dir)}
        )
        return DockerRuntime(image, f"atomdyn-{self.rundir.run_id}", mounts)

    # -- the run -----------------------------------------------------------------------------------------

    def preflight(self) -> None:
        if self.options.kind not in KINDS:
            raise PreflightError(f"unknown run kind {self.options.kind!r}")
        if self.options.concurrency < 1 or self.options.resolved_requests() < 1:
            raise PreflightError("requests and concurrency must be at least 1")
        python = self.config.python_venv / "bin" / "python"
        if self.config.runtime == "venv" and not python.exists():
            raise PreflightError(
                f"PYTHON_VENV {self.config.python_venv} has no bin/python (jobs run with it)"
            )
        if self.config.runtime == "venv":
            module = self.engine_impl.dynamo_module
            site = self.config.python_venv.glob(f"lib/python3*/site-packages/dynamo/{module}/__main__.py")
            if not any(site):
                raise PreflightError(
                    f"PYTHON_VENV {self.config.python_venv} has no dynamo.{module} "
                    "(install ai-dynamo==1.3.0.post1 there; jobs run with that venv)"
                )
        if self.engine_impl.needs_gpus() and self.model.gpus_per_worker > self.config.gpus_per_node:
            raise PreflightError(
                f"model profile {self.model.name} needs {self.model.gpus_per_worker} GPUs per worker; "
                f"GPUS_PER_NODE is {self.config.gpus_per_node}"
            )
        nodes = list(dict.fromkeys(r.node for r in self.roles))
        preflight(self.config, nodes, slurm=self.slurm, need_etcd=self.config.etcd_endpoint is not None)
        if self.config.etcd_endpoint is not None:
            readiness.EtcdClient(self.etcd_endpoint).version()
        if self.options.node_check:
            try:
                report = check_nodes(
                    self.config, nodes, engine=self.engine, kind=self.options.kind, slurm=self.slurm
                )
            except NodeJobError as exc:
                raise PreflightError(f"node check could not run: {exc}") from exc
            report.require_ok()
            self.node_report = report  # copied into the run directory once it exists (evidence)

    def run(self) -> Outcome:
        """Run once. Preflight errors raise PreflightError before anything is created or submitted."""
        self.preflight()
        runs_root = self.options.runs_root or self.config.runs_dir
        self.rundir = RunDir.create(runs_root, self.options.kind, self.engine)
        self.progress.line(f"run {self.rundir.run_id} -> {self.rundir.path}")
        report: CheckReport | None = getattr(self, "node_report", None)
        if report is not None:
            atomic_write_text(
                self.rundir.path / "node-check.json", json.dumps(report.to_json(), indent=2) + "\n"
            )
        if self.config.etcd_endpoint is None:
            self._start_owned_etcd()
        self.etcd = readiness.EtcdClient(self.etcd_endpoint)
        self.prefix = readiness.run_prefix(self.rundir.run_id)
        self.watcher = readiness.RoleWatcher(self.etcd, self.prefix, self.events)
        self.presence = readiness.Presence(self.etcd, readiness.launcher_key(self.rundir.run_id))
        with _interrupts_as_keyboard():
            try:
                try:
                    self.watcher.start()
                    self.presence.start()
                    self._submit_all()
                    self._wait_ready()
                    self._first_good()
                    self._smoke()
                    self._scrape_metrics()
                except (LaunchFailure, readiness.ReadinessError, SlurmError, PreflightError) as exc:
                    self._fail(str(exc))
                except KeyboardInterrupt:
                    self._fail("interrupted (Ctrl-C or SIGTERM): jobs stopped")
                finally:
                    self._shutdown()
            except KeyboardInterrupt:
                self._fail("interrupted again during shutdown: jobs were cancelled")
                self._cancel_hard()
            finally:
                self.watcher.stop()
                self.presence.stop()  # after the jobs settled: its expiry is what stops orphaned jobs
                self._stop_owned_etcd()
                outcome = self._record()
        return outcome

    def _start_owned_etcd(self) -> None:
        """No ETCD_ENDPOINT: etcd at the lock's version in a job of its own, endpoint from etcd.json."""
        node = owned_etcd_node(self.config, self.options.kind)
        try:
            self.owned_etcd = OwnedEtcd.start(
                self.config, self.rundir.path, node, slurm=self.slurm, lock_path=self.options.lock_path
            )
        except (OwnedEtcdError, SlurmError) as exc:
            raise PreflightError(f"run-owned etcd: {exc}") from exc
        self.progress.line(f"run-owned etcd at {self.etcd_endpoint} (job {self.owned_etcd.job_id} on {node})")

    def _stop_owned_etcd(self) -> None:
        owned: OwnedEtcd | None = getattr(self, "owned_etcd", None)
        if owned is None:
            return
        try:
            owned.stop()
        except (OwnedEtcdError, SlurmError, TimeoutError) as exc:
            self._fail(f"run-owned etcd did not stop: {exc}")

    def _fail(self, message: str) -> None:
        if self.failure is None:
            self.failure = message
            self.progress.line(f"FAILED: {message}")
            self._event("failed", detail=message)

    # -- submission --------------------------------------------------------------------------------------

    def _role_context(self, spec: RoleSpec, runtime: Runtime) -> RoleContext:
        return RoleContext(
            run_id=self.rundir.run_id,
            role=spec.role,
            mode=spec.mode,
            with_frontend=spec.with_frontend,
            index=spec.index,
            model=self.model,
            model_path=str(self.config.model_path),
            etcd_endpoint=self.etcd_endpoint,
            namespace=f"atomdyn-{self.rundir.run_id.lower()}",
            home_dir=str(self.rundir.home / spec.role),
            ports=Ports.for_role(spec.index),
            runtime=runtime,
            speedup_ratio=self.options.speedup_ratio,
            prepared_shim=str(shim_current(self.config)),
        )

    def _register_command(self, spec: RoleSpec, plan: RolePlan, ports: Ports) -> list[Arg]:
        # The helper runs on the node, outside any container. It needs only the standard library, so
        # without a venv the checkout's source tree on the shared filesystem is enough.
        venv_python = self.config.python_venv / "bin" / "python"
        args: list[Arg]
        if self.config.runtime == "venv" or venv_python.exists():
            args = [str(venv_python)]
        else:
            source = self.config.project_dir / "packages" / "launchers" / "src"
            args = ["env", f"PYTHONPATH={source}", "python3"]
        args += ["-m", "atomdyn_launchers.readiness", "register"]
        args += ["--etcd", self.etcd_endpoint, "--key", self.prefix + spec.role, "--role", spec.role]
        args += ["--job-id", Shell('"${SLURM_JOB_ID:-}"'), "--timeout", f"{self._ready_timeout():.0f}"]
        args += ["--launcher-key", readiness.launcher_key(self.rundir.run_id)]
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

    def _settle_timeout(self) -> float:
        if self.options.settle_timeout_s is not None:
            return self.options.settle_timeout_s
        return self.engine_impl.timeouts.settle_s

    def _ready_timeout(self) -> float:
        if self.options.ready_timeout_s is not None:
            return self.options.ready_timeout_s
        return self.engine_impl.timeouts.ready_s

    def _submit_all(self) -> None:
        runtime = self._runtime()
        for spec in self.roles:
            ctx = self._role_context(spec, runtime)
            plan = self.engine_impl.plan(ctx)
            self.plans[spec.role] = plan
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
                gpus=plan.gpus,
                time_limit=self.options.time_limit or self.engine_impl.timeouts.time_limit,
                register=self._register_command(spec, plan, ctx.ports),
                header_comment=(
                    f"atomdyn run {self.rundir.run_id}: role {spec.role} ({spec.mode}) on {spec.node}, "
                    f"engine {self.engine}, runtime {self.config.runtime}. Generated; do not edit."
                ),
            )
            script = self.rundir.write_script(spec.role, render(job))
            self.jobs[spec.role] = JobRecord(spec.role, None, spec.node)
            job_id = self.slurm.submit(
                script,
                job_name=job.job_name,
                nodelist=spec.node,
                gres=f"gpu:{plan.gpus}" if plan.gpus else None,
                output=self.rundir.slurm_out(spec.role),
                chdir=self.rundir.path,
                env={"DOCKER_HOST": docker_host(self.config, spec.node)} if self.config.docker_host else None,
            )
            self.jobs[spec.role].job_id = job_id
            self.job_states[spec.role] = "SUBMITTED"
            self._event("submitted", role=spec.role, job_id=job_id, detail=f"node {spec.node}")
            self.progress.line(f"submitted {spec.role} as job {job_id} on {spec.node}")

    # -- watching ----------------------------------------------------------------------------------------

    def _poll(self, timeout_s: float = _POLL_S) -> None:
        """Wait up to ``timeout_s`` for an etcd event, then read job states; raise on the first failure."""
        try:
            event: readiness.RoleEvent | None = self.events.get(timeout=timeout_s)
        except queue.Empty:
            event = None
        while event is not None:
            self._on_role_event(event)
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                event = None
        if time.monotonic() - self._last_poll >= _POLL_S:
            self._last_poll = time.monotonic()
            self._check_jobs()
        self._show()

    def _on_role_event(self, event: readiness.RoleEvent) -> None:
        if event.kind == "watch-error":
            raise LaunchFailure(f"lost the etcd watch: {event.detail}")
        if event.kind == "registered" and event.registration is not None:
            reg = event.registration
            self.registrations[event.role] = reg
            job = self.jobs.get(event.role)
            self._event(
                "registered",
                role=event.role,
                job_id=job.job_id if job else None,
                detail=f"node {reg.node} host {reg.host} ports {dict(reg.ports)}",
            )
        elif event.kind == "deregistered" and not self.stopping:
            raise LaunchFailure(
                f"role {event.role} left etcd: its processes stopped "
                f"(see logs/{event.role}.slurm.out and logs/{event.role}.*.log)"
            )

    def _check_jobs(self) -> None:
        for role, record in self.jobs.items():
            if record.job_id is None:
                continue
            info = self.slurm.job(record.job_id)
            previous = self.job_states.get(role, "").split(" ")[0]
            waiting = info.state == "PENDING" and info.reason not in (None, "None", "Priority")
            self.job_states[role] = f"{info.state} ({info.reason})" if waiting else info.state
            if info.state != previous and info.state in ("PENDING", "RUNNING"):
                detail = f"reason {info.reason}" if info.state == "PENDING" and info.reason else info.nodes
                self._event(info.state.lower(), role=role, job_id=record.job_id, detail=detail)
            if info.terminal and not self.stopping:
                raise LaunchFailure(
                    f"job {record.job_id} ({role}) ended early: {info.state}, "
                    f"exit {_fmt_exit(info.exit_code)} (see logs/{role}.slurm.out)"
                )

    def _wait_until(self, what: str, done: Callable[[], str | None], deadline: float) -> None:
        while True:
            missing = done()
            if missing is None:
                return
            if time.monotonic() >= deadline:
                raise LaunchFailure(
                    f"timed out after {self._ready_timeout():.0f} s waiting for {what}: {missing}"
                )
            self._poll()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._ready_timeout()
        self._deadline = deadline

        def roles_missing() -> str | None:
            missing = [r.role for r in self.roles if r.role not in self.registrations]
            if not missing:
                return None
            states = ", ".join(f"{r}: {self.job_states.get(r, '?')}" for r in missing)
            return f"roles not registered in etcd: {states}"

        self._wait_until("every role to register", roles_missing, deadline)
        frontend_role = next(r for r in self.roles if r.with_frontend)
        reg = self.registrations[frontend_role.role]
        self.base_url = f"http://{reg.host}:{reg.ports['frontend']}"
        wanted = required_instances(self.options.kind)

        def instances_missing() -> str | None:
            try:
                _, body = readiness.http_json(f"{self.base_url}/health")
            except OSError as exc:
                return f"frontend {self.base_url}/health not answering ({exc})"
            have = readiness.frontend_instances(body)
            short = {c: n for c, n in wanted.items() if have.get(c, 0) < n}
            return None if not short else f"frontend lists {have or 'no'} generate instances, needs {wanted}"

        self._wait_until("the frontend to list every worker", instances_missing, deadline)
        self._event("healthy", role=frontend_role.role, detail=f"{self.base_url} lists {wanted}")
        self.progress.line(f"healthy: {self.base_url}")

    def _served_model(self) -> str:
        return next(iter(self.plans.values())).served_model_name

    def _first_good(self) -> None:
        client = SmokeClient(self.base_url, self._served_model(), timeout_s=self.options.request_timeout_s)
        probe = SmokeRequest(index=-1, prompt_group=-1, prompt="Readiness probe: say hello.", max_tokens=8)
        attempts = 0
        last: SmokeResult | None = None

        def verified() -> str | None:
            nonlocal attempts, last
            attempts += 1
            last = client.send(probe, self.options.kind == "disagg")
            return None if last.ok else f"last probe: {last.error}"

        self._wait_until("a verified response", verified, self._deadline)
        assert last is not None
        detail = f"after {attempts} probe(s): prefill {last.prefill_worker_id} decode {last.decode_worker_id}"
        self._event("first_good_response", detail=detail)
        self.progress.line(f"first verified response {detail}")

    def _smoke(self) -> None:
        total = self.options.resolved_requests()
        requests = build_requests(total, self.options.prompt_groups, max_tokens=self.options.max_tokens)
        client = SmokeClient(self.base_url, self._served_model(), timeout_s=self.options.request_timeout_s)
        stop = threading.Event()
        lock = threading.Lock()

        def on_result(result: SmokeResult) -> None:
            if result.error == ABORTED:
                return  # never sent: not a smoke request of this run
            with lock:
                self.results.append(result)
                self._done_count += 1
            self.rundir.request(result.record())

        worker = threading.Thread(
            target=lambda: run_smoke(
                client,
                requests,
                concurrency=self.options.concurrency,
                require_pd=self.options.kind == "disagg",
                on_result=on_result,
                stop=stop,
            ),
            name="smoke",
            daemon=True,
        )
        self._done_count = 0
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
        bad = [r for r in self.results if not r.ok]
        ok = total - len(bad)
        self._event("requests_done", detail=f"{ok}/{total} ok")
        self.progress.line(f"requests done: {ok}/{total} ok")
        if bad:
            first = sorted(bad, key=lambda r: r.index)[0]
            raise LaunchFailure(
                f"{len(bad)} of {total} smoke requests failed; first: #{first.index}: {first.error}"
            )

    def _scrape_metrics(self) -> None:
        for role, reg in self.registrations.items():
            for process, port in reg.ports.items():
                url = f"http://{reg.host}:{port}/metrics"
                try:
                    with urllib.request.urlopen(url, timeout=5) as response:
                        text = response.read().decode("utf-8", "replace")
                except (OSError, urllib.error.URLError) as exc:
                    self.progress.line(f"metrics from {role}.{process} ({url}) unavailable: {exc}")
                    continue
                atomic_write_text(self.rundir.metrics(role, process), text)

    # -- shutdown ----------------------------------------------------------------------------------------

    def _active_jobs(self) -> dict[str, int]:
        return {role: rec.job_id for role, rec in self.jobs.items() if rec.job_id is not None}

    def _shutdown(self) -> None:
        """Stop every job gracefully (SIGTERM to the job script only), then wait until Slurm settles."""
        self.stopping = True
        active = self._active_jobs()
        if not active:
            return
        live: dict[str, tuple[int, str]] = {}
        for role, job_id in active.items():
            try:
                info = self.slurm.job(job_id)
            except SlurmError:
                continue
            if not info.terminal:
                live[role] = (job_id, info.state)
        for role, (job_id, state) in live.items():
            if state == "PENDING":
                self.slurm.cancel([job_id])  # no script to signal yet
                self._event("cancelled", role=role, job_id=job_id, detail="cancelled while pending")
                continue
            try:
                # --batch: only the job script gets SIGTERM; it forwards it and waits for its processes.
                self.slurm.run(["scancel", "--batch", "--signal=TERM", str(job_id)])
            except SlurmError:
                self.slurm.cancel([job_id])
            self._event("cancelled", role=role, job_id=job_id, detail="SIGTERM to the job script")
        self.progress.line(f"stopping {', '.join(live) or 'nothing'}; waiting for Slurm to settle")
        if not self._settle(self._settle_timeout()):
            self.progress.line("jobs did not stop within the settle timeout: cancelling them")
            self._cancel_hard()

    def _settle(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        pending = dict(self._active_jobs())
        while pending:
            for role, job_id in list(pending.items()):
                info = self.slurm.job(job_id)
                self.job_states[role] = info.state
                if info.terminal:
                    del pending[role]
            if not pending:
                break
            if time.monotonic() >= deadline:
                return False
            self._poll()
        return True

    def _cancel_hard(self) -> None:
        active = list(self._active_jobs().values())
        if active:
            self.slurm.cancel(active)
            self._settle(self._settle_timeout())

    # -- record ------------------------------------------------------------------------------------------

    def _final_jobs(self) -> bool:
        """Fill job records from Slurm; return True when placement matches what was asked."""
        verified = True
        for role, record in self.jobs.items():
            info: JobInfo | None = None
            if record.job_id is not None:
                try:
                    info = self.slurm.job(record.job_id)
                except SlurmError:
                    info = None
            if info is not None:
                record.state = info.state
                record.node_ran = info.nodes
                record.exit_code = _fmt_exit(info.exit_code)
                record.derived_exit_code = _fmt_exit(info.derived_exit_code)
            reg = self.registrations.get(role)
            if record.node_ran != record.node_requested or reg is None or reg.node != record.node_requested:
                verified = False
        nodes = [r.node_ran for r in self.jobs.values()]
        if len(nodes) > 1 and len(set(nodes)) != len(nodes):
            verified = False
        return verified and bool(self.jobs)

    def _record(self) -> Outcome:
        placement = self._final_jobs()
        if self.failure is None:
            unclean = [
                f"{role} ({rec.state}, exit {rec.exit_code})"
                for role, rec in self.jobs.items()
                if rec.state != "COMPLETED" or rec.exit_code != "0:0"
            ]
            if unclean:
                self._fail("jobs did not stop cleanly: " + ", ".join(unclean))
            elif not placement:
                self._fail(
                    "placement not verified: "
                    + ", ".join(
                        f"{r} asked {j.node_requested} ran {j.node_ran}" for r, j in self.jobs.items()
                    )
                )
        with suppress(readiness.ReadinessError):
            self.etcd.delete_prefix(self.prefix)
        passed = self.failure is None
        self.rundir.write_run(
            kind=self.options.kind,
            engine=self.engine,
            model=self.model.name,
            runtime=self.config.runtime,
            platform=self.engine_impl.platform_label(None),
            lock_digest=_lock_digest(self.options.lock_path, self.config.project_dir),
            config=self.config.redacted(),
            jobs=list(self.jobs.values()),
            placement_verified=placement,
            result="pass" if passed else "fail",
            failure=self.failure,
            extra={
                "requests_total": self.options.resolved_requests(),
                "requests_ok": sum(1 for r in self.results if r.ok),
                "registrations": {r: json.loads(reg.to_json()) for r, reg in self.registrations.items()},
            },
        )
        self._event("done", detail="pass" if passed else f"fail: {self.failure}")
        self.progress.line(f"{'PASS' if passed else 'FAIL'}: {self.rundir.path}")
        return Outcome(
            run_id=self.rundir.run_id,
            run_dir=self.rundir.path,
            passed=passed,
            failure=self.failure,
            timeline=read_jsonl(self.rundir.path / "timeline.jsonl"),
            results=list(self.results),
        )


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
