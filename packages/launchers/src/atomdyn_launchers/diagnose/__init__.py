"""Why a run failed: a catalog of known failure signatures (catalog.py) matched against a run directory or any
log (scan.py), the findings ranked with their cause, fix and the command that reruns the failed step
(``invoke diagnose``). It reads only files; every layer that ends a run (the record stage, the certify ladder,
the evidence) calls it."""
