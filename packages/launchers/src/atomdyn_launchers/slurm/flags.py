"""What the command line says about Slurm, with nothing imported: the invoke collection shows it in every
``invoke`` call's help (`invoke --list` loads no Slurm client)."""

from __future__ import annotations

# --allocation's help, the same on every task that takes it (agg.run, disagg.run, certify, nixl.cross-node,
# nodes.check, validate.gpu); the flag itself is read by slurm.client.parse_allocation.
ALLOCATION_HELP = (
    "start every job (each role, node check, probe, run-owned etcd) as a job step (srun) of this running "
    "allocation instead of a batch job; 'none': batch jobs even inside salloc (default: the salloc shell's "
    "allocation, SLURM_JOB_ID without SLURM_STEP_ID outside a batch script; else batch jobs)"
)
