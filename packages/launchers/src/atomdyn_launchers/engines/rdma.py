"""Moved to :mod:`atomdyn_launchers.job.rdma`; kept for one release so a job queued before an upgrade still
finds ``python -m atomdyn_launchers.engines.rdma``."""

import sys

from atomdyn_launchers.job.rdma import main

if __name__ == "__main__":
    sys.exit(main())
