"""``nodes.prepare``: the pinned images in every node's Docker cache, and the dma-buf helper where workers load it.

Two strategies (``load`` is the default: see the README's performance note for the measurement):

- ``build``: one job per node runs the build steps there (the PoC's way): every node builds on its own.
- ``load``: the images are built once (on the first node, only when no archive of exactly these images
  exists), ``docker save``d to ``SHARED_DIR/images`` with a manifest (sha256, size, image ids); then one job per
  node verifies the archive against the manifest and ``docker load``s a verified private copy.

Images are always built and saved by Docker (the image builder needs Docker's BuildKit; DOCKER_HOST names the
daemon). ``load`` puts them into the runtime's image store (:mod:`atomdyn_launchers.job.stores`): each node's
Docker daemon, or its podman storage (RUNTIME=podman, which refuses ``build``). A store on the shared filesystem
(the squashfs files pyxis runs) is filled once, on the first node (mode ``import``): the images made present in
its daemon by the strategy (``load`` from the verified archive, saved first when the store has stale files, or
``build``), then put there, each recorded with the image id it came from, its size and sha256 (for squashfs,
``enroot import -o SHARED_DIR/images/<name>.sqsh dockerd://<tag>``, :mod:`atomdyn_launchers.job.squashfs`); a
file whose record matches (the archive manifest's image id where one is recorded) is verified and left alone,
with no import and no save.

Idempotent: a node whose daemon already holds every image (with the manifest's ids, for ``load``) is
verified and left alone. The helper: the dmabuf-shim wheel, hash-checked against the sha256 taken on the
submit host, is installed once into ``SHARED_DIR/dmabuf-shim/<sha>`` (``pip --require-hashes --target``) and
``dmabuf-shim env --check`` runs on every node with it.

The node-side half is :mod:`atomdyn_launchers.job.node_prepare`, run by the jobs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_core.fetch import sha256_file
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.job import images, node_prepare
from atomdyn_launchers.job.node_prepare import SHIM_CURRENT
from atomdyn_launchers.nodes import jobs
from atomdyn_launchers.nodes.strategies import DEFAULT_STRATEGY, STRATEGIES
from atomdyn_launchers.runtimes import get_runtime
from atomdyn_launchers.slurm.client import Slurm


class PrepareError(RuntimeError):
    """Preparation failed on at least one node; the message names each node and why."""


@dataclass(frozen=True)
class PrepareSpec:
    images: tuple[str, ...]
    build_steps: tuple[tuple[str, ...], ...]
    shim_wheel: Path | None = None
    # Real nodes need a GPU runtime for the helper to export anything; rehearsal nodes have none by design.
    gpu_runtime_required: bool = True

    def __post_init__(self) -> None:
        if not self.images:
            raise PrepareError(
                "nothing to prepare: no images named (DYNAMO_ATOM_IMAGE/NIXL_IMAGE or --image)"
            )


@dataclass
class PrepareReport:
    strategy: str
    seconds: float
    nodes: dict[str, dict[str, Any]]
    saved: dict[str, Any] | None = None  # the save step's result when an archive was written
    work: Path = field(default_factory=Path)

    @property
    def ok(self) -> bool:
        return all(r.get("ok") for r in self.nodes.values())

    def table(self) -> str:
        rows = [("node", "result", "what was done", "seconds")]
        for node, r in sorted(self.nodes.items()):
            what = "; ".join(r.get("actions", [])) or "-"
            verdict = "ok" if r.get("ok") else f"FAILED: {r.get('error')}"
            rows.append((node, verdict, what, f"{float(r.get('seconds', 0.0)):.2f}"))
        width = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = [
            "  ".join([*(c.ljust(w) for c, w in zip(row[:3], width, strict=True)), row[3]]) for row in rows
        ]
        head = f"nodes.prepare ({self.strategy}) in {self.seconds:.2f} s"
        if self.saved:
            head += (
                f"; archive saved on {self.saved.get('node')} ({'; '.join(self.saved.get('actions', []))})"
            )
        return "\n".join([head, *lines])


def default_nodes(config: ClusterConfig) -> list[str]:
    return list(dict.fromkeys([config.primary_node, config.prefill_node, config.decode_node]))


def archive_dir(config: ClusterConfig) -> Path:
    return config.images_dir


def shim_current(config: ClusterConfig) -> Path:
    """Where the workers find the helper nodes.prepare installed (absent until a prepare installed one)."""
    return config.shared_dir / "dmabuf-shim" / SHIM_CURRENT


def shim_target(config: ClusterConfig, sha256: str) -> Path:
    return config.shared_dir / "dmabuf-shim" / sha256[:16]


def prepare(
    config: ClusterConfig,
    spec: PrepareSpec,
    *,
    strategy: str = DEFAULT_STRATEGY,
    nodes: Sequence[str] | None = None,
    slurm: Slurm | None = None,
    timeout_s: float = 3600.0,
    log: Callable[[str], None] = lambda _m: None,
) -> PrepareReport:
    """Prepare ``nodes`` (default: every node the configuration names); raises PrepareError on any failure."""
    if strategy not in STRATEGIES:
        raise PrepareError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    runtime = get_runtime(config.runtime)
    problem = runtime.prepare_problem(strategy)
    if problem is not None:
        raise PrepareError(problem)
    nodes = list(nodes or default_nodes(config))
    slurm = slurm or Slurm(config)
    start = time.monotonic()
    work = jobs.work_dir(config, "prepare")
    shim: dict[str, Any] | None = None
    if spec.shim_wheel is not None:
        wheel = spec.shim_wheel.resolve()
        if not wheel.is_file():
            raise PrepareError(f"dmabuf-shim wheel {wheel} does not exist")
        sha = sha256_file(wheel)  # taken here, checked on every node before installing
        shim = {
            "wheel": str(wheel),
            "sha256": sha,
            "target": str(shim_target(config, sha)),
            "gpu_runtime_required": spec.gpu_runtime_required,
        }
    spec_path = work / "spec.json"
    atomic_write_json(
        spec_path,
        {
            "images": list(spec.images),
            "build_steps": [list(step) for step in spec.build_steps],
            "archive_dir": str(archive_dir(config)),
            "project_dir": str(config.project_dir),
            "shim": shim,
            "source": strategy,  # the import mode's way to make the images present first (a shared store)
            "runtime": config.runtime,
            # where `load` puts them, or a shared store imports them to (image_store)
            "runtime_facts": runtime.node_facts(),
        },
    )

    def run(label: str, mode: str, on: Sequence[str]) -> dict[str, dict[str, Any]]:
        runs = jobs.submit_and_wait(
            config,
            on,
            work=work,
            label=label,
            module=node_prepare.MODULE,
            args_for=lambda node, out: [
                "--spec",
                str(spec_path),
                "--node",
                node,
                "--mode",
                mode,
                "--docker-host",
                jobs.docker_host(config, node),
                "--out",
                str(out),
            ],
            timeout_s=timeout_s,
            slurm=slurm,
        )
        results: dict[str, dict[str, Any]] = {}
        for node, node_run in runs.items():
            results[node] = node_run.result or {
                "node": node,
                "ok": False,
                "actions": [],
                "error": f"{node_run.unavailable}; {jobs.NODE_UNAVAILABLE_FIX}"
                if node_run.unavailable
                else f"job {node_run.job_id} ended {node_run.state} without a result; "
                f"its output:\n{node_run.output_tail}",
            }
        return results

    saved: dict[str, Any] | None = None
    store = runtime.store()(jobs.docker_host(config, nodes[0]), str(archive_dir(config)))
    if store.shared:
        nodes = nodes[:1]  # one import into the shared filesystem serves every node
        strategy_run = "import"
        if store.stale(spec.images) and strategy == "load":
            saved = _save_if_missing(config, spec, nodes[0], run, log)
    else:
        strategy_run = strategy
        if strategy == "load":
            saved = _save_if_missing(config, spec, nodes[0], run, log)
    results = run(strategy_run, strategy_run, nodes)
    report = PrepareReport(strategy, time.monotonic() - start, results, saved, work)
    atomic_write_json(
        work / "report.json",
        {"strategy": strategy, "seconds": report.seconds, "nodes": results, "saved": saved},
    )
    failed = {n: r for n, r in results.items() if not r.get("ok")}
    if failed:
        raise PrepareError(
            "; ".join(f"node {n}: {r.get('error')}" for n, r in sorted(failed.items()))
            + f" (details in {work})"
        )
    return report


def _save_if_missing(
    config: ClusterConfig,
    spec: PrepareSpec,
    node: str,
    run: Callable[[str, str, Sequence[str]], dict[str, dict[str, Any]]],
    log: Callable[[str], None],
) -> dict[str, Any] | None:
    """The ``load`` strategy's archive: built on ``node`` and saved when no archive of exactly these images exists."""
    if images.manifest_covers(archive_dir(config), spec.images) is not None:
        return None
    log(f"no archive of {', '.join(spec.images)} yet: building on {node} and saving it")
    saved = run("save", "save", [node])[node]
    if not saved.get("ok"):
        raise PrepareError(f"saving the image archive on {node} failed: {saved.get('error')}")
    return saved
