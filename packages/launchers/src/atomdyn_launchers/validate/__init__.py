"""The in-image validator (``atomdyn-validate``, shipped by the image builder) run as a Slurm job: ``invoke validate.gpu``."""
