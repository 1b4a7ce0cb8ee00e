"""The one preflight: everything a run checks before anything is created or submitted (the run's options
against the engine and the recipe, the venv or the images, the tiny model built and verified, the accuracy data fetched and checked, the cluster's
partition, nodes, model path and etcd, then ``nodes.check`` on the run's nodes: inside an allocation, as job
steps of it). A failure raises
:class:`~atomdyn_launchers.config.cluster.PreflightError` naming what to fix."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.config.etcd import etcd_access
from atomdyn_launchers.config.recipes import resource_problems
from atomdyn_launchers.contract.kinds import KINDS
from atomdyn_launchers.contract.readiness import ReadinessError
from atomdyn_launchers.engines import Engine, EngineError
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.nodes.check import CheckReport, check_nodes
from atomdyn_launchers.nodes.jobs import NodeJobError
from atomdyn_launchers.profiles import datasets, smollm2, tinymodel
from atomdyn_launchers.profiles.accuracy_tasks import get_task
from atomdyn_launchers.profiles.models import ModelProfile
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import RoleSpec, model_path
from atomdyn_launchers.runtimes import get_runtime
from atomdyn_launchers.slurm.client import Allocation, Slurm, held_allocation


def check_model_path(config: ClusterConfig) -> None:
    if not config.model_path.exists():
        raise PreflightError(f"MODEL_PATH {config.model_path} does not exist (from {config.source})")


def check_etcd(config: ClusterConfig, timeout: float = 3.0) -> None:
    """etcd answers /health with {"health": "true"} and, with the configured TLS files and user, lets the
    launchers read their keys; otherwise a clear error naming the endpoints."""
    endpoints = config.require_etcd()
    try:
        client = EtcdClient(etcd_access(config), timeout_s=timeout)
        body = client.health()
        if body.get("health") == "true":
            client.check_access()
    except ReadinessError as exc:
        raise PreflightError(f"ETCD_ENDPOINTS={endpoints}: {exc}; nothing was submitted") from None
    if body.get("health") != "true":
        raise PreflightError(f"etcd at ETCD_ENDPOINTS={endpoints} reports unhealthy: {body!r}")
    down = client.unreachable_endpoints()
    if down:
        # Measured with Dynamo 1.3: its first lease request may go to any listed endpoint, and one that is
        # down stops the worker at start, so a run would fail later and less clearly.
        raise PreflightError(
            f"ETCD_ENDPOINTS={endpoints}: {'; '.join(down)}; Dynamo 1.3 does not start while a listed "
            "endpoint is down: remove it from ETCD_ENDPOINTS; nothing was submitted"
        )


def check_allocation(slurm: Slurm, options: LaunchOptions, nodes: Iterable[str]) -> Allocation | None:
    """The allocation the run starts its roles in (``options.allocation``): RUNNING, and every role's node
    among its nodes; None for a run of batch jobs."""
    if options.allocation is None:
        return None
    return held_allocation(slurm, options.allocation, nodes, detected=options.allocation_detected)


def cluster_checks(
    config: ClusterConfig,
    nodes: Iterable[str],
    *,
    slurm: Slurm | None = None,
    need_etcd: bool = True,
    need_model: bool = True,
) -> None:
    """The checks to run before submitting anything: partition, nodes, etcd, model path."""
    slurm = slurm or Slurm(config)
    slurm.check_partition()
    slurm.check_nodes(nodes)
    if need_model:
        check_model_path(config)
    if need_etcd:
        check_etcd(config)


def check_run(
    config: ClusterConfig,
    options: LaunchOptions,
    engine: Engine,
    model: ModelProfile,
    roles: Sequence[RoleSpec],
    *,
    slurm: Slurm,
    progress: Progress,
    problems: list[str] | None = None,
) -> CheckReport | None:
    """Refuse what cannot run before anything is created or submitted; the node report, if checked. With
    ``problems`` (a dry run, a review), the engine's launch problems are listed there instead of raised."""
    if options.kind not in KINDS:
        raise PreflightError(f"unknown run kind {options.kind!r}")
    if options.concurrency < 1 or options.resolved_requests() < 1:
        raise PreflightError("requests and concurrency must be at least 1")
    if config.kv_cross_layer_blocks == "yes" and not engine.cross_layer_blocks:
        why = engine.cross_layer_blocks_why
        raise PreflightError(f"KV_CROSS_LAYER_BLOCKS=yes: engine {engine.name} cannot ({why})")
    if options.recipe is not None:
        resources = resource_problems(options.recipe, engine.needs_gpus(), model.gpus_per_worker)
        if resources:
            raise PreflightError(f"recipe {options.recipe.source}: " + "; ".join(resources))
    python = config.python_venv / "bin" / "python"
    runtime = get_runtime(config.runtime)
    if not runtime.in_image and not python.exists():
        raise PreflightError(f"PYTHON_VENV {config.python_venv} has no bin/python (jobs run with it)")
    if not runtime.in_image:  # the workers run from the engine's venv on the node
        module = engine.dynamo_module
        venv = engine.venv(config.python_venv, config.project_dir)
        if not any(venv.glob(f"lib/python3*/site-packages/dynamo/{module}/__main__.py")):
            raise PreflightError(
                f"{venv} has no dynamo.{module} (install ai-dynamo==1.3.0.post1 there; jobs run with "
                f"that venv{'; scripts/bootstrap.sh makes it' if venv != config.python_venv else ''})"
            )
    if model.build_digest is not None:
        try:  # built on the shared filesystem before anything is submitted; its digest checked
            builder = smollm2.build if model.builder == "smollm2" else tinymodel.build
            builder(model_path(config, model), model.build_digest)
        except (tinymodel.TinyModelError, OSError, RuntimeError) as exc:
            raise PreflightError(f"model {model.name}: {exc}") from None
    accuracy = options.recipe.accuracy if options.recipe is not None else None
    if accuracy is not None:
        try:  # the task's pinned data fetched and checked (or the recipe's own file read) before any job
            task = get_task(accuracy.task)
            task.load(Path(accuracy.data) if accuracy.data else None, config.project_dir)
        except KeyError as exc:
            raise PreflightError(f"accuracy: {exc.args[0]}") from None
        except datasets.DatasetError as exc:
            raise PreflightError(f"accuracy: {exc}") from None
    if runtime.in_image:
        try:
            images = engine.images(options.kind, config.dynamo_atom_image, config.nixl_image)
        except EngineError as exc:
            raise PreflightError(str(exc)) from None
        if not images:
            raise PreflightError(f"RUNTIME={config.runtime} needs DYNAMO_ATOM_IMAGE")
    launch = engine.launch_problems(options.kind, [r.node for r in roles], config.ucx_net_devices_for)
    if launch and problems is None:
        raise PreflightError("; ".join(launch))
    if problems is not None:
        problems += launch
    if engine.needs_gpus() and model.gpus_per_worker > config.gpus_per_node:
        raise PreflightError(
            f"model profile {model.name} needs {model.gpus_per_worker} GPUs per worker; "
            f"GPUS_PER_NODE is {config.gpus_per_node}"
        )
    nodes = list(dict.fromkeys(r.node for r in roles))
    cluster_checks(config, nodes, slurm=slurm, need_etcd=config.etcd_endpoint is not None)
    if config.etcd_endpoint is not None:
        EtcdClient(etcd_access(config)).version()
    if not options.node_check:
        return None
    try:
        with progress.heartbeat(f"nodes.check on {', '.join(nodes)}"):
            report = check_nodes(
                config,
                nodes,
                engine=engine.name,
                kind=options.kind,
                slurm=slurm,
                allocation=options.allocation,
            )
    except NodeJobError as exc:
        raise PreflightError(f"node check could not run: {exc}") from exc
    report.require_ok()
    return report
