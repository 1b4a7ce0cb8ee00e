"""Everything that runs inside a Slurm job, on the node: the readiness helper, the RDMA check, the node-side
halves of ``nodes.check`` and ``nodes.prepare``, and the run-owned etcd's server. It imports only
:mod:`..contract` and :mod:`..etcd` (and ``atomdyn_core``): a job runs it with the node's Python."""
