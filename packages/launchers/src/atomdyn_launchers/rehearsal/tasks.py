"""The rehearsal's invoke tasks: the collection ``cluster`` (``invoke cluster.up | cluster.status |
cluster.down``) and ``disagg.bench``, which times disaggregated runs and sets each run's KV transfers beside a
raw TCP copy of the same bytes between the same nodes."""

from __future__ import annotations

import contextlib
import json as _json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_launchers.run.tasks import HELP as RUN_HELP
from atomdyn_launchers.run.tasks import launch

if TYPE_CHECKING:  # the figures are imported when a task runs: every `invoke` call loads this module
    from atomdyn_launchers.rehearsal.bench_figures import KvTransfers, RequestLatencies
    from atomdyn_launchers.rehearsal.rawcopy import RawCopy
    from atomdyn_launchers.run.stages.record import Outcome

_HELP = {
    "state_dir": "state directory; its parent is the cluster's SHARED_DIR (default: <repo>/.atomdyn/cluster)",
    "venv": "python virtualenv the jobs run (default: <repo>/.venv)",
    "docker": "also one docker daemon per node, each with its own image cache (adds ~1 s to up)",
    "nodes": "how many nodes, node1..nodeN (2-64; default: as the running cluster, else 2)",
}


def _run(command: str, state_dir: str, venv: str = "", docker: bool = False, nodes: int = 0) -> None:
    from atomdyn_launchers.rehearsal.localcluster import cli

    try:
        cluster = cli.cluster_from(state_dir or None, venv or None, docker, nodes or None)
        code = {"up": cli.up, "status": cli.status, "down": cli.down}[command](cluster)
    except cli.LocalClusterError as exc:
        raise Exit(f"error: {exc}", code=1) from exc
    if code:
        raise Exit(code=code)


@task(help=_HELP)
def up(c: Context, state_dir: str = "", venv: str = "", docker: bool = False, nodes: int = 0) -> None:
    """Bring the local Slurm cluster (two nodes, or --nodes N) and etcd up, or verify it is up; prints the
    time taken."""
    _run("up", state_dir, venv, docker, nodes)


@task(help={"state_dir": _HELP["state_dir"]})
def status(c: Context, state_dir: str = "") -> None:
    """Each daemon with its pid and liveness, the nodes' Slurm state, etcd health, orphaned runs (launcher gone);
    exit 1 if unhealthy or a run is orphaned."""
    _run("status", state_dir)


@task(help={"state_dir": _HELP["state_dir"]})
def down(c: Context, state_dir: str = "") -> None:
    """Stop everything by PID and remove the namespaces and the host veth."""
    _run("down", state_dir)


_MILESTONES = (
    "submitted",
    "running",
    "registered",
    "healthy",
    "first_good_response",
    "requests_done",
    "done",
)


def timeline_figures(timeline: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds from the first submission to the last occurrence of each milestone before the first good
    response (both roles must be running and registered), and to the later milestones."""
    start = min(float(e["t"]) for e in timeline if e["event"] == "submitted")
    out: dict[str, float] = {}
    for name in _MILESTONES:
        times = [float(e["t"]) for e in timeline if e["event"] == name]
        if times:
            out[name] = max(times) - start
    return out


def kv_transfer_figures(run_dir: Path) -> str | None:
    """The decode workers' NIXL transfers of a run (vLLM's metrics): count, mean bytes and time per transfer."""
    from atomdyn_launchers.rehearsal.bench_figures import kv_transfers

    transfers = kv_transfers(run_dir)
    return transfers.describe() if transfers else None


def _raw_copy_beside(run_dir: Path, transfers: KvTransfers, copies: int) -> RawCopy | str:
    """A raw TCP copy of one mean KV transfer's bytes between the run's prefill and decode nodes (the local
    cluster's namespaces, as they are right after the run); a string says why it was not measured."""
    from atomdyn_launchers.rehearsal.bench_figures import kv_nodes, local_cluster_state_dir
    from atomdyn_launchers.rehearsal.rawcopy import RawCopyError, measure_in_local_cluster

    state_dir = local_cluster_state_dir(run_dir)
    if state_dir is None:
        return "not measured: the run's cluster is not the local cluster"
    try:
        source, reader = kv_nodes(run_dir)
        return measure_in_local_cluster(state_dir, transfers.bytes_per_transfer, copies, source, reader)
    except (RawCopyError, ValueError, OSError) as exc:
        return f"not measured: {exc}"


def _bench_one(
    outcome: Outcome, copies: int, title: str, aggregated: RequestLatencies | None = None
) -> dict[str, Any]:
    """One run's figures, printed and returned for --json; its request latency beside the aggregated
    reference run's when there is one."""
    from atomdyn_launchers.rehearsal import kv_targets
    from atomdyn_launchers.rehearsal.bench_figures import compile_cache, kv_transfers, request_latencies
    from atomdyn_launchers.rehearsal.rawcopy import RawCopy

    figures = timeline_figures(outcome.timeline)
    record: dict[str, Any] = {
        "run_id": outcome.run_id,
        "run_dir": str(outcome.run_dir),
        "passed": outcome.passed,
        "failure": outcome.failure,
        "timeline_s": figures,
    }
    print(f"{title}: {outcome.run_id} {'PASS' if outcome.passed else 'FAIL ' + str(outcome.failure)}")
    for name, seconds in figures.items():
        print(f"  {name:<20} +{seconds:6.2f} s")
    latencies = request_latencies(outcome.run_dir)
    if latencies:
        record["request_latency_s"] = latencies.to_json()
        beside = ""
        if aggregated:
            record["pd_over_aggregated_p50"] = latencies.p50_s / aggregated.p50_s
            beside = f"; aggregated p50 {aggregated.p50_s:.2f} s: {record['pd_over_aggregated_p50']:.1f}x"
        print(f"  P/D {latencies.describe()}{beside}")
    transfers = kv_transfers(outcome.run_dir)
    if transfers:
        # First, while the cluster is as the run left it.
        raw = _raw_copy_beside(outcome.run_dir, transfers, copies)
        spread = transfers.spread()
        record["kv_transfers"] = {**transfers.to_json(), "spread": spread}
        print(f"  {transfers.describe()}")
        print(f"  {transfers.describe_spread()}")
        if isinstance(raw, RawCopy):
            ratio = transfers.seconds_per_transfer / raw.p50_s
            record["raw_tcp_copy"] = raw.to_json()
            record["kv_time_over_raw_p50"] = ratio
            print(f"  {raw.describe()}")
            print(f"  mean NIXL transfer / raw copy p50: {ratio:.0f}x")
            p50 = spread["p50_s"]
            if p50 is not None:
                record["kv_p50_over_raw_p50"] = p50 / raw.p50_s
                print(f"  p50 NIXL transfer / raw copy p50: {record['kv_p50_over_raw_p50']:.0f}x")
        else:
            record["raw_tcp_copy"] = raw
            print(f"  raw TCP copy: {raw}")
        record["targets"] = kv_targets.judge(kv_targets.RunFigures(transfers, latencies, aggregated))
        for row in record["targets"]:
            print(f"  target {kv_targets.describe(row)}")
    caches = compile_cache(outcome.run_dir)
    if caches:
        record["compile_cache"] = [c.to_json() for c in caches]
        for cache in caches:
            print(f"  compile cache, {cache.describe()}")
    return record


@task(
    help={
        "runs": "number of disaggregated runs (default 3)",
        "requests": "smoke requests per run (default 8)",
        "config": RUN_HELP["config"],
        "engine": "engine profile (default: the config's ENGINE_PROFILE); vllm-cpu also prints its KV transfers "
        "beside a raw TCP copy of the same bytes between the same nodes, and what its compile cache did",
        "copies": "raw TCP copies timed after each run with KV transfers (default 200)",
        "json": "print the figures as one JSON document on stdout (the per-run lines go to stderr)",
        "aggregated": "first one aggregated run (same engine, prompts and machine) whose request latency each "
        "P/D run's is set beside (default on; --no-aggregated skips it)",
    }
)
def disagg_bench(
    c: Context,
    runs: int = 3,
    requests: int = 8,
    config: str | None = None,
    engine: str | None = None,
    copies: int = 200,
    json: bool = False,
    aggregated: bool = True,
) -> None:
    """Time `disagg.run` from submission to the first verified P/D response (target <= 10 s for the mocker);
    each run's request latency beside an aggregated run's; with a real engine, each run's KV transfers (mean,
    p50, p99, slowest) against a raw TCP copy of the same bytes, and the rehearsal's KV targets."""
    import statistics

    from atomdyn_launchers.rehearsal.bench_figures import request_latencies
    from atomdyn_launchers.run.options import LaunchOptions

    if runs < 1 or copies < 1:
        raise Exit("error: --runs and --copies must be at least 1", code=2)
    records: list[dict[str, Any]] = []
    firsts: list[float] = []
    failed: str | None = None
    reference: dict[str, Any] | None = None
    with contextlib.redirect_stdout(sys.stderr) if json else contextlib.nullcontext():
        agg_latencies: RequestLatencies | None = None
        if aggregated:
            agg = launch(LaunchOptions(kind="agg-single", engine=engine, requests=requests), config)
            agg_latencies = request_latencies(agg.run_dir)
            reference = {"run_id": agg.run_id, "passed": agg.passed, "failure": agg.failure}
            if not agg.passed or agg_latencies is None:
                raise Exit(f"FAIL: aggregated reference run {agg.run_id}: {agg.failure}", code=1)
            reference["request_latency_s"] = agg_latencies.to_json()
            print(f"aggregated reference: {agg.run_id} PASS; {agg_latencies.describe()}")
        for i in range(runs):
            outcome = launch(LaunchOptions(kind="disagg", engine=engine, requests=requests), config)
            record = _bench_one(outcome, copies, f"run {i + 1}/{runs}", agg_latencies)
            records.append(record)
            if not outcome.passed:
                failed = f"FAIL: run {outcome.run_id}: {outcome.failure}"
                break
            if "first_good_response" not in record["timeline_s"]:
                failed = f"FAIL: run {outcome.run_id} did not reach a verified response"
                break
            firsts.append(record["timeline_s"]["first_good_response"])
        else:
            print(
                f"submission -> first verified P/D response: median {statistics.median(firsts):.2f} s "
                f"(min {min(firsts):.2f}, max {max(firsts):.2f}, n={runs})"
                + ("; target <= 10 s" if (engine or "mocker") == "mocker" else "")
            )
    if json:
        print(_json.dumps(_bench_document(engine, records, firsts, reference), indent=1))
    if failed:
        raise Exit(failed, code=1)


def _bench_document(
    engine: str | None,
    records: list[dict[str, Any]],
    firsts: list[float],
    reference: dict[str, Any] | None = None,
) -> dict[str, Any]:
    import statistics

    run_json: dict[str, Any] = {}
    if records:
        with contextlib.suppress(OSError, ValueError):
            run_dir = Path(records[0]["run_dir"])
            run_json = _json.loads((run_dir / "run.json").read_text())
    return {
        "bench": "disagg.bench",
        "engine": engine or run_json.get("engine_profile"),
        "platform": run_json.get("platform"),
        "lock_digest": run_json.get("lock_digest"),
        "aggregated_reference": reference,
        "runs": records,
        "first_good_response_s": {
            "median": statistics.median(firsts),
            "min": min(firsts),
            "max": max(firsts),
            "n": len(firsts),
        }
        if firsts
        else None,
    }


ns = Collection("cluster")
ns.add_task(up)
ns.add_task(status)
ns.add_task(down)
