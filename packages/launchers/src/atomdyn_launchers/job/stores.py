"""Where a runtime's images live on the nodes, as the node side sees it: the registry of image stores.

A runtime names its store (``Runtime.image_store``, passed to node jobs in their spec as ``node_facts()``,
since this side may not import the runtimes' registry). The node check, the node prepare and ``nodes.prepare``
ask the store, never the runtime's name:

========  =====================================================================================================
docker    each node's Docker daemon (``DOCKER_HOST``); the venv runtime's too, for images given explicitly
          (:mod:`atomdyn_launchers.job.image_store`)
podman    each node's podman storage (``CONTAINERS_STORAGE_CONF``), daemonless; loaded from Docker's archive
          (:mod:`atomdyn_launchers.job.podman`)
squashfs  one enroot squashfs per image on the shared filesystem, imported once; run by pyxis's ``srun``
          (:mod:`atomdyn_launchers.job.squashfs`)
========  =====================================================================================================

A runtime whose images live in a new kind of place adds a class answering
:class:`~atomdyn_launchers.job.image_store.NodeStore` in a module of ``job/`` (standard library only: the node's Python runs it) and a row in :data:`STORES`; one that uses an existing
store names it and adds nothing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from atomdyn_launchers.job import images
from atomdyn_launchers.job.image_store import DaemonStore, NodeStore
from atomdyn_launchers.job.podman import PodmanStore
from atomdyn_launchers.job.squashfs import SquashfsStore

# The registry: a runtime's ``image_store`` names a row.
STORES: Mapping[str, type[NodeStore]] = {
    store.name: store for store in (DaemonStore, PodmanStore, SquashfsStore)
}


def store_for(facts: Mapping[str, Any], docker_host: str, images_dir: str = "") -> NodeStore:
    """The store a node job works on, as the runtime's node facts (in the job's spec) name it."""
    name = str(facts.get("image_store") or DaemonStore.name)
    try:
        return STORES[name](docker_host, images_dir)
    except KeyError:
        raise images.ImageError(f"unknown image store {name!r}; known: {', '.join(STORES)}") from None


__all__ = ["STORES", "NodeStore", "store_for"]
