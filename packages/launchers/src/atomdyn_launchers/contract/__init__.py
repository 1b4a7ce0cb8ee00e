"""What jobs, launcher and evidence share, standard library only (and ``atomdyn_core``, itself standard library
only): run kinds, the run record, the gates an engine expects, ports, lease timing, what "ready" means, and the
one way HTTP is sent."""
