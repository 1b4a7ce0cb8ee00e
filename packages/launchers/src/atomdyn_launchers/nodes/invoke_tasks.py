"""The invoke collection ``nodes``: ``invoke nodes.prepare | nodes.check | nodes.bench``."""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_launchers.nodes.strategies import DEFAULT_STRATEGY, STRATEGIES
from atomdyn_launchers.slurm.flags import ALLOCATION_HELP

if TYPE_CHECKING:  # the node jobs are imported when a task runs: every `invoke` call loads this module
    from atomdyn_launchers.config.cluster import ClusterConfig
    from atomdyn_launchers.nodes.prepare import PrepareReport, PrepareSpec

_HELP = {
    "config": "cluster.env to use (default: $ATOMDYN_CLUSTER_ENV, else the local cluster)",
    "nodes": "comma-separated nodes (default: PRIMARY_NODE, PREFILL_NODE, DECODE_NODE)",
    "image": "an image to prepare/check (repeatable; default: DYNAMO_ATOM_IMAGE and NIXL_IMAGE)",
}


def _config(path: str | None) -> ClusterConfig:
    from atomdyn_launchers.config.cluster import ClusterConfigError, resolve_cluster_config

    try:
        return resolve_cluster_config(Path(path) if path else None)
    except ClusterConfigError as exc:
        raise Exit(f"error: {exc}", code=2) from exc


def _nodes(config: ClusterConfig, nodes: str) -> list[str]:
    from atomdyn_launchers.nodes.prepare import default_nodes

    return [n.strip() for n in nodes.split(",") if n.strip()] if nodes else default_nodes(config)


def _spec(
    config: ClusterConfig, image: Sequence[str], rehearse: bool, build_args: str, shim_wheel: str
) -> PrepareSpec:
    from atomdyn_launchers.job.node_prepare import NODE, PYTHON
    from atomdyn_launchers.nodes import rehearsal as recipe
    from atomdyn_launchers.nodes.prepare import PrepareError, PrepareSpec

    wheel = Path(shim_wheel) if shim_wheel else None
    if rehearse:
        return recipe.rehearsal_spec(config, shim_wheel=wheel)
    tags = tuple(image) or tuple(i for i in (config.dynamo_atom_image, config.nixl_image) if i)
    # Building on a node runs the image builder there, against that node's daemon ($DOCKER_HOST), with a
    # work directory of its own: nodes building at once must not share staging directories.
    workdir = str(config.project_dir / "build" / "images" / "nodes" / NODE)
    try:
        extra = shlex.split(build_args)  # a list for the node's argv; no shell ever reads it
    except ValueError as exc:
        raise Exit(f"error: --build-args {build_args!r}: {exc}", code=2) from None
    step = (PYTHON, "-m", "atomdyn_images.cli", "build", "--workdir", workdir, *extra)
    try:
        return PrepareSpec(images=tags, build_steps=(step,), shim_wheel=wheel)
    except PrepareError as exc:
        raise Exit(f"error: {exc} (or pass --rehearsal)", code=2) from exc


@task(
    iterable=["image"],
    help={
        **_HELP,
        "rehearsal": "the rehearsal's images: the stand-in base and a small image built on it",
        "strategy": f"load (save once to SHARED_DIR/images, verify, docker load) or build on each node "
        f"(default {DEFAULT_STRATEGY}, the faster in `invoke nodes.bench`)",
        "build_args": "arguments for `atomdyn-images build` on the nodes, split like a shell would split "
        "them but never run by one (e.g. '--atom-variant rocm7.1 ...'; default: none)",
        "shim_wheel": "dmabuf-shim wheel to install (hash-checked) into SHARED_DIR/dmabuf-shim and check "
        "(default: none)",
        "json_out": "also write the report as JSON to this file (default: none)",
    },
)
def prepare_task(
    c: Context,
    config: str | None = None,
    strategy: str = DEFAULT_STRATEGY,
    image: list[str] | None = None,
    rehearsal: bool = False,
    build_args: str = "",
    shim_wheel: str = "",
    nodes: str = "",
    json_out: str = "",
) -> None:
    """Make the pinned images present in every node's Docker cache (and the dma-buf helper); idempotent."""
    from atomdyn_core.atomic import atomic_write_json
    from atomdyn_launchers.nodes import jobs
    from atomdyn_launchers.nodes.prepare import PrepareError, prepare
    from atomdyn_launchers.progress import Progress
    from atomdyn_launchers.slurm.client import SlurmError

    if strategy not in STRATEGIES:
        raise Exit(f"error: --strategy must be one of {', '.join(STRATEGIES)}", code=2)
    cfg = _config(config)
    spec = _spec(cfg, image or [], rehearsal, build_args, shim_wheel)
    try:
        targets = _nodes(cfg, nodes)
        # Builds and archive loads take minutes: a line every 15 s says the wait is alive (stderr).
        with Progress().heartbeat(f"nodes.prepare ({strategy}) on {', '.join(targets or ['every node'])}"):
            report = prepare(cfg, spec, strategy=strategy, nodes=targets, log=print)
    except (PrepareError, SlurmError, jobs.NodeJobError) as exc:
        raise Exit(f"FAIL: {exc}", code=1) from exc
    print(report.table())
    if json_out:
        atomic_write_json(
            Path(json_out), {"strategy": report.strategy, "seconds": report.seconds, "nodes": report.nodes}
        )


@task(
    iterable=["image"],
    help={
        **_HELP,
        "engine": "engine profile whose needs decide what is checked (default: ENGINE_PROFILE)",
        "kind": "agg or disagg: which configured image the run would use (default agg)",
        "json_out": "also write the report as JSON to this file, for evidence (default: none)",
        "allocation": ALLOCATION_HELP,
    },
)
def check_task(
    c: Context,
    config: str | None = None,
    engine: str = "",
    kind: str = "agg",
    image: list[str] | None = None,
    nodes: str = "",
    json_out: str = "",
    allocation: str | None = None,
) -> None:
    """Per-node preflight: devices, RDMA ports and GIDs, advertised address, Docker, image, shared dir, model.
    Inside an allocation (``--allocation``, or the salloc shell's), each node's check is a step of it."""
    from atomdyn_core.atomic import atomic_write_json
    from atomdyn_launchers.config.cluster import PreflightError
    from atomdyn_launchers.nodes import check as node_check
    from atomdyn_launchers.nodes import jobs
    from atomdyn_launchers.profiles.models import ProfileError
    from atomdyn_launchers.progress import Progress
    from atomdyn_launchers.slurm.client import (
        AllocationFlagError,
        Slurm,
        SlurmError,
        held_allocation,
        parse_allocation,
    )

    try:
        job, detected = parse_allocation(allocation, os.environ)
    except AllocationFlagError as exc:
        raise Exit(f"error: {exc}", code=2) from None
    cfg = _config(config)
    try:
        targets = _nodes(cfg, nodes)
        if job is not None:  # before anything starts: RUNNING, and holding every node checked
            held_allocation(Slurm(cfg), job, targets, detected=detected)
        with Progress().heartbeat(f"nodes.check on {', '.join(targets)}"):
            report = node_check.check_nodes(
                cfg, targets, engine=engine or None, image_tags=image or None, kind=kind, allocation=job
            )
    except (ProfileError, PreflightError) as exc:
        raise Exit(f"error: {exc}", code=2) from None
    except (SlurmError, jobs.NodeJobError) as exc:
        raise Exit(f"FAIL: {exc}", code=1) from exc
    print(report.table())
    if json_out:
        atomic_write_json(Path(json_out), report.to_json())
    if not report.ok:
        raise Exit(code=1)


def wipe(config: ClusterConfig, nodes: Sequence[str], tags: Sequence[str]) -> None:
    """Empty each node's image cache of ``tags`` and the build cache (the bench starts from nothing); also the
    runtime's own image store where it has one besides docker's (``Runtime.store_cli``, reached from the submit
    host)."""
    from atomdyn_launchers.job import images
    from atomdyn_launchers.nodes import jobs
    from atomdyn_launchers.runtimes import get_runtime

    for node in nodes:
        host = jobs.docker_host(config, node)
        docker = images.DockerCLI(host)
        for tag in tags:
            if docker.image_id(tag):
                docker.run("rmi", "-f", tag)
        docker.run("image", "prune", "-af")
        docker.run("builder", "prune", "-af")
        store = get_runtime(config.runtime).store_cli(config, node, host)
        if store is not None and store.name != docker.name:  # the runtime's own store, when not docker's
            for tag in tags:
                if store.image_id(tag):
                    store.run("rmi", "-f", tag)


@task(
    help={
        "config": _HELP["config"],
        "nodes": _HELP["nodes"],
        "runs": "measurements of each kind (default 3; medians are compared)",
        "shim_wheel": "also install and check this dmabuf-shim wheel in each timed prepare (default: none)",
    }
)
def bench(
    c: Context, config: str | None = None, nodes: str = "", runs: int = 3, shim_wheel: str = ""
) -> None:
    """Time preparing the nodes from empty caches: building on each node vs loading the saved archive.

    Needs per-node Docker daemons the submit host can reach (`invoke cluster.up --docker`): it empties the
    nodes' caches between measurements."""
    import statistics

    from atomdyn_launchers.job import images
    from atomdyn_launchers.nodes import jobs
    from atomdyn_launchers.nodes import rehearsal as recipe
    from atomdyn_launchers.nodes.prepare import PrepareError, archive_dir, prepare
    from atomdyn_launchers.slurm.client import SlurmError

    cfg = _config(config)
    if not cfg.docker_host:
        raise Exit("error: nodes.bench needs per-node docker daemons (`invoke cluster.up --docker`)", code=2)
    node_list = _nodes(cfg, nodes)
    spec = recipe.rehearsal_spec(cfg, shim_wheel=Path(shim_wheel) if shim_wheel else None)
    figures: dict[str, list[float]] = {}

    def timed(name: str, strategy: str, empty: bool, fresh_archive: bool) -> PrepareReport:
        if empty:
            wipe(cfg, node_list, spec.images)
        if fresh_archive:
            for path in archive_dir(cfg).glob("images-*.tar"):
                path.unlink()
            (archive_dir(cfg) / images.MANIFEST_NAME).unlink(missing_ok=True)
        start = time.monotonic()
        report = prepare(cfg, spec, strategy=strategy, nodes=node_list)
        figures.setdefault(name, []).append(time.monotonic() - start)
        if report.saved:
            figures.setdefault("(one-off build + save on one node)", []).append(
                float(report.saved["seconds"])
            )
        return report

    try:
        for i in range(int(runs)):
            timed(BUILD, "build", True, True)
            timed("load, archive saved first", "load", True, True)
            timed(LOAD, "load", True, False)
            timed("second prepare (verify only)", "load", False, False)
            print(
                f"run {i + 1}/{runs}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in figures.items()),
                flush=True,
            )
    except (PrepareError, SlurmError, jobs.NodeJobError, images.ImageError) as exc:
        raise Exit(f"FAIL: {exc}", code=1) from exc
    medians = {name: statistics.median(values) for name, values in figures.items()}
    print(
        f"\npreparing {len(node_list)} nodes from empty caches ({', '.join(spec.images)}), median of {runs}:"
    )
    for name, values in figures.items():
        print(f"  {name:<36} {medians[name]:6.2f} s  (min {min(values):.2f}, max {max(values):.2f})")
    faster = "load" if medians[LOAD] < medians[BUILD] else "build"
    print(f"faster: {faster}; default strategy: {DEFAULT_STRATEGY}")
    print(json.dumps({k: round(v, 2) for k, v in medians.items()}))


BUILD = "build on each node"
LOAD = "load the saved archive"


ns = Collection("nodes")
ns.add_task(prepare_task, name="prepare")
ns.add_task(check_task, name="check")
ns.add_task(bench)

__all__ = ["ns"]
