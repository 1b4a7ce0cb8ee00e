"""The node-side half of ``nodes.prepare`` (``python -m atomdyn_launchers.job.node_prepare --spec ... --node ...``):
build, save or load the pinned images in this node's Docker cache and install the dma-buf helper, from the spec
the submit side wrote (:mod:`atomdyn_launchers.nodes.prepare`); for a runtime whose images live on the shared
filesystem (mode ``import``), put them there once through its store (:mod:`atomdyn_launchers.job.stores`). It
runs with the node's Python."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json, atomic_write_text
from atomdyn_core.fetch import sha256_file
from atomdyn_launchers.job import images, stores

MODULE = "atomdyn_launchers.job.node_prepare"
PYTHON = "{python}"  # in a build step: the node's Python (the job's interpreter)
NODE = "{node}"  # in a build step argument: the node's name (e.g. a per-node work directory)
SHIM_CURRENT = "current"  # <shim dir>/current: the prepared install the workers load


def _build(
    spec: dict[str, Any], node: str, docker: images.DockerCLI, actions: list[str], log_path: Path
) -> None:
    tags: list[str] = spec["images"]
    if all(docker.image_ids(tags).values()):
        actions.append("images present: verified, not rebuilt")
        return
    env = docker.env()
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
    with images.exclusive(target.parent / ".install.lock"):
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
    # Images are built and saved by Docker (the builder needs BuildKit); `load` fills the runtime's store (a
    # node's podman storage, say); `import` puts them into a shared store from this node's daemon.
    store = stores.store_for(spec["runtime_facts"], docker_host, spec["archive_dir"])
    docker = store.client if mode == "load" else images.DockerCLI(docker_host)
    result["store"] = docker.name
    try:
        result["docker_server"] = docker.version()
        if mode in ("build", "save"):
            _build(spec, node, docker, actions, log_path)
        if mode == "save":
            manifest = images.save_archive(docker, spec["images"], Path(spec["archive_dir"]), node)
            actions.append(f"saved {manifest.archive.name} ({manifest.size} bytes)")
        if mode == "load":
            _load(spec, docker, actions)
        if mode == "import":

            def make_present() -> None:
                if spec.get("source") == "build":
                    _build(spec, node, docker, actions, log_path)
                else:
                    _load(spec, docker, actions)

            result[store.name] = store.prepare_shared(spec, node, make_present, actions, log_path)
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
    parser.add_argument("--mode", choices=("build", "save", "load", "import"), required=True)
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
