"""Where a role's processes run: the registry of runtimes, one module each, and the one place where a cluster
configuration becomes a runtime object (:func:`runtime_for`).

A runtime wraps an engine's command lines; it knows nothing about engines. What differs per GPU vendor (which
devices a container gets, which variable selects GPUs) is data the engine hands it
(:class:`~atomdyn_launchers.runtimes.devices.DeviceAccess`). ``RUNTIME`` in cluster.env takes the names of
:data:`RUNTIMES`, as ``ENGINE_PROFILE`` takes the engine registry's. A new runtime is a module here and a row
below; the nodes, the checks and the validation ask it (:class:`~atomdyn_launchers.runtimes.base.Runtime`),
never its name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from atomdyn_launchers.runtimes.base import Runtime, RuntimeSpec
from atomdyn_launchers.runtimes.docker import DockerRuntime
from atomdyn_launchers.runtimes.podman import PodmanRuntime
from atomdyn_launchers.runtimes.pyxis import PyxisRuntime
from atomdyn_launchers.runtimes.venv import VenvRuntime

if TYPE_CHECKING:
    from atomdyn_launchers.config.cluster import ClusterConfig

# The registry: RUNTIME's choices, in the order cluster.env's documentation lists them.
RUNTIMES: Mapping[str, type[Runtime]] = {
    runtime.name: runtime for runtime in (VenvRuntime, DockerRuntime, PodmanRuntime, PyxisRuntime)
}
RUNTIME_NAMES: tuple[str, ...] = tuple(RUNTIMES)
# What runs an image where the configured runtime runs none (validate.gpu on a cluster of RUNTIME=venv).
IMAGE_FALLBACK: type[Runtime] = DockerRuntime


def get_runtime(name: str) -> type[Runtime]:
    """The runtime ``name`` (RUNTIME in cluster.env); a ValueError names the known ones."""
    try:
        return RUNTIMES[name]
    except KeyError:
        raise ValueError(f"unknown runtime {name!r}; known: {', '.join(RUNTIME_NAMES)}") from None


def image_runtime(name: str) -> type[Runtime]:
    """The runtime that runs the image for a cluster of runtime ``name``: its own, or IMAGE_FALLBACK."""
    runtime = get_runtime(name)
    return runtime if runtime.in_image else IMAGE_FALLBACK


def runtime_for(
    config: ClusterConfig,
    *,
    image: str = "",
    venv: Path = Path(),
    container_prefix: str = "",
    mounts: Sequence[str] = (),
    docker: str = "docker",
    lock_memory: bool = True,
    in_image: bool = False,
) -> Runtime:
    """The runtime object of ``config``'s RUNTIME: ``venv`` for the venv runtime, ``image`` (a tag) for those
    that run one, named after ``container_prefix`` and mounting ``mounts``. ``in_image``: a runtime that runs
    the image even where RUNTIME runs none (:func:`image_runtime`)."""
    kind = image_runtime(config.runtime) if in_image else get_runtime(config.runtime)
    spec = RuntimeSpec(image, venv, container_prefix, tuple(mounts), docker, lock_memory)
    return kind.build(config, spec)


__all__ = [
    "IMAGE_FALLBACK",
    "RUNTIMES",
    "RUNTIME_NAMES",
    "DockerRuntime",
    "PodmanRuntime",
    "PyxisRuntime",
    "Runtime",
    "RuntimeSpec",
    "VenvRuntime",
    "get_runtime",
    "image_runtime",
    "runtime_for",
]
