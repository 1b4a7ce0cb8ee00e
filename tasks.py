"""Run-time entry points (`invoke --list`). Each package owns its collection; this file only assembles them."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Collection, Context, task

ROOT = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def _lock_cli(c: Context, *args: str) -> None:
    c.run(" ".join([str(BIN / "atomdyn-lock"), *args]), pty=False)


@task(help={"path": "lock file (default: release-lock.json at the repository root)"})
def verify(c: Context, path: str = "") -> None:
    """Validate release-lock.json and print its digest."""
    _lock_cli(c, *(["--lock", path] if path else []), "verify")


@task(
    help={
        "cache": "directory for verified wheels",
        "mirror": "local mirror directory (path or file://) instead of the network",
        "role": "only wheels with this role (image-base, rehearsal, gpu-evidence, etcd)",
        "only": "comma-separated lock entry names",
        "allow_unrecorded": "comma-separated entries (or 'all') accepted without a recorded hash; recorded as an override",
    }
)
def fetch(
    c: Context,
    cache: str = ".atomdyn/wheels",
    mirror: str = "",
    role: str = "",
    only: str = "",
    allow_unrecorded: str = "",
) -> None:
    """Download every wheel the lock names into a cache, verifying size and sha256 (the PoC's fetch step)."""
    args = ["fetch", "--cache", cache]
    if mirror:
        args += ["--mirror", mirror]
    if role:
        args += ["--role", role]
    if only:
        args += ["--only", *only.split(",")]
    for name in filter(None, allow_unrecorded.split(",")):
        args += ["--allow-unrecorded", name]
    _lock_cli(c, *args)


@task(
    help={
        "requests": "smoke requests (default: the launcher's default for a disaggregated run)",
        "evidence": "where the run's evidence goes (default: evidence/)",
        "keep_cluster": "leave the local cluster up afterwards",
    }
)
def demo(
    c: Context, requests: int | None = None, evidence: str = "evidence", keep_cluster: bool = False
) -> None:
    """The local rehearsal end to end: cluster up, disagg.run (mock engine), evidence collected and verified, cluster down."""
    from invoke.exceptions import Exit

    from atomdyn_launchers.evidence import cli as evidence_cli
    from atomdyn_launchers.launch import run
    from atomdyn_launchers.localcluster.cluster import LocalCluster

    cluster = LocalCluster(None)
    started = not cluster.up(log=lambda m: print(m, file=sys.stderr)).already_up
    try:
        options: dict[str, object] = {"engine": "mocker"}
        if requests is not None:
            options["requests"] = requests
        outcome = run("disagg", **options)
        print(f"run directory: {outcome.run_dir}")
        collected = evidence_cli.collect(outcome.run_dir, Path(evidence))
        verified = evidence_cli.verify([outcome.run_dir, Path(evidence) / outcome.run_dir.name])
    finally:
        if started and not keep_cluster:
            cluster.down()
    if not outcome.passed or collected or verified:
        raise Exit(f"demo FAILED: {outcome.failure or 'evidence gates failed (see above)'}", code=1)
    print("demo PASSED: disaggregated prefill/decode rehearsal verified (CPU, mock engine)")


def _package_collections() -> list[Collection]:
    from atomdyn_launchers.cluster_tasks import ns as cluster
    from atomdyn_launchers.evidence.invoke_tasks import ns as evidence_ns
    from atomdyn_launchers.launch_tasks import agg_ns, disagg_ns
    from atomdyn_launchers.nodes.invoke_tasks import ns as nodes
    from atomdyn_launchers.validate.invoke_tasks import ns as validate
    from dmabuf_shim.invoke_tasks import ns as dmabuf
    from mori_repro.invoke_tasks import ns as mori
    from nixl_compat.invoke_tasks import ns as nixl

    return [cluster, nodes, agg_ns, disagg_ns, evidence_ns, validate, dmabuf, nixl, mori]


ns = Collection(demo)
ns.add_collection(Collection("lock", verify))
ns.add_collection(Collection("wheels", fetch))
for _collection in _package_collections():
    ns.add_collection(_collection)
