"""Moved to :mod:`atomdyn_launchers.job.readiness`; kept for one release so a job queued before an upgrade
still finds ``python -m atomdyn_launchers.readiness register``."""

import sys

from atomdyn_launchers.job.readiness import main

if __name__ == "__main__":
    sys.exit(main())
