"""The cross-node NIXL rung: two one-shot jobs pinned to two nodes, one ``nixl_compat.crossnode`` process each in
the P/D workers' runtime and environment, exchanging NIXL metadata through the run's etcd; judged by
:func:`~atomdyn_launchers.evidence.probe.judge_probe`. ``invoke nixl.cross_node`` runs it alone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.evidence.probe import PROBE_DIR, ProbeVerdict, judge_probe
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.record import Outcome
from atomdyn_launchers.run.submission import ProbeOptions

VERDICT_FILE = "verdict.json"


@dataclass(frozen=True)
class CrossNode:
    outcome: Outcome
    verdict: ProbeVerdict

    @property
    def passed(self) -> bool:
        return self.outcome.passed and self.verdict.passed

    @property
    def run_dir(self) -> Path:
        return self.outcome.run_dir

    def failure(self) -> str | None:
        """Why the rung failed, the probe's own diagnosis first (it names what UCX tried)."""
        if self.passed:
            return None
        return self.verdict.diagnosis or self.outcome.failure or "the probe's checks failed"


def cross_node(
    config: ClusterConfig,
    options: LaunchOptions,
    probe: ProbeOptions | None = None,
    *,
    progress: Progress | None = None,
) -> CrossNode:
    """Run the probe pair on the config's P/D nodes and judge it; the verdict is kept in nixl/verdict.json."""
    launch = Launch(config, options, progress=progress, probe=probe or ProbeOptions())
    outcome = launch.run()
    verdict = judge_probe(outcome.run_dir)
    (outcome.run_dir / PROBE_DIR).mkdir(exist_ok=True)
    atomic_write_text(
        outcome.run_dir / PROBE_DIR / VERDICT_FILE, json.dumps(verdict.to_json(), indent=2) + "\n"
    )
    return CrossNode(outcome, verdict)
