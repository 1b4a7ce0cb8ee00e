"""The invoke collection ``validate``: ``invoke validate.gpu``, ``invoke validate.mori``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_launchers.slurm.flags import ALLOCATION_HELP

if TYPE_CHECKING:  # the validation is imported when a task runs: every `invoke` call loads this module
    from atomdyn_launchers.run.options import LaunchOptions


@task(
    help={
        "config": "cluster.env (default: $ATOMDYN_CLUSTER_ENV, else the local cluster)",
        "image": "image to validate (default: DYNAMO_ATOM_IMAGE from the cluster config)",
        "node": "node to run on (default: PRIMARY_NODE)",
        "docker_host": "DOCKER_HOST for the job (e.g. unix:///path/docker.sock), when not the node's default",
        "timeout": "seconds to wait for the job",
        "allocation": ALLOCATION_HELP,
        "recipe": "the run recipe whose workers' command lines the validator parses in the image (engine, model, "
        "router mode; default: the config's ENGINE_PROFILE and its default model)",
        "engine": "engine profile of the run to validate for (default: the recipe's, else ENGINE_PROFILE)",
        "model": "model profile of the run to validate for (default: the recipe's, else the engine's)",
    }
)
def gpu(
    c: Context,
    config: str = "",
    image: str = "",
    node: str = "",
    docker_host: str = "",
    timeout: int = 900,
    allocation: str | None = None,
    recipe: str | None = None,
    engine: str | None = None,
    model: str | None = None,
) -> None:
    """Run atomdyn-validate in the image as one Slurm job (inside an allocation, ``--allocation`` or the salloc
    shell's, one step of it), with the workers' command lines a run would write; print PASS/FAIL per check;
    exit 1 on any FAIL."""
    from atomdyn_launchers.config.cluster import ClusterConfigError, PreflightError, resolve_cluster_config
    from atomdyn_launchers.config.recipes import RecipeError
    from atomdyn_launchers.profiles.models import ProfileError
    from atomdyn_launchers.progress import Progress
    from atomdyn_launchers.run.options import OptionError
    from atomdyn_launchers.slurm.client import (
        AllocationFlagError,
        Slurm,
        SlurmError,
        held_allocation,
        parse_allocation,
    )
    from atomdyn_launchers.validate.gpu import run_gpu_validation

    try:
        job, detected = parse_allocation(allocation, os.environ)
    except AllocationFlagError as exc:
        raise Exit(f"error: {exc}", code=2) from None
    try:
        options = run_options(recipe, engine, model)
    except (OptionError, RecipeError) as exc:
        raise Exit(f"error: {exc}", code=2) from None
    try:
        cfg = resolve_cluster_config(Path(config) if config else None)
        node = node or cfg.primary_node
        if job is not None:  # before the job is written: RUNNING and holding the node (with the opt-out hint)
            held_allocation(Slurm(cfg), job, [node], detected=detected)
        with Progress().heartbeat(f"validate.gpu on {node}"):  # a line every 15 s (stderr)
            result = run_gpu_validation(
                cfg,
                image=image,
                node=node,
                docker_host=docker_host,
                timeout_s=timeout,
                allocation=job,
                options=options,
            )
    except (ClusterConfigError, PreflightError, ProfileError, SlurmError, TimeoutError) as exc:
        raise Exit(f"error: {exc}", code=2) from exc
    print("\n".join(result.lines()))
    print(f"report: {result.run_dir / 'validate.json'}")
    if not result.ok:
        raise Exit(code=1)


def run_options(recipe: str | None, engine: str | None, model: str | None) -> LaunchOptions:
    """The run the validation stands for: the recipe's (of either kind), with --engine and --model over it."""
    from atomdyn_launchers.config.recipes import load_recipe
    from atomdyn_launchers.run.options import Flags, LaunchOptions, resolve

    flags = Flags(engine=engine, model=model)
    if recipe is None:
        return LaunchOptions(kind="disagg", engine=engine, model=model)
    loaded = load_recipe(Path(recipe))
    return resolve(loaded.kind, None, flags, loaded)


@task(
    help={
        "config": "cluster.env (default: $ATOMDYN_CLUSTER_ENV, else the local cluster)",
        "image": "image to run it in (default: DYNAMO_ATOM_IMAGE from the cluster config)",
        "node": "node to run on (default: PRIMARY_NODE)",
        "docker_host": "DOCKER_HOST for the job (e.g. unix:///path/docker.sock), when not the node's default",
        "timeout": "seconds to wait for the job",
    }
)
def mori(
    c: Context, config: str = "", image: str = "", node: str = "", docker_host: str = "", timeout: int = 600
) -> None:
    """Run mori-repro (the dma-buf offset reproducer, docs/mori-path.md) in the image on one node as one Slurm job,
    on the node's first RDMA device of UCX_NET_DEVICES; print its verdict; exit 1 unless the exporter's offset
    landed correctly (fixed-behaviour-confirmed, or bug-reproduced: offset 0 misplaced it, the fix did not)."""
    from atomdyn_launchers.config.cluster import ClusterConfigError, PreflightError, resolve_cluster_config
    from atomdyn_launchers.profiles.models import ProfileError
    from atomdyn_launchers.progress import Progress
    from atomdyn_launchers.slurm.client import SlurmError
    from atomdyn_launchers.validate.mori import REPORT, run_mori_repro

    try:
        cfg = resolve_cluster_config(Path(config) if config else None)
        node = node or cfg.primary_node
        with Progress().heartbeat(f"validate.mori on {node}"):
            result = run_mori_repro(cfg, image=image, node=node, docker_host=docker_host, timeout_s=timeout)
    except (ClusterConfigError, PreflightError, ProfileError, SlurmError, TimeoutError) as exc:
        raise Exit(f"error: {exc}", code=2) from exc
    job = result.job
    print(f"job {job.job_id} on {job.nodes or '?'}: {job.state} exit {job.exit_code}")
    print(("PASS" if result.ok else "FAIL") + f" mori-repro: {result.detail()}")
    print(f"report: {result.run_dir / REPORT}")
    if not result.ok:
        raise Exit(code=1)


ns = Collection("validate")
ns.add_task(gpu)
ns.add_task(mori)

__all__ = ["ns"]
