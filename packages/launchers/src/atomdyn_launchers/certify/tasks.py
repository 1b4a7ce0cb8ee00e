"""The invoke tasks of the bring-up ladder: ``certify`` and ``nixl.cross_node`` (its NIXL rung alone).

Errors before anything is submitted exit 2; a rung that fails exits 1, with its diagnosis.
"""

from __future__ import annotations

import json as jsonlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_launchers.run.tasks import HELP, options_of, preflight_errors

if TYPE_CHECKING:  # the ladder is imported when a task runs: every `invoke` call loads this module
    from atomdyn_launchers.engines.base import ProbeOptions


@contextmanager
def local_cluster_unless(config: str | None, *, keep: bool) -> Iterator[None]:
    """With no cluster configured (no --config, no $ATOMDYN_CLUSTER_ENV): the local cluster, the embedded
    default, brought up for the climb (and down after it, when the climb started it and ``keep`` is off)."""
    from atomdyn_launchers.config.cluster import CLUSTER_ENV_VAR
    from atomdyn_launchers.rehearsal.localcluster.cluster import LocalCluster

    if config or os.environ.get(CLUSTER_ENV_VAR):
        yield
        return
    cluster = LocalCluster(None)
    started = not cluster.up(log=lambda message: print(message, file=sys.stderr)).already_up
    try:
        yield
    finally:
        if started and not keep:
            cluster.down()


def probe_options(
    blocks: int, transfer_blocks: str, iterations: int, large_mib: int, timeout: float
) -> ProbeOptions:
    from atomdyn_launchers.engines.base import ProbeOptions

    try:
        per_read = tuple(int(part) for part in transfer_blocks.split(",") if part.strip())
        return ProbeOptions(blocks, per_read, iterations, large_mib, timeout)
    except ValueError as exc:
        raise Exit(f"error: the probe's sizes: {exc}", code=2) from None


PROBE_HELP = {
    "blocks": "KV blocks in each side's cache, shaped like the model's (its profile's kv_shape)",
    "transfer_blocks": "blocks per READ, one timed series each (comma-separated)",
    "iterations": "timed READs per series",
    "large_mib": "the large transfer, in MiB (bandwidth against the NIC's line rate)",
    "timeout": "seconds each side waits for the other, and for one READ",
}


@task(help={**{k: HELP[k] for k in ("config", "engine", "model", "skip_node_check", "allocation")}, **PROBE_HELP,
            "json": "print the verdict as JSON"})  # fmt: skip
def nixl_cross_node(
    c: Context,
    config: str | None = None,
    engine: str | None = None,
    model: str | None = None,
    blocks: int = 64,
    transfer_blocks: str = "1,4,16",
    iterations: int = 20,
    large_mib: int = 64,
    timeout: float = 120.0,
    skip_node_check: bool = False,
    json: bool = False,
    allocation: str | None = None,
) -> None:
    """KV blocks READ from the prefill node into the decode node through NIXL, in the workers' runtime and
    environment, before any model is loaded: every byte checked, UCX's rows judged, latency per block."""
    from atomdyn_launchers.certify.nixl import cross_node
    from atomdyn_launchers.config.cluster import resolve_cluster_config
    from atomdyn_launchers.diagnose.scan import diagnose_run
    from atomdyn_launchers.run.options import Flags, OptionError

    probe = probe_options(blocks, transfer_blocks, iterations, large_mib, timeout)
    try:
        flags = Flags.parse(
            engine=engine,
            model=model,
            node_check=not skip_node_check,
            allocation=allocation,
            environ=os.environ,
        )
    except OptionError as exc:
        raise Exit(f"error: {exc}", code=2) from None
    options = options_of("disagg", "disagg", None, flags)
    try:
        result = cross_node(resolve_cluster_config(Path(config) if config else None), options, probe)
    except preflight_errors() as exc:
        raise Exit(f"error: {exc}", code=2) from exc
    if json:
        print(jsonlib.dumps(result.verdict.to_json(), indent=2))
    else:
        for line in result.verdict.lines():
            print(line)
        for name, value in result.verdict.figures.items():
            print(f"  {name}: {value}")
    print(f"run directory: {result.run_dir}")
    if not result.passed:
        if not json:  # the known failure signature first (invoke diagnose RUN_DIR shows every one)
            failed = [(c.name, c.detail) for c in result.verdict.checks if not c.ok]
            first = diagnose_run(result.run_dir, failed_gates=failed).first
            if first is not None:
                print(
                    f"diagnosis: {first.entry.id} ({first.location}): {first.entry.cause} Fix: {first.entry.fix}"
                )
        raise Exit(f"FAIL: {result.failure()}", code=1)
    print("PASS")


CERTIFY_HELP = {
    **{
        k: HELP[k]
        for k in (
            "config",
            "engine",
            "model",
            "recipe",
            "ready_timeout",
            "first_response_timeout",
            "allocation",
        )
    },
    **PROBE_HELP,
    "dry_run": "print the plan (rungs, nodes, jobs, the most each can take) and submit nothing",
    "from_rung": "start at this rung (name or number), reusing the earlier ones that passed for the same lock, "
    "images and config (default: the first)",
    "resume": "reuse every rung that passed in the newest climb with the same lock, images and config",
    "evidence": "also write the sanitized report to DIR/certify-<id>/ (default: none; the climb's own report is "
    "under <runs>/certify/<id>/)",
    "keep_cluster": "with no cluster configured: leave the local cluster up afterwards if the climb started it",
}


@task(help=CERTIFY_HELP)
def certify(
    c: Context,
    config: str | None = None,
    recipe: str | None = None,
    engine: str | None = None,
    model: str | None = None,
    ready_timeout: float | None = None,
    first_response_timeout: float | None = None,
    blocks: int = 64,
    transfer_blocks: str = "1,4,16",
    iterations: int = 20,
    large_mib: int = 64,
    timeout: float = 120.0,
    dry_run: bool = False,
    from_rung: str | None = None,
    resume: bool = False,
    evidence: str | None = None,
    keep_cluster: bool = False,
    allocation: str | None = None,
) -> None:
    """The bring-up ladder, cheapest rung first: preflight, images, in-image validation, a cross-node NIXL
    transfer, then aggregated, two-node and P/D serving and the benchmark; stops at the first failure."""
    from atomdyn_launchers.certify.ladder import CertifyError, climb, plan_lines
    from atomdyn_launchers.certify.report import publish
    from atomdyn_launchers.config.cluster import load_cluster_config, resolve_cluster_config
    from atomdyn_launchers.run.options import Flags, OptionError

    probe = probe_options(blocks, transfer_blocks, iterations, large_mib, timeout)
    try:
        flags = Flags.parse(
            engine=engine,
            model=model,
            ready_timeout=ready_timeout,
            first_response_timeout=first_response_timeout,
            allocation=allocation,
            environ=os.environ,
        )
    except OptionError as exc:
        raise Exit(f"error: {exc}", code=2) from None
    options = options_of("disagg", "disagg", recipe, flags)
    try:
        if dry_run and config:  # the plan is read from the file alone: nothing here needs to exist
            for line in plan_lines(load_cluster_config(Path(config)), options, probe):
                print(line)
            return
        if dry_run:
            for line in plan_lines(resolve_cluster_config(None), options, probe):
                print(line)
            return
        with local_cluster_unless(config, keep=keep_cluster):
            cluster = resolve_cluster_config(Path(config) if config else None)
            root = (options.runs_root or cluster.runs_dir) / "certify"
            cert = climb(cluster, options, probe, root=root, start=from_rung, resume=resume,
                         config_path=config, recipe_path=recipe)  # fmt: skip
    except CertifyError as exc:
        raise Exit(f"error: {exc}", code=2) from None
    except preflight_errors() as exc:
        raise Exit(f"error: {exc}", code=2) from exc
    for row in cert.rungs:
        print(
            f"{row['number']} {row['name']:<10} {row['verdict'].upper():<10} {row['seconds']:>7g} s  {row['detail']}"
        )
    print(f"report: {Path(cert.directory) / 'README.md'}")
    if evidence:
        print(f"evidence: {publish(cert, Path(evidence))}")
    if not cert.certified:
        raise Exit(f"{cert.verdict_line()} after {cert.elapsed_s:g} s; rerun: {cert.rerun}", code=1)
    print(cert.verdict_line())
