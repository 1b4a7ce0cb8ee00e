"""The images of the rehearsal: the stand-in base (``atomdyn-images standin``) and a small image built on it.

No registry is reachable in the rehearsal, so "the pinned images" are these two; building them on a node
takes the same path a real build does: the image builder, run as a command on the node
(``atomdyn-images build-context``: its docker engine, a Dockerfile, ``--network none``). The launchers never
import the image builder; a prepare job needs atomdyn-image-builder installed in the jobs' venv.
"""

from __future__ import annotations

from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.job.node_prepare import PYTHON
from atomdyn_launchers.nodes.prepare import PrepareSpec

BASE_TAG = "atomdyn-standin:rehearsal"
IMAGE_TAG = "atomdyn-rehearsal:0.1.0"
IMAGES_CLI = (PYTHON, "-m", "atomdyn_images.cli")  # `atomdyn-images` with the node's interpreter


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
    step = (*IMAGES_CLI, "build-context", str(context), "--tag", tag, "--standin-base", base)
    return PrepareSpec(
        images=(base, tag), build_steps=(step,), shim_wheel=shim_wheel, gpu_runtime_required=False
    )
