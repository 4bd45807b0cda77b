"""The cluster view every authenticated user reads (like Slurm's `sinfo`)."""
