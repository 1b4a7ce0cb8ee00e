"""``nodes.prepare``: the pinned images in every node's Docker cache, and the dma-buf helper where workers load it.

Two strategies (``load`` is the default: see the README's performance note for the measurement):

- ``build``: one job per node runs the build steps there (the PoC's way): every node builds on its own.
- ``load``: the images are built once (on the first node, only when no archive of exactly these images
  exists), ``docker save``d to ``SHARED_DIR/images`` with a manifest (sha256, size, image ids); then one job per
  node verifies the archive against the manifest and ``docker load``s a verified private copy.

Idempotent: a node whose daemon already holds every image (with the manifest's ids, for ``load``) is
verified and left alone. The helper: the dmabuf-shim wheel, hash-checked against the sha256 taken on the
submit host, is installed once into ``SHARED_DIR/dmabuf-shim/<sha>`` (``pip --require-hashes --target``) and
``dmabuf-shim env --check`` runs on every node with it.

``python -m atomdyn_launchers.nodes.prepare --spec ... --node ...`` is the node-side half (run by the jobs).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json, atomic_write_text
from atomdyn_core.fetch import sha256_file
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.nodes import images, jobs
from atomdyn_launchers.slurm.client import Slurm

STRATEGIES = ("load", "build")
DEFAULT_STRATEGY = "load"
PYTHON = "{python}"  # in a build step: the node's Python (the job's interpreter)
NODE = "{node}"  # in a build step argument: the node's name (e.g. a per-node work directory)
MODULE = "atomdyn_launchers.nodes.prepare"


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
    return config.shared_dir / "images"


SHIM_CURRENT = "current"


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
        },
    )

    def run(label: str, mode: str, on: Sequence[str]) -> dict[str, dict[str, Any]]:
        runs = jobs.submit_and_wait(
            config,
            on,
            work=work,
            label=label,
            module=MODULE,
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
                "error": f"job {node_run.job_id} ended {node_run.state} without a result; "
                f"its output:\n{node_run.output_tail}",
            }
        return results

    saved: dict[str, Any] | None = None
    if strategy == "load" and images.manifest_covers(archive_dir(config), spec.images) is None:
        log(f"no archive of {', '.join(spec.images)} yet: building on {nodes[0]} and saving it")
        saved = run("save", "save", nodes[:1])[nodes[0]]
        if not saved.get("ok"):
            raise PrepareError(f"saving the image archive on {nodes[0]} failed: {saved.get('error')}")
    results = run(strategy, strategy, nodes)
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


# --- node side ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _build(
    spec: dict[str, Any], node: str, docker: images.DockerCLI, actions: list[str], log_path: Path
) -> None:
    tags: list[str] = spec["images"]
    if all(docker.image_ids(tags).values()):
        actions.append("images present: verified, not rebuilt")
        return
    env = {**os.environ, "DOCKER_HOST": docker.host}
    with log_path.open("a") as log:
        for step in spec["build_steps"]:
            argv = [sys.executable if a == PYTHON else a.replace(NODE, node) for a in step]
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            done = subprocess.run(
                argv, cwd=spec["project_dir"], env=env, stdout=log, stderr=subprocess.STDOUT, check=False
            )
            if done.returncode != 0:
                tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-8:])
                raise images.ImageError(f"build step {argv[:4]} exited {done.returncode}:\n{tail}")
    missing = [t for t, i in docker.image_ids(tags).items() if i is None]
    if missing:
        raise images.ImageError(f"the build steps ran but {', '.join(missing)} is not present")
    actions.append(f"built {', '.join(tags)}")


def _load(spec: dict[str, Any], docker: images.DockerCLI, actions: list[str]) -> None:
    manifest = images.read_manifest(Path(spec["archive_dir"]))
    if set(manifest.images) != set(spec["images"]):
        raise images.ImageError(
            f"the archive manifest holds {sorted(manifest.images)}, not {sorted(spec['images'])}"
        )
    ids = docker.image_ids(list(manifest.images))
    if all(ids[t] == i for t, i in manifest.images.items()):
        actions.append("images present with the manifest's ids: verified, not reloaded")
        return
    images.load_verified(docker, manifest)
    actions.append(f"loaded {manifest.archive.name} (sha256 verified, ids checked)")


# The action a rehearsal node (no GPU, by design) reports for the helper check.
REHEARSAL_SHIM_ACTION = "dmabuf-shim env --check --no-gpu-runtime ok (rehearsal node)"


def install_shim(shim: dict[str, Any], node: str, actions: list[str]) -> dict[str, Any]:
    wheel, sha, target = Path(shim["wheel"]), shim["sha256"], Path(shim["target"])
    marker = target / ".atomdyn-installed.json"
    with _flock(target.parent / ".install.lock"):
        if marker.is_file():
            actions.append(f"dmabuf-shim present in {target}")
        else:
            actual = sha256_file(wheel)
            if actual != sha:
                raise images.ImageError(
                    f"dmabuf-shim wheel {wheel} sha256 {actual} differs from the one taken at submission "
                    f"({sha}): refusing to install it"
                )
            staging = target.parent / f".staging-{node}-{os.getpid()}"
            requirements = target.parent / f".requirements-{node}-{os.getpid()}.txt"
            atomic_write_text(requirements, f"dmabuf-shim @ {wheel.as_uri()} --hash=sha256:{sha}\n")
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--require-hashes",
                     "--disable-pip-version-check", "--target", str(staging), "-r", str(requirements)],
                    capture_output=True, text=True, check=False,
                )  # fmt: skip
                if done.returncode != 0:
                    raise images.ImageError(
                        f"pip could not install the dmabuf-shim wheel: {done.stderr[-600:]}"
                    )
                atomic_write_json(staging / marker.name, {"wheel": wheel.name, "sha256": sha, "by": node})
                staging.replace(target)
            finally:
                requirements.unlink(missing_ok=True)
                if staging.exists():
                    subprocess.run(["rm", "-rf", str(staging)], check=False)
            actions.append(f"installed dmabuf-shim into {target}")
        _point_current(target)
    env = {**os.environ, "PYTHONPATH": str(target)}
    required = shim.get("gpu_runtime_required", True)
    check = subprocess.run(
        [sys.executable, "-m", "dmabuf_shim", "env", "--check", *([] if required else ["--no-gpu-runtime"])],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    output = (check.stdout + check.stderr).strip()
    if check.returncode != 0:
        raise images.ImageError(f"dmabuf-shim env --check failed on {node}: {output[-600:]}")
    actions.append("dmabuf-shim env --check ok" if required else REHEARSAL_SHIM_ACTION)
    return {"target": str(target), "check": output.splitlines()}


def _point_current(target: Path) -> None:
    """``<shim dir>/current`` names the prepared install the workers load (a relative link, swapped atomically)."""
    current = target.parent / SHIM_CURRENT
    if current.is_symlink() and os.readlink(current) == target.name:
        return
    staging = target.parent / f".current-{os.getpid()}"
    staging.unlink(missing_ok=True)
    staging.symlink_to(target.name)
    staging.replace(current)


def prepare_node(
    spec: dict[str, Any], node: str, mode: str, docker_host: str, log_path: Path
) -> dict[str, Any]:
    start = time.monotonic()
    actions: list[str] = []
    result: dict[str, Any] = {"node": node, "mode": mode, "docker_host": docker_host, "actions": actions}
    docker = images.DockerCLI(docker_host)
    try:
        result["docker_server"] = docker.version()
        if mode in ("build", "save"):
            _build(spec, node, docker, actions, log_path)
        if mode == "save":
            manifest = images.save_archive(docker, spec["images"], Path(spec["archive_dir"]), node)
            actions.append(f"saved {manifest.archive.name} ({manifest.size} bytes)")
        if mode == "load":
            _load(spec, docker, actions)
        if spec.get("shim") and mode != "save":
            result["shim"] = install_shim(spec["shim"], node, actions)
        result["images"] = docker.image_ids(spec["images"])
        result.update(ok=True, error=None)
    except (images.ImageError, OSError) as exc:
        result.update(ok=False, error=str(exc))
    result["seconds"] = round(time.monotonic() - start, 3)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE, description="node side of nodes.prepare (run by its jobs)")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--mode", choices=("build", "save", "load"), required=True)
    parser.add_argument("--docker-host", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    spec = json.loads(args.spec.read_text(encoding="utf-8"))
    log_path = args.out.with_suffix(".build.log")
    result = prepare_node(spec, args.node, args.mode, args.docker_host, log_path)
    atomic_write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
