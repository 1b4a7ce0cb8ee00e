"""The Slurm client: sbatch, scontrol, sacct, squeue, sinfo and scancel against the configured cluster."""
