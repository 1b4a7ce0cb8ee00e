"""What the tests that run inside an existing allocation on the local cluster share: a holder job pinned to
nodes, standing for ``salloc``, and a watch on ``squeue --me`` that says which jobs came into the queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.slurm.client import Slurm


@contextmanager
def holder(config: ClusterConfig, nodes: Sequence[str], out: Path) -> Iterator[int]:
    """A job holding ``nodes`` (``sleep infinity``), as ``salloc -N<n> -w <nodes>`` would; cancelled after."""
    slurm = Slurm(config)
    args = slurm.sbatch_args(
        job_name="alloc-holder", nodelist=",".join(nodes), output=out, extra_args=[f"--nodes={len(nodes)}"]
    )
    job = int(slurm.run([*args, "--wrap", "exec sleep infinity"]).strip())
    try:
        slurm.wait_for(job, lambda i: i.state == "RUNNING", timeout=30, what="running")
        yield job
    finally:
        slurm.cancel([job])


class QueueWatch:
    """``squeue --me`` every 0.3 s in a thread while a run goes on: every job id it ever listed."""

    def __init__(self, config: ClusterConfig) -> None:
        self.slurm = Slurm(config)
        self.seen: set[int] = set()
        self.polls = 0
        self.before = self._ids()  # what an earlier test left (a cancelled job still completing)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _ids(self) -> set[int]:
        out = self.slurm.run(["squeue", "--me", "-h", "-o", "%i"])
        return {int(line) for line in out.split() if line.isdigit()}

    @property
    def new(self) -> set[int]:
        """The jobs that came into the queue while the watch ran."""
        return self.seen - self.before

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.seen |= self._ids()
            self.polls += 1
            self._stop.wait(0.3)

    def __enter__(self) -> QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
