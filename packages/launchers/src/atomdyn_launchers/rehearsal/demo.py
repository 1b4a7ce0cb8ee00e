"""``nox -s demo``: the local rehearsal end to end. The local cluster up, a disaggregated run (real vLLM engines
on CPU, or the mock engine), its evidence collected and verified, the cluster down again (if it was started
here). The evidence goes where the user's runs go (``<SHARED_DIR>/evidence``, ``.atomdyn/evidence`` on the
local cluster), never into the project's committed ``evidence/`` unless ``evidence`` asks to publish there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from atomdyn_launchers.evidence import cli as evidence_cli
from atomdyn_launchers.evidence.summary import default_evidence_root
from atomdyn_launchers.rehearsal.localcluster.cluster import LocalCluster
from atomdyn_launchers.run.answers import aggregated_reference_missing
from atomdyn_launchers.run.launch import run
from atomdyn_launchers.run.options import LaunchOptions


class DemoError(RuntimeError):
    """The demo failed; the message says which run or which evidence."""


def run_demo(
    engine: str, requests: int | None, evidence: Path | None = None, *, keep_cluster: bool = False
) -> str:
    """Run the demo; the line that says it passed, or DemoError. ``evidence``: the evidence root (None: beside
    the runs)."""
    cluster = LocalCluster(None)
    started = not cluster.up(log=lambda m: print(m, file=sys.stderr)).already_up
    try:
        if aggregated_reference_missing(engine):
            # The P/D answer is checked against an aggregated one of the same engine, model and build: the
            # first demo on a cluster records it (about a minute more), later ones reuse it.
            print(f"no aggregated answer for {engine} yet: one aggregated run first", file=sys.stderr)
            reference = run(LaunchOptions(kind="agg-single", engine=engine, requests=2))
            if not reference.passed:
                raise DemoError(f"the aggregated reference run: {reference.failure}")
        outcome = run(LaunchOptions(kind="disagg", engine=engine, requests=requests))
        print(f"run directory: {outcome.run_dir}")
        root = default_evidence_root(outcome.run_dir) if evidence is None else evidence
        collected = evidence_cli.collect(outcome.run_dir, root)
        verified = evidence_cli.verify([outcome.run_dir, root / outcome.run_dir.name]) if not collected else 1
    finally:
        if started and not keep_cluster:
            cluster.down()
    if not outcome.passed or collected or verified:
        raise DemoError(outcome.failure or "evidence gates failed (see above)")
    platform = json.loads((outcome.run_dir / "run.json").read_text()).get("platform", "?")
    return (f"demo PASSED: disaggregated prefill/decode rehearsal verified ({engine}: {platform}); evidence: "
            f"{root / outcome.run_dir.name}")  # fmt: skip
