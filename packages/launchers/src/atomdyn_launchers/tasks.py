"""The launchers' invoke collections, assembled: what the repository's ``tasks.py`` adds to ``invoke --list``."""

from __future__ import annotations

from invoke.collection import Collection

from atomdyn_launchers.certify.tasks import certify, nixl_cross_node
from atomdyn_launchers.diagnose.tasks import diagnose
from atomdyn_launchers.evidence.invoke_tasks import ns as evidence_ns
from atomdyn_launchers.nodes.invoke_tasks import ns as nodes_ns
from atomdyn_launchers.rehearsal.tasks import disagg_bench
from atomdyn_launchers.rehearsal.tasks import ns as cluster_ns
from atomdyn_launchers.run.tasks import agg_run, disagg_run
from atomdyn_launchers.validate.invoke_tasks import ns as validate_ns

agg_ns = Collection("agg")
agg_ns.add_task(agg_run, name="run")
disagg_ns = Collection("disagg")
disagg_ns.add_task(disagg_run, name="run")
disagg_ns.add_task(disagg_bench, name="bench")

COLLECTIONS: tuple[Collection, ...] = (cluster_ns, nodes_ns, agg_ns, disagg_ns, evidence_ns, validate_ns)
# Tasks the launchers add to other packages' collections: collection name -> (task name, task).
EXTRA_TASKS = {"nixl": (("cross_node", nixl_cross_node),)}
# Tasks at the top of `invoke --list`, beside `demo`.
ROOT_TASKS = (certify, diagnose)
