"""Each stage of a run over the fake Slurm (tests/fakeslurm.py) and a real etcd on loopback: submit, watch,
smoke, stop and record, and the run's failure paths, in seconds rather than a local cluster's minutes. Each test
asserts on what the stage left: the timeline, run.json, the job states the fake controller went through and the
command lines the client sent it."""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from fakeslurm import (
    EXIT_ALREADY_DONE,
    TIMED_OUT,
    FakeCluster,
    FakeRun,
    FakeSlurm,
    FrontendBehaviour,
    Script,
    fake_config,
    fake_frontend,
    fake_run,
    loopback_etcd,
)

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.diagnose.scan import diagnose_run
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run import launch, ports
from atomdyn_launchers.run.context import Hook, LaunchFailure
from atomdyn_launchers.run.launch import Launch, serve
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.orphans import clean_before_run
from atomdyn_launchers.run.stages import smoke as smoke_stage
from atomdyn_launchers.run.stages import stop as stop_stage
from atomdyn_launchers.run.stages.etcd import watch_etcd
from atomdyn_launchers.run.stages.record import record
from atomdyn_launchers.run.stages.smoke import first_good, requests
from atomdyn_launchers.run.stages.stop import stop
from atomdyn_launchers.run.stages.submit import submit
from atomdyn_launchers.run.stages.watch import watch
from atomdyn_launchers.slurm import client as slurm_client
from atomdyn_launchers.slurm.client import SlurmError

PREFILL_NODE, DECODE_NODE = "gpu-node-01", "gpu-node-02"

MakeRun = Callable[..., FakeRun]


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with loopback_etcd(tmp_path_factory.mktemp("etcd")) as url:
        yield url


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One runs directory for the module: every run gets its own id, so its own etcd prefix."""
    return tmp_path_factory.mktemp("shared") / "runs"


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Job states read every 0.1 s rather than from 0.5 s up: the fake answers at once, and the stop stage's
    settle, which waits for the next poll, takes a tenth of its time. The schedule's back-off is tested in
    tests/slurm/test_slurm_polling.py."""
    monkeypatch.setattr(slurm_client, "POLL_SCHEDULE", ((0.0, 0.1),))


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def frontend() -> Iterator[tuple[FrontendBehaviour, int]]:
    behaviour = FrontendBehaviour()
    with fake_frontend(behaviour) as port:
        yield behaviour, port


@pytest.fixture
def make_run(
    cluster: FakeCluster, etcd: str, runs: Path, frontend: tuple[FrontendBehaviour, int]
) -> Iterator[MakeRun]:
    """A disaggregated 1P1D run of the mock engine (or ``kind``) over the fake; its etcd session closed after."""
    made: list[FakeRun] = []

    def make(
        kind: str = "disagg",
        *,
        hook: Hook | None = None,
        probe: ProbeOptions | None = None,
        **options: object,
    ) -> FakeRun:
        opts = LaunchOptions(**{"kind": kind, "requests": 4, "concurrency": 2, **options})  # type: ignore[arg-type]
        run = fake_run(cluster, etcd, runs, frontend[1], opts, hook=hook, probe=probe)
        made.append(run)
        return run

    yield make
    for run in made:
        run.ctx.etcd.watcher.stop()
        run.ctx.etcd.presence.stop()


def _up(run: FakeRun) -> None:
    """The stages before smoke: the etcd watch, submit, watch."""
    watch_etcd(run.ctx, run.monitor)
    submit(run.ctx, run.monitor)
    watch(run.ctx, run.monitor)


def _clean_stop(run: FakeRun) -> None:
    stop(run.ctx, run.monitor)
    run.ctx.etcd.watcher.stop()
    run.ctx.etcd.presence.stop()


# -- submit ------------------------------------------------------------------------------------------------


def test_submit_pins_each_role_to_its_node_under_the_configured_account(make_run: MakeRun) -> None:
    run = make_run()
    submit(run.ctx, run.monitor)
    sbatch = run.cluster.ran("sbatch")
    assert len(sbatch) == 2
    by_role = {run.cluster.by_role(role).job_id: role for role in ("prefill", "decode")}
    for line in sbatch:
        assert line[:5] == ["sbatch", "--parsable", "--account=acct", "--partition=gpu", "--qos=normal"]
    prefill = run.cluster.by_role("prefill")
    assert f"--nodelist={PREFILL_NODE}" in prefill.argv and prefill.node == PREFILL_NODE
    assert f"--output={run.path}/logs/prefill.slurm.out" in prefill.argv
    assert f"--chdir={run.path}" in prefill.argv
    assert run.cluster.by_role("decode").node == DECODE_NODE
    assert {role: rec.job_id for role, rec in run.monitor.jobs.items()} == {r: j for j, r in by_role.items()}
    assert run.events("submitted") == [
        ("submitted", "prefill", f"node {PREFILL_NODE}"),
        ("submitted", "decode", f"node {DECODE_NODE}"),
    ]
    assert [e["job_id"] for e in run.timeline()] == [prefill.job_id, run.cluster.by_role("decode").job_id]
    assert run.monitor.job_states == {"prefill": "SUBMITTED", "decode": "SUBMITTED"}


def test_a_submission_slurm_refuses_fails_naming_sbatch_and_its_answer(make_run: MakeRun) -> None:
    run = make_run()
    run.cluster.refuse(
        "sbatch",
        1,
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination",
    )
    with pytest.raises(SlurmError, match=r"sbatch --parsable .* failed \(exit 1\): .*Invalid account"):
        submit(run.ctx, run.monitor)
    assert run.events("submitted") == []


# -- watch -------------------------------------------------------------------------------------------------


def test_watch_waits_for_every_registration_then_for_the_frontend_to_list_the_workers(
    make_run: MakeRun,
) -> None:
    run = make_run()
    _up(run)
    names = [e for e, _, _ in run.events()]
    assert names.index("healthy") == len(names) - 1
    assert sorted((e, r) for e, r, _ in run.events() if e in ("running", "registered")) == [
        ("registered", "decode"),
        ("registered", "prefill"),
        ("running", "decode"),
        ("running", "prefill"),
    ]
    for role, node in (("prefill", PREFILL_NODE), ("decode", DECODE_NODE)):
        reg = run.monitor.registrations[role]
        assert reg.node == node and reg.job_id == str(run.monitor.jobs[role].job_id)
        # The key, role and ports are the ones the job script's readiness helper line names.
        assert reg.ports[role] == run.ctx.ports[role].system
    assert run.monitor.job_states == {"prefill": "RUNNING", "decode": "RUNNING"}
    _clean_stop(run)


def test_a_role_held_in_the_queue_times_out_naming_its_pending_reason(make_run: MakeRun) -> None:
    run = make_run(ready_timeout_s=1.0)
    run.cluster.script("decode", Script(hold=True, pending_reason="Resources"))
    started = time.monotonic()
    with pytest.raises(LaunchFailure) as failure:
        _up(run)
    assert time.monotonic() - started < 5
    assert "timed out after 1 s waiting for every role to register" in str(failure.value)
    assert "decode: PENDING (Resources)" in str(failure.value)
    assert ("pending", "decode", "reason Resources") in run.events("pending")
    _clean_stop(run)
    assert run.cluster.by_role("decode").history == ["PENDING", "CANCELLED"]
    assert ("cancelled", "decode", "cancelled while pending") in run.events("cancelled")


def test_a_frontend_that_never_lists_the_prefill_times_out_naming_what_it_lists(
    make_run: MakeRun, frontend: tuple[FrontendBehaviour, int]
) -> None:
    frontend[0].instances = {"backend": 1}
    run = make_run(ready_timeout_s=1.0)
    with pytest.raises(LaunchFailure, match=r"frontend lists \{'backend': 1\} generate instances, needs"):
        _up(run)
    assert run.events("healthy") == []
    _clean_stop(run)


# -- a role that fails while the run waits -----------------------------------------------------------------


@pytest.mark.parametrize("accounting", [False, True], ids=["scontrol", "sacct"])
def test_a_job_that_ends_before_registering_fails_the_run_with_its_failure_line(
    make_run: MakeRun, cluster: FakeCluster, accounting: bool
) -> None:
    cluster.accounting = accounting
    run = make_run()
    line = "process decode exited first, on its own (exit 1): CUDA out of memory"
    run.cluster.script("decode", Script(register=False, exit_after_s=0.2, exit_code=1, failure=line))
    with pytest.raises(LaunchFailure) as failure:
        _up(run)
    job = run.cluster.by_role("decode")
    assert str(failure.value) == (
        f"job {job.job_id} (decode) ended early: FAILED, exit 1:0: {line} (see logs/decode.slurm.out)"
    )
    assert job.history == ["PENDING", "RUNNING", "COMPLETING", "FAILED"]
    _clean_stop(run)


def test_a_job_cancelled_by_someone_else_fails_the_run_naming_the_cancel(make_run: MakeRun) -> None:
    run = make_run()
    run.cluster.script("decode", Script(register_after_s=30.0))
    watch_etcd(run.ctx, run.monitor)
    submit(run.ctx, run.monitor)
    decode = run.cluster.by_role("decode")
    timer = threading.Timer(0.3, run.cluster.cancel, (decode.job_id,))
    timer.start()
    try:
        with pytest.raises(LaunchFailure) as failure:
            watch(run.ctx, run.monitor)
    finally:
        timer.cancel()
    assert str(failure.value).startswith(f"job {decode.job_id} (decode) ended early: CANCELLED, exit 0:15")
    _clean_stop(run)
    assert decode.signals == ["KILL"]  # nothing left to signal at the stop


def test_a_role_that_leaves_etcd_fails_the_run_before_its_job_has_ended(make_run: MakeRun) -> None:
    run = make_run()
    line = "process prefill exited first, on its own (exit 3)"
    run.cluster.script("prefill", Script(exit_after_s=0.6, exit_code=3, failure=line, exit_grace_s=5.0))
    run.cluster.script("decode", Script(register_after_s=30.0))  # the run is still waiting for it
    with pytest.raises(LaunchFailure) as failure:
        _up(run)
    assert "prefill" in run.monitor.registrations
    assert str(failure.value) == (
        f"role prefill left etcd: {line} (see logs/prefill.slurm.out and logs/prefill.*.log)"
    )
    assert run.cluster.by_role("prefill").state == "RUNNING"  # its script still stopping the rest
    _clean_stop(run)


def test_a_registration_the_launcher_cannot_read_fails_the_run_as_a_lost_watch(
    make_run: MakeRun, etcd: str
) -> None:
    run = make_run()
    run.cluster.script("decode", Script(register=False))
    watch_etcd(run.ctx, run.monitor)
    submit(run.ctx, run.monitor)
    EtcdClient(etcd).put(f"{run.ctx.etcd.prefix}decode", "not a registration")
    with pytest.raises(LaunchFailure, match=r"^lost the etcd watch: bad registration 'not a registration'"):
        watch(run.ctx, run.monitor)
    _clean_stop(run)


def test_a_job_that_runs_out_of_time_fails_the_run_as_timeout(make_run: MakeRun) -> None:
    run = make_run()
    run.cluster.script("prefill", Script(register=False, time_limit_s=0.2))
    with pytest.raises(LaunchFailure, match=r"\(prefill\) ended early: TIMEOUT, exit 0:0"):
        _up(run)
    _clean_stop(run)


# -- smoke -------------------------------------------------------------------------------------------------


def test_first_good_response_is_recorded_with_its_workers_and_the_metrics_at_ready(make_run: MakeRun) -> None:
    run = make_run()
    _up(run)
    first_good(run.ctx, run.monitor)
    assert run.events("first_good_response") == [
        ("first_good_response", None, "after 1 probe(s): prefill 11 decode 12")
    ]
    assert sorted(p.name for p in (run.path / "metrics-ready").iterdir()) == [
        "decode.decode.prom",
        "decode.frontend.prom",
        "prefill.prefill.prom",
    ]
    _clean_stop(run)


def test_a_healthy_pair_that_cannot_serve_fails_within_the_first_response_budget(
    make_run: MakeRun, frontend: tuple[FrontendBehaviour, int]
) -> None:
    run = make_run(first_response_timeout_s=1.0, ready_timeout_s=600.0)
    _up(run)
    frontend[0].completion_status = 500
    started = time.monotonic()
    with pytest.raises(LaunchFailure) as failure:
        first_good(run.ctx, run.monitor)
    assert time.monotonic() - started < 4
    assert "the first-response budget: --first-response-timeout" in str(failure.value)
    assert "HTTP 500" in str(failure.value)
    assert frontend[0].completions >= 2  # probed again until the budget ran out
    _clean_stop(run)


def test_smoke_requests_are_each_recorded_and_a_bad_one_fails_the_stage(
    make_run: MakeRun, frontend: tuple[FrontendBehaviour, int]
) -> None:
    run = make_run()
    _up(run)
    requests(run.ctx, run.monitor)
    assert run.events("requests_done") == [("requests_done", None, "4/4 ok")]
    assert len((run.path / "requests.jsonl").read_text().splitlines()) == 4
    frontend[0].disagg = False  # the decode worker answered alone: no P/D
    with pytest.raises(LaunchFailure, match=r"4 of 4 smoke requests failed; first: #0: .*"):
        requests(run.ctx, run.monitor)
    _clean_stop(run)


def test_ctrl_c_as_the_smoke_thread_starts_stops_its_requests(
    make_run: MakeRun, frontend: tuple[FrontendBehaviour, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35's Ctrl-C that did not stop: a SIGINT landing while Thread.start() waits for the smoke thread to
    run (a wait that grows with the machine's load) skipped stop.set(), and that thread sent every request of
    the run while the jobs stopped; the launcher could not exit until the last was answered."""
    sent_at_interrupt: list[int] = []

    class InterruptedStart(threading.Thread):
        def start(self) -> None:
            super().start()
            sent_at_interrupt.append(frontend[0].completions)
            raise KeyboardInterrupt  # the SIGINT, in start()'s wait for the new thread

    fake_threading = SimpleNamespace(Thread=InterruptedStart, Event=threading.Event, Lock=threading.Lock)
    monkeypatch.setattr(smoke_stage, "threading", fake_threading)
    run = make_run(requests=200, concurrency=1)
    _up(run)
    with pytest.raises(KeyboardInterrupt):
        requests(run.ctx, run.monitor)
    run.cluster.wait(lambda: not any(t.name.startswith("smoke") for t in threading.enumerate()), timeout_s=30)
    assert frontend[0].completions - sent_at_interrupt[0] <= 1  # at most the request already in flight
    assert len(run.monitor.results) <= 1
    _clean_stop(run)


# -- stop --------------------------------------------------------------------------------------------------


def test_stop_signals_each_job_script_and_waits_until_slurm_has_them_completed(make_run: MakeRun) -> None:
    run = make_run()
    _up(run)
    stop(run.ctx, run.monitor)
    jobs = {role: run.cluster.by_role(role) for role in ("prefill", "decode")}
    assert run.cluster.ran("scancel") == [
        ["scancel", "--batch", "--signal=TERM", str(jobs["prefill"].job_id)],
        ["scancel", "--batch", "--signal=TERM", str(jobs["decode"].job_id)],
    ]
    for job in jobs.values():
        assert job.signals == ["TERM (batch)"]
        assert job.history == ["PENDING", "RUNNING", "COMPLETING", "COMPLETED"]
    assert run.monitor.job_states == {"prefill": "COMPLETED", "decode": "COMPLETED"}
    assert [d for _, _, d in run.events("cancelled")] == ["SIGTERM to the job script"] * 2
    assert run.monitor.hard_cancelled == {}


def test_a_refused_sigterm_is_retried_and_then_delivered(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stop_stage, "SIGNAL_RETRY_INTERVAL_S", 0.05)
    run = make_run()
    _up(run)
    refusal = f"scancel: error: Kill job error on job id X: {TIMED_OUT}"
    run.cluster.refuse("scancel", 2, refusal, match=lambda argv: "--batch" in argv)
    stop(run.ctx, run.monitor)
    assert run.printed().count("SIGTERM not delivered") == 2
    assert len(run.cluster.ran("scancel")) == 4  # two refused, then one per job
    assert run.monitor.hard_cancelled == {}
    assert run.monitor.job_states == {"prefill": "COMPLETED", "decode": "COMPLETED"}
    assert run.cluster.by_role("prefill").signals == ["TERM (batch)"]


def test_a_sigterm_never_delivered_cancels_the_job_hard_and_the_record_says_so(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stop_stage, "SIGNAL_RETRY_INTERVAL_S", 0.05)
    monkeypatch.setattr(stop_stage, "SIGNAL_RETRY_S", 0.3)
    run = make_run()
    _up(run)
    refusal = f"scancel: error: Kill job error on job id X: {TIMED_OUT}"
    run.cluster.refuse("scancel", 1000, refusal, match=lambda argv: "--batch" in argv)
    stop(run.ctx, run.monitor)
    for role in ("prefill", "decode"):
        job = run.cluster.by_role(role)
        assert job.signals == ["KILL"] and job.state == "CANCELLED"
        assert TIMED_OUT in run.monitor.hard_cancelled[role]
    outcome = record(run.ctx, run.monitor)
    assert not outcome.passed
    assert outcome.failure is not None and outcome.failure.startswith(
        "jobs did not stop cleanly: prefill (CANCELLED"
    )
    assert "cancelled: SIGTERM not delivered" in outcome.failure
    assert run.run_json()["result"] == "fail"


def test_a_job_that_ignores_sigterm_is_cancelled_hard_after_the_settle_timeout(make_run: MakeRun) -> None:
    run = make_run(settle_timeout_s=0.5)
    run.cluster.script("decode", Script(on_term="ignore"))
    _up(run)
    started = time.monotonic()
    stop(run.ctx, run.monitor)
    assert time.monotonic() - started < 4
    decode = run.cluster.by_role("decode")
    assert decode.signals == ["TERM (batch)", "KILL"]
    assert decode.history[-2:] == ["COMPLETING", "CANCELLED"]
    assert run.cluster.by_role("prefill").state == "COMPLETED"
    assert "did not stop within the settle timeout: cancelling them" in run.printed()
    assert run.monitor.job_states["decode"] == "CANCELLED"


def test_a_job_on_a_node_slurm_marked_down_is_named_with_the_node(make_run: MakeRun) -> None:
    """A dead slurmd cannot signal its job (it ignores SIGTERM, as far as Slurm can tell): the stop reads the
    node's state and the progress line and the headline say it."""
    run = make_run(settle_timeout_s=0.5)
    run.cluster.script("decode", Script(on_term="ignore"))
    _up(run)
    decode = run.cluster.by_role("decode")
    assert decode.node is not None
    run.cluster.mark_down(decode.node)
    stop(run.ctx, run.monitor)
    down = f"Slurm has {decode.node} down* (Not responding)"
    assert f"cancelling them (decode: not ended; {down})" in run.printed()
    assert run.monitor.nodes_down == {"decode": down}
    record(run.ctx, run.monitor)
    failure = run.monitor.failure
    assert failure is not None and failure.startswith("jobs did not stop cleanly: decode (CANCELLED, exit ")
    assert failure.endswith(f"; {down})"), failure


def test_a_job_that_ended_as_its_sigterm_was_sent_is_recorded_as_already_ending(make_run: MakeRun) -> None:
    run = make_run()
    _up(run)
    decode = run.cluster.by_role("decode")
    run.cluster.refuse(
        "scancel",
        1,
        "",  # scancel says nothing of a job already done; its status does (ESLURM_ALREADY_DONE)
        returncode=EXIT_ALREADY_DONE,
        match=lambda argv: str(decode.job_id) in argv,
        then=lambda: run.cluster.finish(decode.job_id),
    )
    stop(run.ctx, run.monitor)
    detail = dict((r, d) for _, r, d in run.events("cancelled"))["decode"]
    assert detail is not None and detail.startswith("scancel failed (scancel --batch --signal=TERM")
    assert detail.endswith(f"(exit {EXIT_ALREADY_DONE}): ); the job was already COMPLETING")
    assert decode.signals == [] and decode.state == "COMPLETED"
    assert run.monitor.hard_cancelled == {}


def test_a_controller_silent_while_the_jobs_stop_is_asked_again(make_run: MakeRun) -> None:
    run = make_run()
    _up(run)
    run.cluster.refuse("squeue", 3, f"slurm_load_jobs error: {TIMED_OUT}")
    stop(run.ctx, run.monitor)
    assert "Slurm did not answer while the jobs stop" in run.printed()
    assert run.monitor.job_states == {"prefill": "COMPLETED", "decode": "COMPLETED"}


# -- record ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("accounting", [False, True], ids=["scontrol", "sacct"])
def test_record_writes_each_jobs_final_state_and_placement(
    make_run: MakeRun, cluster: FakeCluster, etcd: str, accounting: bool
) -> None:
    cluster.accounting = accounting
    cluster.min_job_age_s = 1.0  # the controller forgets a job soon after it ended: the last answer stands
    run = make_run()
    _up(run)
    _clean_stop(run)
    cluster.wait(lambda: all(cluster.by_role(r).purged for r in ("prefill", "decode")))
    outcome = record(run.ctx, run.monitor)
    assert outcome.passed, outcome.failure
    data = run.run_json()
    assert data["result"] == "pass" and data["placement_verified"] is True
    jobs = {j["role"]: j for j in data["jobs"]}
    for role, node in (("prefill", PREFILL_NODE), ("decode", DECODE_NODE)):
        assert (jobs[role]["state"], jobs[role]["exit_code"]) == ("COMPLETED", "0:0")
        assert jobs[role]["node_requested"] == jobs[role]["node_ran"] == node
    calls = data["slurm_calls"]["calls"]
    assert calls["sbatch"] == 2 and calls["scancel"] == 2
    assert ("sacct" in calls) == accounting
    assert run.events()[-1] == ("done", None, "pass")
    keys, _ = EtcdClient(etcd).get_prefix(run.ctx.etcd.prefix)
    assert keys == {}  # the run's keys deleted


def test_record_of_a_job_slurm_placed_elsewhere_fails_the_placement_check(make_run: MakeRun) -> None:
    run = make_run()
    run.cluster.script("decode", Script(runs_on="gpu-node-03"))
    _up(run)
    assert run.monitor.registrations["decode"].node == "gpu-node-03"  # where it ran, as its helper says
    _clean_stop(run)
    outcome = record(run.ctx, run.monitor)
    assert outcome.failure is not None and outcome.failure.startswith("placement not verified:")
    assert f"decode asked {DECODE_NODE} ran gpu-node-03" in outcome.failure
    assert run.run_json()["placement_verified"] is False


# -- the whole run: serve ----------------------------------------------------------------------------------


def test_a_run_over_the_fake_passes_and_stops_every_job_cleanly(make_run: MakeRun) -> None:
    run = make_run()
    outcome = serve(run.ctx, run.monitor)
    assert outcome.passed, outcome.failure
    names = [e for e, _, _ in run.events()]
    for first, then in [("submitted", "running"), ("registered", "healthy"), ("healthy", "first_good_response"),
                        ("requests_done", "cancelled"), ("cancelled", "done")]:  # fmt: skip
        assert names.index(first) < names.index(then), names
    assert {role: run.cluster.by_role(role).state for role in ("prefill", "decode")} == {
        "prefill": "COMPLETED",
        "decode": "COMPLETED",
    }
    assert run.run_json()["requests_ok"] == 4


def test_a_role_failing_while_the_run_waits_fails_the_run_and_still_stops_and_records(
    make_run: MakeRun,
) -> None:
    run = make_run()
    line = "process decode exited first, on its own (exit 1)"
    run.cluster.script("decode", Script(register=False, exit_after_s=0.2, failure=line))
    outcome = serve(run.ctx, run.monitor)
    assert not outcome.passed
    assert outcome.failure is not None and "(decode) ended early: FAILED, exit 1:0" in outcome.failure
    assert ("failed", None, outcome.failure) in run.events("failed")
    prefill = run.cluster.by_role("prefill")
    assert prefill.signals == ["TERM (batch)"] and prefill.state == "COMPLETED"
    data = run.run_json()
    assert data["result"] == "fail" and data["failure"] == outcome.failure
    assert "diagnosis" in data
    assert {j["role"]: j["state"] for j in data["jobs"]} == {"prefill": "COMPLETED", "decode": "FAILED"}


def test_a_run_past_its_readiness_deadline_fails_and_cancels_what_is_still_queued(make_run: MakeRun) -> None:
    run = make_run(ready_timeout_s=1.0)
    run.cluster.script("prefill", Script(hold=True, pending_reason="Resources"))
    outcome = serve(run.ctx, run.monitor)
    assert outcome.failure is not None and outcome.failure.startswith(
        "timed out after 1 s waiting for every role"
    )
    assert run.cluster.by_role("prefill").state == "CANCELLED"
    assert run.cluster.by_role("decode").state == "COMPLETED"
    assert run.events()[-1] == ("done", None, f"fail: {outcome.failure}")


# -- inside an allocation: the roles as job steps -----------------------------------------------------------


def test_inside_an_allocation_each_role_is_a_step_signalled_alone_and_the_allocation_left_running(
    make_run: MakeRun, cluster: FakeCluster
) -> None:
    allocation = cluster.allocate([PREFILL_NODE, DECODE_NODE])
    run = make_run(allocation=allocation)
    outcome = serve(run.ctx, run.monitor)
    assert outcome.passed, outcome.failure
    srun = cluster.ran("srun")
    assert len(srun) == 2 and all(line[1] == f"--jobid={allocation}" for line in srun)
    steps = {role: cluster.by_role(role) for role in ("prefill", "decode")}
    for step in steps.values():
        assert step.step_id is not None and step.signals == ["TERM"] and step.state == "COMPLETED"
        assert ["scancel", "--signal=TERM", f"{allocation}.{step.step_id}"] in cluster.ran("scancel")
    assert cluster.job(allocation).state == "RUNNING"
    assert not [c for c in cluster.ran("scancel") if str(allocation) in c]
    jobs = {j["role"]: j for j in run.run_json()["jobs"]}
    assert jobs["decode"]["step_id"] == steps["decode"].step_id
    assert run.run_json()["allocation"]["job_id"] == allocation


# -- interrupts ----------------------------------------------------------------------------------------------


def _interrupt_at(event: str, times: int = 1) -> tuple[Hook, list[str]]:
    """A hook that raises KeyboardInterrupt (Ctrl-C) at the first ``times`` timeline events named ``event``."""
    seen: list[str] = []

    def hook(name: str, details: dict[str, object]) -> None:
        seen.append(name)
        if name == event and seen.count(event) <= times:
            raise KeyboardInterrupt

    return hook, seen


def test_ctrl_c_while_waiting_stops_every_job_gracefully_and_records_the_interrupt(make_run: MakeRun) -> None:
    hook, _ = _interrupt_at("registered")
    run = make_run(hook=hook)
    outcome = serve(run.ctx, run.monitor)
    assert outcome.failure == "interrupted (Ctrl-C or SIGTERM): jobs stopped"
    for role in ("prefill", "decode"):
        job = run.cluster.by_role(role)
        assert job.signals == ["TERM (batch)"] and job.state == "COMPLETED"
    assert run.run_json()["result"] == "fail"


def test_a_second_ctrl_c_during_the_stop_cancels_the_jobs_hard(make_run: MakeRun) -> None:
    hook, _ = _interrupt_at("registered")
    second, _ = _interrupt_at("cancelled")

    def both(name: str, details: dict[str, object]) -> None:
        hook(name, details)
        second(name, details)

    run = make_run(hook=both)
    outcome = serve(run.ctx, run.monitor)
    assert outcome.failure == "interrupted (Ctrl-C or SIGTERM): jobs stopped"  # the first failure stands
    for role in ("prefill", "decode"):
        job = run.cluster.by_role(role)
        assert job.signals[-1] == "KILL" and job.state == "CANCELLED", (role, job.signals)
    assert (
        run.cluster.ran("scancel")[-1][:1] == ["scancel"]
        and "--signal=TERM" not in run.cluster.ran("scancel")[-1]
    )


def test_a_controller_that_stops_answering_at_ctrl_c_cannot_hold_the_launcher(
    make_run: MakeRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every wait of the stop path has a deadline and they add up: with slurmctld frozen from the Ctrl-C on (each
    command waits out its 5 s timeout), the run still ends within its budgets (SIGTERM retries and settle, the
    hard cancel, the record) instead of one timeout per command and retry, and says what it could not confirm."""
    monkeypatch.setattr(stop_stage, "SIGNAL_RETRY_S", 1.0)
    monkeypatch.setattr(launch, "RECORD_SLURM_S", 1.0)
    monkeypatch.setattr(launch, "CLOSE_SLURM_S", 1.0)
    interrupt, _ = _interrupt_at("registered")

    def freeze_then_interrupt(name: str, details: dict[str, object]) -> None:
        if name == "registered":
            run.cluster.stop_answering()  # slurmctld freezes as the first role registers; then Ctrl-C
        interrupt(name, details)

    run = make_run(hook=freeze_then_interrupt, settle_timeout_s=1.0)
    run.ctx.slurm.timeout = 5.0
    started = time.monotonic()
    outcome = serve(run.ctx, run.monitor)
    took = time.monotonic() - started
    # stop: 1 s of SIGTERM retries + 1 s settle; cancel_hard: 1 s; close and record: 1 s each; etcd and slack
    assert took < 12, f"the stop took {took:.0f} s"
    assert outcome.failure == "interrupted (Ctrl-C or SIGTERM): jobs stopped"
    printed = run.printed()
    for role in ("prefill", "decode"):
        job_id = run.monitor.jobs[role].job_id
        assert f"NOT CONFIRMED: job {job_id} ({role}) ended: last seen " in printed, printed
        assert "Slurm did not answer within 1 s of scancel" in printed
        assert f"NOT CONFIRMED: the final state of job {job_id} ({role})" in printed


# -- other runs: aggregated, the NIXL probe -----------------------------------------------------------------


def test_an_aggregated_run_over_the_fake_passes_with_one_job(
    make_run: MakeRun, frontend: tuple[FrontendBehaviour, int]
) -> None:
    frontend[0].instances, frontend[0].disagg = {"backend": 1}, False
    run = make_run("agg-single")
    outcome = serve(run.ctx, run.monitor)
    assert outcome.passed, outcome.failure
    assert len(run.cluster.ran("sbatch")) == 1 and run.cluster.by_role("agg").node == PREFILL_NODE
    assert run.run_json()["requests_ok"] == 4


def test_the_probe_passes_when_both_one_shot_jobs_exit_0(make_run: MakeRun, cluster: FakeCluster) -> None:
    for role in ("prefill", "decode"):
        cluster.script(role, Script(register=False, exit_after_s=0.2, exit_code=0))
    run = make_run(engine="vllm-cpu", probe=ProbeOptions(timeout_s=1.0))
    outcome = serve(run.ctx, run.monitor)
    assert outcome.passed, outcome.failure
    assert sorted(str(r) for _, r, _ in run.events("finished")) == ["decode", "prefill"]
    assert run.events("registered") == [] and run.cluster.ran("scancel") == []  # nothing left to stop
    assert run.run_json()["probe"]["kind"] == "nixl-pair"


def test_the_probe_fails_at_once_when_one_side_exits_non_zero(
    make_run: MakeRun, cluster: FakeCluster
) -> None:
    cluster.script("prefill", Script(register=False, exit_after_s=0.2, exit_code=2, failure="READ timed out"))
    cluster.script("decode", Script(register=False))  # still waiting for its peer
    run = make_run(engine="vllm-cpu", probe=ProbeOptions(timeout_s=30.0))
    started = time.monotonic()
    outcome = serve(run.ctx, run.monitor)
    assert time.monotonic() - started < 10  # not the probe's 2 x 30 s budget
    assert outcome.failure is not None
    assert "(prefill) ended early: FAILED, exit 2:0: READ timed out" in outcome.failure
    assert run.cluster.by_role("decode").signals == ["TERM (batch)"]


def test_a_step_not_listed_yet_when_the_run_stops_has_its_srun_stopped(
    make_run: MakeRun, cluster: FakeCluster
) -> None:
    allocation = cluster.allocate([PREFILL_NODE, DECODE_NODE])
    cluster.script("decode", Script(pending_s=60.0))  # srun still waiting for the step to start
    run = make_run(allocation=allocation, ready_timeout_s=1.0)
    outcome = serve(run.ctx, run.monitor)
    assert outcome.failure is not None and "decode: PENDING (StepNotListed)" in outcome.failure
    decode = cluster.by_role("decode")
    assert decode.state == "CANCELLED" and decode.step_id is not None
    assert ("cancelled", "decode", "srun stopped before its step was listed") in run.events("cancelled")
    assert [c for c in cluster.ran("scancel") if f"{allocation}.{decode.step_id}" in c] == []
    assert cluster.job(allocation).state == "RUNNING"


# -- orphans: a run whose launcher died ---------------------------------------------------------------------


def test_a_dead_launchers_run_has_its_jobs_stopped_keys_deleted_and_lease_released(
    make_run: MakeRun, cluster: FakeCluster, etcd: str
) -> None:
    old = make_run()
    watch_etcd(old.ctx, old.monitor)
    submit(old.ctx, old.monitor)
    cluster.wait(lambda: all(cluster.by_role(r).lease is not None for r in ("prefill", "decode")))
    shared, run_id = old.ctx.config.shared_dir, old.ctx.rundir.run_id
    ports.allocate(shared, run_id, old.path, [("prefill", 1), ("decode", 0)])
    lease_file = ports.lease_dir(shared) / f"{run_id}.json"
    lease = json.loads(lease_file.read_text())
    lease["launcher"]["start_time"] = 1  # the process that held it is gone (its pid runs something else now)
    lease_file.write_text(json.dumps(lease))
    old.ctx.etcd.watcher.stop()  # the launcher died: nothing of it watches or stops anything
    old.ctx.etcd.presence.stop()

    new = make_run()
    clean_before_run(new.ctx.config, new.ctx.slurm, new.ctx.progress)
    jobs = {role: cluster.by_role(role) for role in ("prefill", "decode")}
    for job in jobs.values():
        assert job.signals == ["TERM (batch)"] and job.state == "COMPLETED"
    note = json.loads((old.path / "orphan-cleanup.json").read_text())
    assert note["jobs_stopped"] == sorted(j.job_id for j in jobs.values())
    assert (note["jobs_cancelled_hard"], note["etcd_keys"]) == ([], "deleted")
    assert EtcdClient(etcd).get_prefix(f"atomdyn/runs/{run_id}/")[0] == {}
    assert all(lease.run_id != run_id for lease in ports.leases(shared))
    assert f"orphaned run {run_id}: stopped jobs" in new.printed()
    found = diagnose_run(old.path)  # no run.json: the cleanup's line in its logs names the run
    assert found.first is not None and found.first.entry.id == "launcher-died-run-orphaned", found.text()
    assert ["squeue", "--me", "-h", "-o", "%i|%T|%Z"] in cluster.ran("squeue")


# -- Launch.run: orphans, preflight, run directory, port lease, etcd session, the stages --------------------


def _launch_config(etcd: str, runs: Path, tmp_path: Path) -> ClusterConfig:
    """The fake cluster's configuration with a venv and a model directory the preflight finds."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    mocker = venv / "lib" / "python3.12" / "site-packages" / "dynamo" / "mocker"
    mocker.mkdir(parents=True)
    (mocker / "__main__.py").write_text("")
    (tmp_path / "model").mkdir()
    return dataclasses.replace(
        fake_config(etcd, runs.parent), python_venv=venv, model_path=tmp_path / "model"
    )


def test_launch_refuses_a_partition_slurm_does_not_have_before_anything_is_created(
    cluster: FakeCluster, etcd: str, runs: Path, tmp_path: Path
) -> None:
    cluster.partition = "cpu"
    config = _launch_config(etcd, runs, tmp_path)
    options = LaunchOptions(kind="disagg", node_check=False, runs_root=tmp_path / "runs")
    launch = Launch(
        config, options, slurm=FakeSlurm(config, cluster), progress=Progress(stream=io.StringIO())
    )
    with pytest.raises(PreflightError, match=r"SLURM_PARTITION 'gpu' does not exist \(partitions: cpu\)"):
        launch.run()
    assert cluster.ran("sbatch") == [] and not (tmp_path / "runs").exists()


def test_launch_of_a_failing_role_records_the_run_and_releases_its_port_lease(
    cluster: FakeCluster, etcd: str, runs: Path, tmp_path: Path
) -> None:
    cluster.script("decode", Script(register=False, exit_after_s=0.2, failure="process decode exited first"))
    config = _launch_config(etcd, runs, tmp_path)
    options = LaunchOptions(kind="disagg", node_check=False, runs_root=tmp_path / "runs", requests=2)
    output = io.StringIO()
    outcome = Launch(
        config, options, slurm=FakeSlurm(config, cluster), progress=Progress(stream=output)
    ).run()
    assert (
        outcome.failure is not None
        and "(decode) ended early: FAILED, exit 1:0: process decode" in outcome.failure
    )
    data = json.loads((outcome.run_dir / "run.json").read_text())
    assert (
        data["result"] == "fail"
        and data["ports"]["decode"]
        == json.loads((outcome.run_dir / "ports.json").read_text())["roles"]["decode"]
    )
    assert all(lease.run_id != outcome.run_id for lease in ports.leases(config.shared_dir))
    assert cluster.by_role("prefill").state == "COMPLETED"
    # What the preflight asked of Slurm, through the real client: the partition and the nodes.
    assert ["sinfo", "-h", "-o", "%P"] in cluster.ran("sinfo")
    assert ["sinfo", "-h", "-N", "-o", "%N %T", "--partition=gpu"] in cluster.ran("sinfo")
