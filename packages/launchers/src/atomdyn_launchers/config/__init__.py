"""What a run is configured from: the cluster (``cluster.env``, its key table, :mod:`.cluster`), how the launchers
reach its etcd (:mod:`.etcd`), and run recipes (:mod:`.recipes`). ``python -m atomdyn_launchers.config`` prints
the example cluster.env."""
