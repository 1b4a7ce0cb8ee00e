"""The images of the rehearsal: the stand-in base (``atomdyn-images standin``) and a small image built on it.

No registry is reachable in the rehearsal, so "the pinned images" are these two; building them on a node
takes the same path a real build does (the image builder's docker engine, a Dockerfile, ``--network none``).
``python -m atomdyn_launchers.nodes.rehearsal --base TAG --tag TAG --context DIR`` is the build step a prepare
job runs on its node (needs atomdyn-image-builder in the jobs' venv).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config import ClusterConfig
from atomdyn_launchers.nodes.prepare import PYTHON, PrepareSpec

BASE_TAG = "atomdyn-standin:rehearsal"
IMAGE_TAG = "atomdyn-rehearsal:0.1.0"
MODULE = "atomdyn_launchers.nodes.rehearsal"


def dockerfile(base: str) -> str:
    return (
        f"FROM {base}\n"
        "RUN python3 -c \"import json; json.dump({'rehearsal': True}, open('/opt/atomdyn-rehearsal.json', 'w'))\"\n"
        'LABEL io.atomdyn.rehearsal="1"\n'
    )


def rehearsal_spec(
    config: ClusterConfig, *, base: str = BASE_TAG, tag: str = IMAGE_TAG, shim_wheel: Path | None = None
) -> PrepareSpec:
    """Write the small image's build context under SHARED_DIR and return what prepare needs."""
    context = config.shared_dir / "images" / "rehearsal-context"
    context.mkdir(parents=True, exist_ok=True)
    atomic_write_text(context / "Dockerfile", dockerfile(base))
    step = (PYTHON, "-m", MODULE, "--base", base, "--tag", tag, "--context", str(context))
    return PrepareSpec(images=(base, tag), build_steps=(step,), shim_wheel=shim_wheel)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE, description=__doc__)
    parser.add_argument("--base", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--context", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        from atomdyn_images.engine import Docker, DockerError
        from atomdyn_images.standin import make_standin
    except ImportError as exc:
        print(f"error: the rehearsal build needs atomdyn-image-builder in this venv ({exc})", file=sys.stderr)
        return 2
    docker = Docker(stream=lambda line: print(line, flush=True))  # DOCKER_HOST: this node's daemon
    try:
        if docker.image_id(args.base) is None:
            print(f"stand-in base {args.base}: {make_standin(docker, args.base)}", flush=True)
        built = docker.build(args.context, args.context / "Dockerfile", network="none")
        docker.tag(built.image_id, args.tag)
    except DockerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"built {args.tag}: {built.image_id} in {built.seconds:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
