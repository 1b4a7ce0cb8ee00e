"""End to end on the real local cluster: Slurm jobs, etcd, Dynamo's frontend and mock engines.

Each run is checked against the run-directory contract (docs/run-directory.md) and for leftovers: no process
of the run, no etcd key of the run, every job finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.config.cluster import ClusterConfig, ClusterConfigError, PreflightError
from atomdyn_launchers.contract.rundir import EVENTS, REQUEST_FIELDS, read_jsonl
from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import run_prefix
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.monitor import Monitor
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.stages.record import Outcome
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration

IN_CI = os.environ.get("CI") == "true"
ORDER = [
    "submitted",
    "running",
    "registered",
    "healthy",
    "first_good_response",
    "requests_done",
    "cancelled",
    "done",
]


def _wait_for(what: str, condition: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and str(os.getpid()) != entry.name:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def _assert_nothing_left(config: ClusterConfig, outcome: Outcome) -> None:
    namespace = f"atomdyn-{outcome.run_id.lower()}"
    assert _processes_mentioning(namespace) == [], "processes of the run still running"
    assert _processes_mentioning(f"{outcome.run_id}/roles/") == [], "registration helpers still running"
    etcd = EtcdClient(config.require_etcd())
    assert etcd.get_prefix(run_prefix(outcome.run_id))[0] == {}
    # Workers deregistered themselves from Dynamo's discovery (graceful stop), or their leases expired.
    _wait_for(
        "Dynamo's instance keys of the run to vanish",
        lambda: etcd.get_prefix(f"v1/instances/{namespace}/")[0] == {},
        timeout_s=15,
    )


def _shellcheck(path: Path) -> None:
    exe = shutil.which("shellcheck")
    if exe is None:
        if IN_CI:
            pytest.fail("shellcheck is not installed")
        pytest.skip("shellcheck is not installed")  # never a silent pass
    done = subprocess.run([exe, str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def _assert_contract(
    outcome: Outcome, kind: str, requests: int, processes: dict[str, list[str]]
) -> dict[str, Any]:
    d = outcome.run_dir
    assert re.fullmatch(rf"\d{{8}}T\d{{6}}Z-{kind}-mocker", d.name)
    run = json.loads((d / "run.json").read_text())
    assert run["schema_version"] == 1 and run["run_id"] == d.name and run["kind"] == kind
    assert (run["engine_profile"], run["runtime"], run["model_profile"]) == (
        "mocker",
        "venv",
        "qwen3-8b-bf16",
    )
    assert run["platform"] == "rehearsal (CPU, mock engine)"
    assert run["lock_digest"].startswith("sha256:") and run["config"]["SLURM_PARTITION"]
    assert run["result"] == "pass" and run["failure"] is None, run["failure"]
    assert run["placement_verified"] is True
    assert {j["role"] for j in run["jobs"]} == set(processes)
    for job in run["jobs"]:
        assert job["node_ran"] == job["node_requested"]
        # Stopped through the job script's own SIGTERM handling: a clean exit, no failed step.
        assert (job["state"], job["exit_code"], job["derived_exit_code"]) == ("COMPLETED", "0:0", "0:0")
    timeline = read_jsonl(d / "timeline.jsonl")
    assert all(e["event"] in EVENTS and isinstance(e["t"], float) for e in timeline)
    firsts = [min(e["t"] for e in timeline if e["event"] == name) for name in ORDER]
    assert firsts == sorted(firsts), [e["event"] for e in timeline]
    records = read_jsonl(d / "requests.jsonl")
    assert sorted(r["index"] for r in records) == list(range(requests))
    for record in records:
        assert set(record) == set(REQUEST_FIELDS)
        assert record["ok"] and record["status"] == 200 and record["content_chars"] > 0, record
        assert record["completion_tokens"] > 0 and record["prompt_tokens"] > 0
    for role, procs in processes.items():
        _shellcheck(d / "scripts" / f"{role}.sbatch")
        assert (d / "logs" / f"{role}.slurm.out").stat().st_size > 0
        for proc in procs:
            assert (d / "logs" / f"{role}.{proc}.log").exists()
            metrics = (d / "metrics" / f"{role}.{proc}.prom").read_text()
            name = (
                "dynamo_frontend_requests_total" if proc == "frontend" else "dynamo_component_requests_total"
            )
            assert name in metrics
    return run


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    return local_cluster_config


def _launch(config: ClusterConfig, kind: str, **options: Any) -> Outcome:
    return Launch(config, LaunchOptions(kind=kind, **options)).run()


def test_disaggregated_run_with_defaults(config: ClusterConfig) -> None:
    outcome = _launch(config, "disagg")
    run = _assert_contract(outcome, "disagg", 32, {"prefill": ["prefill"], "decode": ["frontend", "decode"]})
    nodes = {j["role"]: j["node_ran"] for j in run["jobs"]}
    assert nodes == {"prefill": config.prefill_node, "decode": config.decode_node}
    records = read_jsonl(outcome.run_dir / "requests.jsonl")
    # Every response came from a prefill worker and a different decode worker.
    assert all(r["prefill_worker_id"] != r["decode_worker_id"] for r in records)
    assert len({r["prefill_worker_id"] for r in records}) == 1
    # Repeated prefixes hit the KV cache once their group has been seen.
    assert max(r["kv_hit_rate"] for r in records) > 0.5
    _assert_nothing_left(config, outcome)


def test_two_node_aggregated_run(config: ClusterConfig) -> None:
    outcome = _launch(config, "agg-two", requests=8)
    run = _assert_contract(outcome, "agg-two", 8, {"agg1": ["frontend", "worker"], "agg2": ["worker"]})
    assert {j["node_ran"] for j in run["jobs"]} == {config.primary_node, config.decode_node}
    # One request per prompt group goes first, so the repeats hit the cache even with all 8 in flight at once.
    assert max(r["kv_hit_rate"] for r in read_jsonl(outcome.run_dir / "requests.jsonl")) > 0
    _assert_nothing_left(config, outcome)


def test_agg_single_through_invoke_with_defaults(config: ClusterConfig, tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(
        "from invoke import Collection\n"
        "from atomdyn_launchers.tasks import agg_ns, disagg_ns\n"
        "ns = Collection(agg_ns, disagg_ns)\n"
    )
    env_file = tmp_path / "cluster.env"
    config.write(env_file)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "agg.run",
            "--config",
            str(env_file),
            "--ready-timeout",
            "120",
            "--run-dir-file",
            str(tmp_path / "last-run"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout
    run_dir = Path(re.findall(r"run directory: (\S+)", done.stdout)[-1])
    assert (tmp_path / "last-run").read_text().strip() == str(run_dir)
    outcome = Outcome(run_dir.name, run_dir, True, None)
    _assert_contract(outcome, "agg-single", 8, {"agg": ["frontend", "worker"]})
    # Live progress went to stderr while the run waited and worked.
    assert "1/1 A ready" in done.stderr and "requests 8/8" in done.stderr
    _assert_nothing_left(config, outcome)


def test_disagg_bench_prints_the_timeline(config: ClusterConfig, tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(
        "from invoke import Collection\nfrom atomdyn_launchers.tasks import disagg_ns\n"
        "ns = Collection(disagg_ns)\n"
    )
    env_file = tmp_path / "cluster.env"
    config.write(env_file)
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "disagg.bench", "--runs", "1", "--requests", "4", "--config", str(env_file)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for milestone in ("submitted", "running", "registered", "healthy", "first_good_response", "done"):
        assert any(re.fullmatch(rf"  {milestone} +\+ *\d+\.\d\d s", line) for line in lines), milestone
    assert re.search(r"submission -> first verified P/D response: median \d+\.\d\d s .*n=1", done.stdout)
    # The aggregated reference ran first, with the same 4 prompts; the P/D run's latency is set beside it.
    assert re.search(
        r"^aggregated reference: \S+-agg-single-mocker PASS; 4 requests: p50 \d+\.\d\d s", done.stdout, re.M
    )
    assert re.search(
        r"^  P/D 4 requests: p50 \d+\.\d\d s, max .*; aggregated p50 \d+\.\d\d s: \d+\.\dx$",
        done.stdout,
        re.M,
    )


def test_decode_worker_killed_mid_run_fails_fast_and_cleans_up(config: ClusterConfig) -> None:
    killed: dict[str, float] = {}

    def hook(event: str, record: dict[str, Any]) -> None:
        if event != "first_good_response":
            return
        run: Monitor = record["run"]
        pid = run.registrations["decode"].pids["decode"]
        requests = run.ctx.rundir.path / "requests.jsonl"

        def kill_after_some_traffic() -> None:
            _wait_for("smoke traffic to flow", lambda: len(read_jsonl(requests)) >= 3, timeout_s=30)
            killed["t"] = time.time()
            os.kill(pid, signal.SIGKILL)

        threading.Thread(target=kill_after_some_traffic, daemon=True).start()

    outcome = Launch(config, LaunchOptions(kind="disagg", requests=2000, concurrency=2), hook=hook).run()
    assert not outcome.passed and outcome.failure is not None and "decode" in outcome.failure
    failed_at = next(e["t"] for e in outcome.timeline if e["event"] == "failed")
    assert 0 < failed_at - killed["t"] < 5, (
        "the run did not fail within seconds of the kill",
        failed_at - killed["t"],
        outcome.failure,
    )
    assert any(e["event"] == "cancelled" and e.get("role") == "prefill" for e in outcome.timeline)
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["result"] == "fail" and run["failure"] == outcome.failure
    jobs = {j["role"]: j for j in run["jobs"]}
    assert jobs["decode"]["state"] == "FAILED" and jobs["decode"]["exit_code"] == "137:0"  # SIGKILL's status
    assert jobs["prefill"]["state"] == "COMPLETED"  # stopped by the launcher, cleanly
    logs = outcome.run_dir / "logs"
    for name in (
        "decode.slurm.out",
        "decode.decode.log",
        "decode.frontend.log",
        "prefill.slurm.out",
        "prefill.prefill.log",
    ):
        assert (logs / name).exists(), name
    assert "exited (status 137) on their own" in (logs / "decode.slurm.out").read_text()
    assert len(read_jsonl(outcome.run_dir / "requests.jsonl")) < 2000
    # Diagnosed first as the kill it was, in run.json and by a later `invoke diagnose` of the directory.
    assert run["diagnosis"]["first"] == "process-killed-by-signal", run["diagnosis"]
    again = diagnose_run(outcome.run_dir)
    assert again.first is not None and again.first.entry.id == "process-killed-by-signal", again.text()
    _assert_nothing_left(config, outcome)


def test_ctrl_c_stops_the_jobs(config: ClusterConfig, tmp_path: Path) -> None:
    env_file = tmp_path / "cluster.env"
    config.write(env_file)
    # The launcher's output goes to a file (a pipe nobody reads until the end can fill and block it), and
    # SIGUSR1 dumps its threads' stacks there: a stop that hangs shows what it waits on.
    code = (
        "import faulthandler, signal, sys\nfrom pathlib import Path\n"
        "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        "from atomdyn_launchers.config.cluster import load_cluster_config\n"
        "from atomdyn_launchers.run.launch import run\n"
        "from atomdyn_launchers.run.options import LaunchOptions\n"
        "o = run(LaunchOptions(kind='disagg', requests=2000, concurrency=1), load_cluster_config(Path(sys.argv[1])))\n"
        "print('RESULT', o.passed, o.run_dir)\n"
    )
    before = set(config.runs_dir.iterdir()) if config.runs_dir.exists() else set()
    log = tmp_path / "launcher.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-u", "-c", code, str(env_file)], stdout=out, stderr=out)
    try:

        def first_good() -> bool:
            new = (
                [p for p in config.runs_dir.iterdir() if p not in before] if config.runs_dir.exists() else []
            )
            return any(
                e["event"] == "first_good_response" for p in new for e in read_jsonl(p / "timeline.jsonl")
            )

        _wait_for("the run to serve its first response", first_good, timeout_s=120)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            with contextlib.suppress(AssertionError):  # the stacks, if the process can still write them
                _wait_for("the stacks", lambda: "most recent call first" in log.read_text(), timeout_s=5)
            pytest.fail(f"the launcher had not stopped 90 s after SIGINT:\n{log.read_text()[-20000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text
    run_dir = Path(text.split()[-1])
    run = json.loads((run_dir / "run.json").read_text())
    assert run["result"] == "fail" and "interrupted" in run["failure"]
    assert all(j["state"] == "COMPLETED" for j in run["jobs"])
    assert run["diagnosis"]["first"] == "interrupted", run["diagnosis"]
    _assert_nothing_left(config, Outcome(run_dir.name, run_dir, False, run["failure"]))


def test_jobs_stop_themselves_when_the_launcher_dies_hard(config: ClusterConfig, tmp_path: Path) -> None:
    env_file = tmp_path / "cluster.env"
    config.write(env_file)
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from atomdyn_launchers.config.cluster import load_cluster_config\n"
        "from atomdyn_launchers.run.launch import run\n"
        "from atomdyn_launchers.run.options import LaunchOptions\n"
        "run(LaunchOptions(kind='disagg', requests=2000, concurrency=1), load_cluster_config(Path(sys.argv[1])))\n"
    )
    before = set(config.runs_dir.iterdir()) if config.runs_dir.exists() else set()
    proc = subprocess.Popen([sys.executable, "-c", code, str(env_file)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    run_dir: list[Path] = []
    try:

        def first_good() -> bool:
            for path in set(config.runs_dir.iterdir()) - before if config.runs_dir.exists() else ():
                if any(e["event"] == "first_good_response" for e in read_jsonl(path / "timeline.jsonl")):
                    run_dir.append(path)
                    return True
            return False

        _wait_for("the run to serve its first response", first_good, timeout_s=120)
        proc.kill()  # no chance to clean up: the jobs must notice on their own
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = time.monotonic()
    timeline = read_jsonl(run_dir[0] / "timeline.jsonl")
    job_ids = [int(e["job_id"]) for e in timeline if e["event"] == "submitted"]
    slurm = Slurm(config)
    for job_id in job_ids:
        slurm.wait_terminal(job_id, timeout=45)
    assert time.monotonic() - killed_at < 45
    for role in ("prefill", "decode"):
        log = (run_dir[0] / "logs" / f"{role}.register.log").read_text()
        assert "the launcher is gone" in log
    assert not (run_dir[0] / "run.json").exists()  # the launcher never finished its record
    found = diagnose_run(run_dir[0])  # the roles' own logs say why they stopped
    assert found.first is not None and found.first.entry.id == "launcher-gone", found.text()
    _assert_nothing_left(config, Outcome(run_dir[0].name, run_dir[0], False, None))
    assert EtcdClient(config.require_etcd()).get_prefix(f"atomdyn/runs/{run_dir[0].name}/")[0] == {}


# --- preflight faults: a clear error, and nothing submitted or created ----------------------------------------


def _queue(config: ClusterConfig) -> str:
    return Slurm(config).run(["squeue", "-h", "-o", "%i %j"])


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"etcd_endpoints": ("http://127.0.0.1:9",)},
            r"ETCD_ENDPOINTS=http://127.0.0.1:9: etcd is unreachable",
        ),
        ({"decode_node": "node9"}, r"node 'node9' does not exist"),
        (
            {"model_path": Path("/nonexistent/atomdyn-model")},
            r"MODEL_PATH /nonexistent/atomdyn-model does not exist",
        ),
        ({"slurm_partition": "nosuchpart"}, r"SLURM_PARTITION 'nosuchpart' does not exist"),
    ],
)
def test_preflight_faults_submit_nothing(
    config: ClusterConfig, changes: dict[str, Any], message: str
) -> None:
    bad = dataclasses.replace(config, **changes)
    runs_before = sorted(config.runs_dir.iterdir()) if config.runs_dir.exists() else []
    queue_before = _queue(config)
    with pytest.raises(PreflightError, match=message):
        _launch(bad, "disagg")
    assert _queue(config) == queue_before
    assert (sorted(config.runs_dir.iterdir()) if config.runs_dir.exists() else []) == runs_before


def test_unknown_config_key_is_an_error_naming_it(config: ClusterConfig, tmp_path: Path) -> None:
    env_file = tmp_path / "cluster.env"
    env_file.write_text(config.to_env_text() + "SLURM_RESERVATON=typo\n")
    from atomdyn_launchers.run.launch import run

    with pytest.raises(ClusterConfigError, match="SLURM_RESERVATON: unknown key"):
        run(LaunchOptions(kind="disagg"), config_path=env_file)
    # The command line says so too, and exits 2 (nothing submitted).
    (tmp_path / "tasks.py").write_text(
        "from invoke import Collection\nfrom atomdyn_launchers.tasks import disagg_ns\n"
        "ns = Collection(disagg_ns)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "disagg.run", "--config", str(env_file)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "SLURM_RESERVATON: unknown key" in done.stderr + done.stdout


def test_readiness_deadline_names_the_missing_role_and_cancels_a_pending_job(
    config: ClusterConfig, tmp_path: Path
) -> None:
    slurm = Slurm(config)
    # Hold the decode node so the decode job cannot start; the placeholder job is cancelled right after.
    blocker_script = tmp_path / "blocker.sbatch"
    blocker_script.write_text("#!/bin/bash\nexec tail -f /dev/null\n")
    blocker = slurm.submit(
        blocker_script,
        job_name="atomdyn-test-blocker",
        nodelist=config.decode_node,
        output=tmp_path / "blocker.out",
        extra_args=["--exclusive"],
    )
    try:
        slurm.wait_for(blocker, lambda i: i.state == "RUNNING", timeout=30, what="running")
        outcome = _launch(config, "disagg", ready_timeout_s=4)
    finally:
        slurm.cancel([blocker])
        slurm.wait_terminal(blocker, timeout=30)
    assert not outcome.passed and outcome.failure is not None
    assert outcome.failure.startswith("timed out after 4 s waiting for every role to register")
    assert "decode: PENDING" in outcome.failure
    run = json.loads((outcome.run_dir / "run.json").read_text())
    jobs = {j["role"]: j for j in run["jobs"]}
    assert jobs["decode"]["state"] == "CANCELLED" and jobs["prefill"]["state"] == "COMPLETED"
    assert any(e.get("detail") == "cancelled while pending" for e in outcome.timeline)
    _assert_nothing_left(config, outcome)
