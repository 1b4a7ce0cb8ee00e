"""The cross-node NIXL rung: first UCX's own ``ucx_info`` on both P/D nodes with the P/D workers' UCX variables
(the node check's ``ucx`` row alone, one job per node: seconds, no NIXL, no model), then two one-shot jobs pinned
to the two nodes, one ``nixl_compat.crossnode`` process each in the P/D workers' runtime and environment,
exchanging NIXL metadata through the run's etcd; judged by :func:`~atomdyn_launchers.evidence.probe.judge_probe`.
A UCX that cannot make a context or an endpoint with those variables fails the rung before the pair is
submitted, naming the variable to change. ``invoke nixl.cross_node`` runs it alone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.evidence.probe import PROBE_DIR, Check, ProbeVerdict, judge_probe
from atomdyn_launchers.job.node_check import FAIL
from atomdyn_launchers.nodes.check import CheckReport, check_nodes
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.record import Outcome

VERDICT_FILE = "verdict.json"
UCX_ROWS = ("ucx",)


@dataclass(frozen=True)
class CrossNode:
    outcome: Outcome
    verdict: ProbeVerdict
    ucx: CheckReport | None = None  # the ucx_info check on both nodes that came first

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


def ucx_first(config: ClusterConfig, options: LaunchOptions) -> CheckReport:
    """The node check's ``ucx`` row on the P/D nodes, with the P/D workers' UCX variables."""
    nodes = [config.prefill_node, config.decode_node]
    engine = get_engine(options.engine or config.engine_profile)
    if engine.kv_probe_engine:  # an engine that moves no KV: the probe runs as that engine's workers would
        engine = get_engine(engine.kv_probe_engine)
    return check_nodes(
        config, list(dict.fromkeys(nodes)), engine=engine.name, kind="disagg", rows=UCX_ROWS,
        allocation=options.allocation,
    )  # fmt: skip


def ucx_checks(report: CheckReport) -> list[Check]:
    """The ucx row of each node as checks of the rung's verdict (``ucx NODE``)."""
    checks = [
        Check(f"ucx {node}", c.status != FAIL, c.detail)
        for node, rows in sorted(report.nodes.items())
        for c in rows
    ]
    return checks + [Check(f"ucx {node}", False, why) for node, why in sorted(report.errors.items())]


def _ucx_failed(report: CheckReport) -> CrossNode:
    """The rung's result when UCX refuses the workers' variables: no pair was submitted; the evidence is the
    check's work directory (report.json, each node's output)."""
    failures = report.failures()
    diagnosis = "UCX refused the P/D workers' UCX variables (ucx_info, before the probe pair): " + " | ".join(
        f"{node}: {detail}" for node, _, detail in failures
    )
    checks = ucx_checks(report)
    work = report.work_dir or Path(".")
    outcome = Outcome("", work, False, diagnosis)
    return CrossNode(outcome, ProbeVerdict(False, checks, {}, diagnosis), report)


def cross_node(
    config: ClusterConfig,
    options: LaunchOptions,
    probe: ProbeOptions | None = None,
    *,
    progress: Progress | None = None,
) -> CrossNode:
    """UCX's check on the P/D nodes, then the probe pair on them, judged; the verdict is kept in
    nixl/verdict.json."""
    ucx = ucx_first(config, options)
    if not ucx.ok:
        return _ucx_failed(ucx)
    launch = Launch(config, options, progress=progress, probe=probe or ProbeOptions())
    outcome = launch.run()
    verdict = judge_probe(outcome.run_dir)
    verdict.checks[:0] = ucx_checks(ucx)  # what came first, in the verdict and its lines
    (outcome.run_dir / PROBE_DIR).mkdir(exist_ok=True)
    atomic_write_text(
        outcome.run_dir / PROBE_DIR / VERDICT_FILE, json.dumps(verdict.to_json(), indent=2) + "\n"
    )
    return CrossNode(outcome, verdict, ucx)
