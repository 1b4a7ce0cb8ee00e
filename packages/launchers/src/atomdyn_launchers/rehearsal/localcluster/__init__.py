"""The local two-node Slurm cluster with etcd: the embedded default cluster and the test fixture's cluster."""

from atomdyn_launchers.rehearsal.localcluster.cluster import (
    ClusterStatus,
    DownResult,
    LocalCluster,
    LocalClusterError,
    UpResult,
    missing_tools,
    prune_orphans,
)

__all__ = [
    "ClusterStatus",
    "DownResult",
    "LocalCluster",
    "LocalClusterError",
    "UpResult",
    "missing_tools",
    "prune_orphans",
]
