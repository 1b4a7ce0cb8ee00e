"""The fault suite: faults injected into real rehearsal runs (mock engine, local cluster), each with its
expected outcome and a bound on the time to fail, then a soak of consecutive runs counting leftovers.

Run with ``nox -s faults`` (not part of ``nox -s tests``: it takes minutes). Every case appends what was tried,
what happened and how long it took to a report, printed at the end and written to $ATOMDYN_FAULTS_REPORT
(JSON) when set; docs/reliability.md records the figures.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultkit import (
    ChildLaunch,
    Injected,
    count_fds,
    job_ended,
    launch_with_fault,
    listening_ports_in,
    time_to_end,
    time_to_fail,
    wait_clean,
    wait_for,
)

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.contract.rundir import read_jsonl
from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.rehearsal.localcluster import LocalCluster
from atomdyn_launchers.rehearsal.localcluster import procs as lc_procs
from atomdyn_launchers.run import ports
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.record import Outcome
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration

REPORT: list[dict[str, Any]] = []
SOAK_RUNS = int(os.environ.get("ATOMDYN_SOAK_RUNS", "20"))


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    path = os.environ.get("ATOMDYN_FAULTS_REPORT")
    if path:
        Path(path).write_text(json.dumps(REPORT, indent=2) + "\n")
    print("\n== fault suite (rehearsal on this machine: mock engine, local cluster)", file=sys.stderr)
    for row in REPORT:
        ttf = "" if row.get("time_to_fail_s") is None else f"fails in {row['time_to_fail_s']:.1f} s"
        tte = "" if row.get("time_to_end_s") is None else f"ends in {row['time_to_end_s']:.1f} s"
        print(f"- {row['case']}: {row['verdict']}; {ttf} {tte}\n    {row['observed']}", file=sys.stderr)


def _record(case: str, tried: str, expected: str, observed: str, ok: bool, **figures: Any) -> None:
    REPORT.append(
        {
            "case": case,
            "tried": tried,
            "expected": expected,
            "observed": observed,
            "verdict": "as expected" if ok else "NOT as expected",
            **{k: (round(v, 2) if isinstance(v, float) else v) for k, v in figures.items()},
        }
    )


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    return local_cluster_config


def _kill_process_of(role: str, process: str, signum: int = signal.SIGKILL) -> Any:
    def fault(run: Monitor) -> str:
        pid = run.registrations[role].pids[process]
        os.kill(pid, signum)
        return f"signal {signum} to {role}.{process} (pid {pid})"

    return fault


def _fault_case(
    config: ClusterConfig,
    case: str,
    fault: Any,
    tried: str,
    expected: str,
    must: list[str],
    bound_s: float,
    *,
    check_clean: bool = True,  # False: etcd cannot be read yet; the caller checks after restoring it
    diagnosed: str | None = None,  # the catalog entry the diagnosis must name first (docs/diagnose.md)
) -> tuple[Outcome, Injected]:
    outcome, injected = launch_with_fault(config, fault)
    failure = outcome.failure or ""
    ttf = time_to_fail(outcome, injected) if injected.at and not outcome.passed else None
    ok = not outcome.passed and all(word in failure for word in must) and ttf is not None and ttf < bound_s
    _record(
        case,
        tried,
        expected,
        failure or "passed",
        ok,
        time_to_fail_s=ttf,
        time_to_end_s=time_to_end(outcome, injected),
        bound_s=bound_s,
    )
    assert ok, f"{case}: {failure!r} after {ttf} s"
    if diagnosed is not None:
        found = diagnose_run(outcome.run_dir)
        assert found.first is not None and found.first.entry.id == diagnosed, found.text()
    if check_clean:
        left = wait_clean(config, outcome.run_id)
        assert left.none(), left
    return outcome, injected


def test_decode_worker_killed(config: ClusterConfig) -> None:
    _fault_case(
        config,
        "decode worker killed",
        _kill_process_of("decode", "decode"),
        "SIGKILL to the decode mocker mid-traffic",
        "the run fails naming the decode process; prefill stopped cleanly",
        ["process decode exited first", "status 137"],
        10.0,
        diagnosed="process-killed-by-signal",
    )


def test_prefill_worker_killed(config: ClusterConfig) -> None:
    _fault_case(
        config,
        "prefill worker killed",
        _kill_process_of("prefill", "prefill"),
        "SIGKILL to the prefill mocker mid-traffic",
        "the run fails naming the prefill process",
        ["process prefill exited first", "prefill"],
        10.0,
        diagnosed="process-killed-by-signal",
    )


def test_frontend_killed(config: ClusterConfig) -> None:
    _fault_case(
        config,
        "frontend killed",
        _kill_process_of("decode", "frontend"),
        "SIGKILL to the frontend (decode's node) mid-traffic",
        "the run fails naming the frontend, not 'decode left etcd'",
        ["process frontend exited first"],
        10.0,
        diagnosed="process-killed-by-signal",
    )


def _etcd_pid(cluster: LocalCluster) -> int:
    record = cluster._read_record()
    assert record is not None
    return next(p.pid for p in record[1] if p.name == "etcd")


def test_etcd_hung(config: ClusterConfig, local_cluster: LocalCluster) -> None:
    pid = _etcd_pid(local_cluster)

    def hang(run: Monitor) -> str:
        os.kill(pid, signal.SIGSTOP)
        return f"SIGSTOP to etcd (pid {pid})"

    try:
        outcome, _ = _fault_case(
            config,
            "etcd hung",
            hang,
            "SIGSTOP to the cluster's etcd mid-traffic",
            "the run fails naming etcd within 12 s; every job stops within its grace",
            ["etcd"],
            12.0,
            check_clean=False,
            diagnosed="etcd-not-answering",
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert all(j["state"] in ("COMPLETED", "FAILED") for j in run["jobs"]), run["jobs"]
    left = wait_clean(config, outcome.run_id)  # leases of the hung period expire once etcd runs again
    assert left.none(), left


def test_etcd_stopped(config: ClusterConfig, local_cluster: LocalCluster) -> None:
    pid = _etcd_pid(local_cluster)

    def stop(run: Monitor) -> str:
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL to etcd (pid {pid})"

    try:
        outcome, injected = launch_with_fault(config, stop)
        failure = outcome.failure or ""
        ttf = time_to_fail(outcome, injected) if not outcome.passed else None
        ok = not outcome.passed and "etcd" in failure and ttf is not None and ttf < 12.0
        _record(
            "etcd stopped",
            "SIGKILL to the cluster's etcd mid-traffic",
            "the run fails naming etcd within 12 s",
            failure or "passed",
            ok,
            time_to_fail_s=ttf,
            time_to_end_s=time_to_end(outcome, injected),
            bound_s=12.0,
        )
        assert ok, failure
        run = json.loads((outcome.run_dir / "run.json").read_text())
        assert all(j["state"] in ("COMPLETED", "FAILED") for j in run["jobs"]), run["jobs"]
        # etcd's silence, as the launcher or a role's helper saw it first (a refused watch is the launcher's)
        assert run["diagnosis"]["first"] in ("etcd-not-answering", "etcd-watch-lost"), run["diagnosis"]
    finally:
        local_cluster.up()  # etcd is gone: up restarts the cluster (fresh etcd)


def test_launcher_killed(config: ClusterConfig, local_cluster: LocalCluster, tmp_path: Path) -> None:
    child = ChildLaunch(config, tmp_path / "cluster.env")
    run_dir = child.wait_first_response()
    killed = time.monotonic()
    child.signal(signal.SIGKILL)
    child.finish()
    listed = [line for line in local_cluster.status().orphans if run_dir.name in line]
    slurm = Slurm(config)
    for job_id in child.job_ids():
        wait_for(f"job {job_id} to stop itself", job_ended(slurm, job_id), timeout_s=60)
    stopped_in = time.monotonic() - killed
    gone = all(
        "the launcher is gone" in (run_dir / "logs" / f"{r}.register.log").read_text()
        for r in ("prefill", "decode")
    )
    cleaned = Launch(config, LaunchOptions(kind="disagg"))
    cleaned.clean_orphans()
    released = run_dir.name not in {lease.run_id for lease in ports.leases(config.shared_dir)}
    diagnosis = diagnose_run(run_dir)  # no run.json: the launcher died; the roles' own logs say so
    ok = bool(listed) and gone and stopped_in < 30 and released
    assert diagnosis.first is not None and diagnosis.first.entry.id == "launcher-gone", diagnosis.text()
    _record(
        "launcher killed",
        "SIGKILL to the launcher after its first verified response",
        "jobs stop themselves within 30 s (the launcher's etcd key expires); cluster.status lists the orphan; "
        "the next run releases its ports",
        f"status listed: {listed[0] if listed else 'nothing'}; "
        f"register logs say the launcher is gone: {gone}; lease released: {released}",
        ok,
        time_to_end_s=stopped_in,
        bound_s=30.0,
    )
    assert ok
    left = wait_clean(config, run_dir.name)
    assert left.none(), left


def test_ctrl_c(config: ClusterConfig, tmp_path: Path) -> None:
    child = ChildLaunch(config, tmp_path / "cluster.env")
    run_dir = child.wait_first_response()
    sent = time.monotonic()
    child.signal(signal.SIGINT)
    code, _, err = child.finish(timeout_s=120)
    ended_in = time.monotonic() - sent
    run = json.loads((run_dir / "run.json").read_text())
    ok = (
        code == 0
        and run["result"] == "fail"
        and "interrupted" in run["failure"]
        and all(j["state"] == "COMPLETED" for j in run["jobs"])
        and ended_in < 30
    )
    _record(
        "Ctrl-C",
        "SIGINT to the launcher mid-traffic",
        "the launcher stops the jobs cleanly (COMPLETED) and records the run as interrupted within 30 s",
        f"{run['failure']}; jobs {[j['state'] for j in run['jobs']]}",
        ok,
        time_to_end_s=ended_in,
        bound_s=30.0,
    )
    assert ok, (code, err[-2000:])
    assert run["diagnosis"]["first"] == "interrupted", run["diagnosis"]
    left = wait_clean(config, run_dir.name)
    assert left.none(), left


def test_concurrent_runs(config: ClusterConfig) -> None:
    outcomes: list[Outcome] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            outcomes.append(Launch(config, LaunchOptions(kind="disagg", requests=16)).run())
        except BaseException as exc:
            errors.append(exc)

    started = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=400)
    took = time.monotonic() - started
    passed = [o for o in outcomes if o.passed]
    blocks = {json.loads((o.run_dir / "ports.json").read_text())["block"][0] for o in outcomes}
    ok = not errors and len(passed) == 3 and len(blocks) == 3
    _record(
        "three runs at once",
        "three disaggregated runs started together on the same two nodes",
        "all pass, each on its own leased ports",
        f"{len(passed)} of 3 passed; port blocks {sorted(blocks)}; "
        f"failures {[o.failure for o in outcomes if not o.passed] or errors}",
        ok,
        time_to_end_s=took,
    )
    assert ok


def test_slurmd_killed(config: ClusterConfig, local_cluster: LocalCluster) -> None:
    record = local_cluster._read_record()
    assert record is not None
    slurmd = next(p for p in record[1] if p.name == f"slurmd-{config.prefill_node}")

    def kill_slurmd(run: Monitor) -> str:
        os.kill(slurmd.pid, signal.SIGKILL)
        return f"SIGKILL to slurmd on {config.prefill_node} (pid {slurmd.pid})"

    try:
        outcome, injected = launch_with_fault(config, kill_slurmd, requests=64)
        ended = time_to_end(outcome, injected)
        left = wait_clean(config, outcome.run_id, timeout_s=60)
        ok = ended < 120 and left.none()
        _record(
            f"slurmd killed on {config.prefill_node}",
            "SIGKILL to the prefill node's slurmd mid-traffic",
            "the run ends within 120 s (its job steps outlive slurmd) and leaves nothing behind",
            outcome.failure or "passed: the jobs' steps kept running and stopped cleanly",
            ok,
            time_to_end_s=ended,
            bound_s=120.0,
        )
        assert ok, (outcome.failure, left)
        # The headline names the node Slurm marked down by the end of the stop (SlurmdTimeout=60 here).
        assert outcome.failure is not None
        assert f"; Slurm has {config.prefill_node} down* (Not responding))" in outcome.failure, (
            outcome.failure
        )
        # The stop cannot reach the node (scancel goes through its slurmd): the hard cancel's headline comes first,
        # recorded and read again once the role left there logged the launcher's key gone (a symptom then).
        recorded = json.loads((outcome.run_dir / "run.json").read_text())["diagnosis"]
        assert recorded["first"] == "jobs-not-stopped-cleanly", recorded
        found = diagnose_run(outcome.run_dir)
        assert found.first is not None and found.first.entry.id == "jobs-not-stopped-cleanly", found.text()
    finally:
        local_cluster.up()  # slurmd is gone: up restarts the cluster


# --- the soak --------------------------------------------------------------------------------------------


def _cluster_counts(cluster: LocalCluster, config: ClusterConfig) -> dict[str, int]:
    layout, started = cluster._read_record() or (None, [])
    assert layout is not None
    daemons = {p.pid for p in started}
    inodes = {i for i in (lc_procs.netns_inode(layout.netns_path(n)) for n in layout.nodes) if i}
    strays = [p for p in lc_procs.procs_in_netns(inodes) if p.pid not in daemons]
    slurmds = [p for p in started if p.name.startswith("slurmd-")]
    listening = set().union(*(listening_ports_in(p.pid) for p in slurmds))
    etcd = EtcdClient(config.require_etcd())
    netns = (
        [n for n in os.listdir("/run/netns") if n.startswith(layout.tag)]
        if os.path.isdir("/run/netns")
        else []
    )
    mounts = Path("/proc/self/mounts").read_text()
    # Jobs run in their node's mount namespace (slurmd's): that is where a run could leave a mount.
    node_mounts = sum(len(Path(f"/proc/{p.pid}/mounts").read_text().splitlines()) for p in slurmds)
    return {
        "processes": len(strays),
        "netns": len(netns),
        "node_mounts": node_mounts,
        "mounts_of_cluster": sum(
            str(layout.tag) in line or str(cluster.state_dir) in line for line in mounts.splitlines()
        ),
        "listening_ports": len(listening),
        "etcd_run_keys": len(etcd.get_prefix("atomdyn/")[0]),
        "etcd_dynamo_keys": len(etcd.get_prefix("v1/")[0]),
        "port_leases": len(ports.leases(config.shared_dir)),
        "launcher_fds": count_fds(),
    }


def test_soak(config: ClusterConfig, local_cluster: LocalCluster) -> None:
    first = Launch(config, LaunchOptions(kind="disagg")).run()  # warms caches; the baseline is taken after it
    assert first.passed, first.failure
    wait_clean(config, first.run_id)
    baseline = _cluster_counts(local_cluster, config)
    rows: list[dict[str, Any]] = []
    durations: list[float] = []
    failed: list[str] = []
    for index in range(SOAK_RUNS):
        started = time.monotonic()
        outcome = Launch(config, LaunchOptions(kind="disagg")).run()
        durations.append(time.monotonic() - started)
        if not outcome.passed:
            failed.append(f"run {index + 1}: {outcome.failure}")
        wait_clean(config, outcome.run_id)
        counts = _cluster_counts(local_cluster, config)
        rows.append({"run": index + 1, "seconds": round(durations[-1], 1), **counts})
        ok_requests = len(read_jsonl(outcome.run_dir / "requests.jsonl"))
        print(
            f"soak {index + 1}/{SOAK_RUNS}: {'pass' if outcome.passed else 'FAIL'} in {durations[-1]:.1f} s, {ok_requests} requests, {counts}",
            file=sys.stderr,
        )
    final = rows[-1]
    leaked = {k: final[k] - v for k, v in baseline.items() if final[k] != v}
    ok = not leaked and not failed
    _record(
        f"soak: {SOAK_RUNS} consecutive disaggregated runs",
        "one run after another, 32 requests each",
        "every run passes; no process, netns, mount, listening port, etcd key, port lease or launcher fd left",
        f"{SOAK_RUNS - len(failed)} of {SOAK_RUNS} passed {failed or ''}; baseline {baseline}; "
        f"after run {SOAK_RUNS} {dict((k, final[k]) for k in baseline)}; leaked {leaked or 'nothing'}",
        ok,
        time_to_end_s=sum(durations),
        median_run_s=sorted(durations)[len(durations) // 2],
        rows=rows,
    )
    assert ok, (failed, leaked)
