"""A run inside an existing allocation (``--allocation``), without a cluster: the option and its detection
inside salloc, the allocation checks, the srun command line, the steps as squeue lists them and how a step's
end is read from srun."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from golden_launch import golden_config

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError, load_cluster_config
from atomdyn_launchers.config.recipes import load_recipe
from atomdyn_launchers.contract.rundir import JobRecord, RunRecord
from atomdyn_launchers.nodes import etcd_owned
from atomdyn_launchers.nodes import jobs as node_jobs
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.launch import dry_run
from atomdyn_launchers.run.options import Flags, LaunchOptions, OptionError, parse_allocation, resolve
from atomdyn_launchers.run.preflight import check_allocation
from atomdyn_launchers.slurm.client import Allocation, Slurm, SlurmError, parse_steps
from atomdyn_launchers.slurm.steps import RoleStep, step_name, step_owner

CONFIG: ClusterConfig = golden_config("mocker", "venv")
SALLOC = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NNODES": "2"}


def test_allocation_flag_is_a_job_id_or_none() -> None:
    assert parse_allocation("17", {}) == (17, False)
    assert parse_allocation(17, {}) == (17, False)
    for off in ("none", "None", "no", "off"):
        assert parse_allocation(off, SALLOC) == (None, False)  # batch jobs even inside salloc
    for bad in ("abc", "17.2", "-3", "0"):
        with pytest.raises(OptionError, match="--allocation must be a Slurm job id or 'none'"):
            parse_allocation(bad, {})


def test_allocation_is_detected_only_in_a_salloc_shell() -> None:
    assert parse_allocation(None, SALLOC) == (4242, True)
    assert parse_allocation("", SALLOC) == (4242, True)  # an empty flag is no flag
    assert parse_allocation("9", SALLOC) == (9, False)  # the flag wins
    assert parse_allocation(None, {}) == (None, False)
    # Inside a job step (srun --pty bash, a step of the allocation): not the salloc shell.
    assert parse_allocation(None, {**SALLOC, "SLURM_STEP_ID": "0"}) == (None, False)
    # Inside a batch script (a CI job run by sbatch): its own job is no allocation to run in.
    assert parse_allocation(None, {**SALLOC, "ENVIRONMENT": "BATCH"}) == (None, False)
    assert parse_allocation(None, {"SLURM_JOB_ID": "x"}) == (None, False)


def test_flags_carry_the_allocation_into_the_options(tmp_path: Path) -> None:
    flags = Flags.parse(allocation=None, environ=SALLOC)
    options = resolve("disagg", "disagg", flags)
    assert (options.allocation, options.allocation_detected) == (4242, True)
    assert resolve("disagg", "disagg", Flags.parse(allocation="12")).allocation == 12
    assert resolve("disagg", "disagg", Flags.parse()).allocation is None  # no environment: nothing detected
    recipe = Path(__file__).resolve().parents[4] / "recipes" / "rehearsal-1p1d.yaml"
    with_recipe = resolve("disagg", None, Flags.parse(allocation="12"), load_recipe(recipe))
    assert with_recipe.allocation == 12 and not with_recipe.allocation_detected


class FakeSlurm(Slurm):
    """Slurm whose commands answer from a table (argv prefix -> stdout), recording what was run."""

    def __init__(self, answers: dict[tuple[str, ...], str]) -> None:
        super().__init__(CONFIG)
        self.answers = answers
        self.ran = []

    def run(self, args: Sequence[str], *, env: object = None) -> str:  # type: ignore[override]
        self.ran.append(list(args))
        for prefix, out in self.answers.items():
            if tuple(args[: len(prefix)]) == prefix:
                return out
        raise AssertionError(f"unexpected command {args}")


def _slurm(state: str = "RUNNING", node_list: str = "node[1-2]") -> FakeSlurm:
    return FakeSlurm(
        {
            ("scontrol", "show", "job"): f"JobId=77 JobName=hold JobState={state} Reason=None "
            f"NodeList={node_list} BatchHost=node1\n",
            ("scontrol", "show", "hostnames"): "\n".join(
                {"node[1-2]": ["node1", "node2"], "node1": ["node1"]}[node_list]
            )
            + "\n",
        }
    )


def test_the_allocation_is_read_and_its_nodes_expanded() -> None:
    slurm = _slurm()
    alloc = slurm.allocation(77)
    assert alloc == Allocation(77, "RUNNING", "node[1-2]", ("node1", "node2"))
    assert ["scontrol", "show", "hostnames", "node[1-2]"] in slurm.ran


def test_a_node_outside_the_allocation_is_refused_naming_node_and_allocation() -> None:
    options = LaunchOptions(kind="disagg", allocation=77)
    with pytest.raises(PreflightError) as err:
        check_allocation(_slurm(node_list="node1"), options, ["node1", "node2"])
    assert "node 'node2' is not in allocation 77 (its nodes: node1)" in str(err.value)
    assert check_allocation(_slurm(), options, ["node1", "node2"]) == Allocation(
        77, "RUNNING", "node[1-2]", ("node1", "node2")
    )
    assert check_allocation(_slurm(), LaunchOptions(kind="disagg"), ["node1"]) is None


def test_an_allocation_not_running_is_refused() -> None:
    for state in ("PENDING", "COMPLETED", "CANCELLED"):
        with pytest.raises(PreflightError, match=f"allocation 77 is {state}, not RUNNING"):
            check_allocation(_slurm(state), LaunchOptions(kind="disagg", allocation=77), ["node1"])


def test_a_detected_allocation_that_fails_says_how_to_opt_out() -> None:
    options = LaunchOptions(kind="disagg", allocation=77, allocation_detected=True)
    with pytest.raises(PreflightError, match="SLURM_JOB_ID of this shell; --allocation none"):
        check_allocation(_slurm("COMPLETED"), options, ["node1"])


def test_an_unknown_allocation_is_named() -> None:
    class Unknown(FakeSlurm):
        def run(self, args: Sequence[str], *, env: object = None) -> str:  # type: ignore[override]
            raise SlurmError(
                "scontrol show job -o 5 failed (exit 1): slurm_load_jobs error: Invalid job id specified"
            )

    with pytest.raises(PreflightError, match="allocation 5 is not a job of this cluster"):
        check_allocation(Unknown({}), LaunchOptions(kind="disagg", allocation=5), ["node1"])


def test_the_srun_command_line() -> None:
    slurm = Slurm(CONFIG)
    args = slurm.srun_args(
        allocation=77,
        nodelist="node2",
        job_name="atomdyn-decode",
        gres="gpu:1",
        output=Path("/runs/r/logs/decode.slurm.out"),
        chdir=Path("/runs/r"),
    )
    assert args == [
        "srun",
        "--jobid=77",
        "--nodelist=node2",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "--input=none",
        "--open-mode=append",
        "--job-name=atomdyn-decode",
        "--gres=gpu:1",
        "--output=/runs/r/logs/decode.slurm.out",
        "--chdir=/runs/r",
    ]
    # Neither account, partition nor QoS: a step runs under its allocation's.
    assert not any(a.startswith(("--account", "--partition", "--qos")) for a in args)


def test_steps_as_squeue_lists_them() -> None:
    out = "77.batch|batch|node1\n77.extern|extern|node[1-2]\n77.3|atomdyn-prefill|node1\n77.4|atomdyn-decode|node2\n"
    steps = parse_steps(out)
    assert [(s.job_id, s.step_id, s.name, s.nodes) for s in steps] == [
        (77, 3, "atomdyn-prefill", "node1"),
        (77, 4, "atomdyn-decode", "node2"),
    ]


def _step(code: int | None, *, step_id: int | None = 3, hard: bool = False) -> RoleStep:
    class Done:
        def poll(self) -> int | None:
            return code

    step = RoleStep("decode", 77, "atomdyn-decode", "node2", Done())  # type: ignore[arg-type]
    step.step_id, step.nodes, step.cancelled_hard = step_id, "node2" if step_id else None, hard
    return step


def test_a_steps_state_comes_from_srun() -> None:
    pending = _step(None, step_id=None).info()
    assert (pending.state, pending.reason, pending.job_id, pending.step_id) == (
        "PENDING",
        "StepNotListed",
        77,
        None,
    )
    running = _step(None).info()
    assert (running.state, running.nodes, running.terminal) == ("RUNNING", "node2", False)
    done = _step(0).info()
    assert (done.state, done.exit_code, done.succeeded, done.step_id) == ("COMPLETED", (0, 0), True, 3)
    failed = _step(137).info()  # the script's own exit status, as a batch job's reads 137:0
    assert (failed.state, failed.exit_code) == ("FAILED", (137, 0))
    cancelled = _step(137, hard=True).info()
    assert (cancelled.state, cancelled.terminal) == ("CANCELLED", True)
    killed = _step(-9).info()
    assert (killed.state, killed.exit_code, killed.reason) == ("FAILED", (0, 9), "srun ended by signal 9")


def test_a_signal_to_a_step_never_reaches_the_allocation() -> None:
    slurm = FakeSlurm({("scancel",): ""})
    slurm.signal_step(77, 3)
    slurm.cancel_step(77, 3)
    assert slurm.ran == [["scancel", "--signal=TERM", "77.3"], ["scancel", "77.3"]]


def test_run_json_records_a_step_and_leaves_batch_jobs_as_they_were() -> None:
    batch = JobRecord("prefill", 12, "node1", "node1", "COMPLETED", "0:0", "0:0")
    assert "step_id" not in batch.to_json()
    step = JobRecord("decode", 77, "node2", "node2", "COMPLETED", "0:0", None, step_id=4)
    assert step.to_json()["step_id"] == 4
    raw = RunRecord.from_json({"jobs": [batch.to_json(), step.to_json()]})
    assert raw.jobs is not None and [j.step_id for j in raw.jobs] == [None, 4]
    assert raw.jobs[1].ended_cleanly


def test_srun_starts_in_a_session_of_its_own(tmp_path: Path) -> None:
    """The launcher's Ctrl-C and exit do not reach srun: it leads its own session; its messages go to the log."""
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/bash\n")
    fake = tmp_path / "srun"
    fake.write_text('#!/bin/sh\necho "srun $* sid=$(ps -o sid= -p $$)"\n')
    fake.chmod(0o755)
    log = tmp_path / "role.slurm.out"
    log.write_text("earlier line\n")
    slurm = Slurm(CONFIG)
    proc = slurm.start_step([str(fake), "--jobid=7", "bash"], script, log=log)
    assert proc.wait(timeout=10) == 0
    lines = log.read_text().splitlines()
    assert lines[0] == "earlier line"  # appended, as sbatch --output and srun --open-mode=append do
    words = lines[1].split()
    assert words[1:4] == ["--jobid=7", "bash", str(script)]
    assert int(words[-1].removeprefix("sid=")) == proc.pid
    assert slurm.call_counts()["calls"] == {"srun": 1}


def test_a_dry_run_inside_an_allocation_lists_the_srun_lines(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[4] / "config" / "cluster.env.example").read_text(
        encoding="utf-8"
    )
    text = re.sub(r"^SHARED_DIR=\S+", f"SHARED_DIR={tmp_path / 'shared'}", text, flags=re.M)
    (tmp_path / "shared").mkdir()
    env = tmp_path / "cluster.env"
    env.write_text(text, encoding="utf-8")
    config = load_cluster_config(env)
    options = resolve("disagg", "disagg", Flags(offline=True, allocation=77))
    path = dry_run(options, config, progress=Progress(enabled=False), slurm=FakeSlurm({}))
    plan = json.loads((path / "dry-run.json").read_text(encoding="utf-8"))
    assert plan["allocation"] == 77
    for role in plan["roles"]:
        assert "sbatch" not in role
        srun = role["srun"]
        assert srun[:5] == ["srun", "--jobid=77", f"--nodelist={role['node']}", "--nodes=1", "--ntasks=1"]
        assert srun[-2:] == ["bash", str(path / role["script"])]
        assert f"--job-name=atomdyn-{Path(role['script']).stem}@{path.name}" in srun  # the run's id
        assert f"--output={path / 'logs' / (Path(role['script']).stem + '.slurm.out')}" in srun


class StepSlurm(FakeSlurm):
    """FakeSlurm whose srun is recorded and runs ``act(argv)`` instead (a quick real child for the process)."""

    def __init__(self, answers: dict[tuple[str, ...], str], act: object = None) -> None:
        super().__init__(answers)
        self.started: list[list[str]] = []
        self.act = act

    def start_step(self, args: Sequence[str], script: Path, *, log: Path, env: object = None):  # type: ignore[no-untyped-def, override]
        self.started.append([*args, str(script)])
        if callable(self.act):
            self.act([*args, str(script)])
        return subprocess.Popen(["true"])

    def submit(self, *args: object, **kwargs: object) -> int:  # type: ignore[override]
        raise AssertionError("no batch job may be submitted inside an allocation")


def test_the_node_checks_srun_line_is_a_step_of_the_allocation(tmp_path: Path) -> None:
    work = tmp_path / "check-20261202T000000Z-abc123"
    assert node_jobs.step_args(Slurm(CONFIG), 77, "node2", label="check", work=work) == [
        "srun",
        "--jobid=77",
        "--nodelist=node2",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "--input=none",
        "--open-mode=append",
        "--job-name=atomdyn-check@check-20261202T000000Z-abc123",
        f"--output={work}/check-node2.out",
        f"--chdir={work}",
        "bash",
    ]


def test_the_node_check_inside_an_allocation_runs_steps_and_no_batch_job(tmp_path: Path) -> None:
    work = tmp_path / "check-w"
    work.mkdir()

    def node_side(argv: list[str]) -> None:  # what the check's script writes on its node
        node = next(a for a in argv if a.startswith("--nodelist=")).split("=")[1]
        (work / f"check-{node}.json").write_text(json.dumps({"node": node, "ok": True}))

    slurm = StepSlurm({("squeue", "-s"): ""}, node_side)
    runs = node_jobs.submit_and_wait(
        CONFIG,
        ["node1", "node2"],
        work=work,
        label="check",
        module="atomdyn_launchers.job.node_check",
        args_for=lambda node, out: ["--node", node, "--out", str(out)],
        timeout_s=30,
        slurm=slurm,
        allocation=77,
    )
    assert [argv[:3] for argv in slurm.started] == [
        ["srun", "--jobid=77", "--nodelist=node1"],
        ["srun", "--jobid=77", "--nodelist=node2"],
    ]
    assert all(
        argv[-2:] == ["bash", str(work / f"check-{n}.sh")]
        for argv, n in zip(slurm.started, ("node1", "node2"), strict=True)
    )
    for node, run in runs.items():
        assert (run.job_id, run.state, run.step, run.result) == (
            77,
            "COMPLETED",
            True,
            {"node": node, "ok": True},
        )
        assert run.label == "step 77.?"  # ended before squeue listed it
    assert not any(cmd[0] in ("sbatch", "scancel") for cmd in slurm.ran)


def test_the_run_owned_etcds_srun_line_is_a_step_of_the_allocation(tmp_path: Path) -> None:
    run_dir = tmp_path / "20261202T000000Z-disagg-mocker"
    assert etcd_owned.step_args(Slurm(CONFIG), 77, "node1", run_dir, run_dir.name) == [
        "srun",
        "--jobid=77",
        "--nodelist=node1",
        "--nodes=1",
        "--ntasks=1",
        "--overlap",
        "--input=none",
        "--open-mode=append",
        "--job-name=atomdyn-etcd@20261202T000000Z-disagg-mocker",
        f"--output={run_dir}/logs/etcd.slurm.out",
        f"--chdir={run_dir}",
        "bash",
    ]


def test_the_run_owned_etcd_inside_an_allocation_is_a_step_stopped_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "20261202T000000Z-disagg-mocker"
    run_dir.mkdir()
    monkeypatch.setattr(etcd_owned, "etcd_binary", lambda config, lock_path=None: tmp_path / "etcd")
    monkeypatch.setattr(etcd_owned, "etcd_healthy", lambda endpoint, timeout=1.0: False)
    monkeypatch.setattr(etcd_owned.OwnedEtcd, "_await_endpoint", lambda self, output, timeout_s: None)

    class EtcdStep(StepSlurm):
        """The step is listed once started; SIGTERM to it ends its script with 0, as the helper does."""

        proc: subprocess.Popen[bytes] | None = None

        def start_step(self, args, script, *, log, env=None):  # type: ignore[no-untyped-def]
            self.started.append([*args, str(script)])
            script_ = 'trap "exit 0" TERM; sleep 30 & wait'
            self.proc = subprocess.Popen(["bash", "-c", script_])
            return self.proc

        def run(self, args: Sequence[str], *, env: object = None) -> str:  # type: ignore[override]
            self.ran.append(list(args))
            if args[0] == "squeue":
                return f"77.5|atomdyn-etcd@{run_dir.name}|node1\n" if self.proc is not None else ""
            if args[:2] == ["scancel", "--signal=TERM"] and args[2] == "77.5" and self.proc is not None:
                time.sleep(0.2)  # bash has set its trap
                self.proc.terminate()
                return ""
            raise AssertionError(f"unexpected command {args}")

    slurm = EtcdStep({})
    owned = etcd_owned.OwnedEtcd.start(CONFIG, run_dir, "node1", slurm=slurm, allocation=77)
    (argv,) = slurm.started
    assert argv == [
        *etcd_owned.step_args(slurm, 77, "node1", run_dir, run_dir.name),
        str(run_dir / "scripts" / "etcd.sbatch"),
    ]
    assert owned.job_id == 77 and owned.steps is not None
    stopped = owned.stop(timeout_s=5)
    assert stopped["job_state"] == "COMPLETED" and stopped["endpoint_gone"]
    assert not any(cmd[0] == "sbatch" for cmd in slurm.ran)
    # Only ever the step: no scancel names the allocation alone.
    assert [cmd for cmd in slurm.ran if cmd[0] == "scancel"] == [["scancel", "--signal=TERM", "77.5"]]
    assert owned.label == "step 77.5"


def test_a_role_steps_name_carries_the_run_id() -> None:
    assert step_name("atomdyn-prefill", "20261202T000000Z-disagg-mocker") == (
        "atomdyn-prefill@20261202T000000Z-disagg-mocker"
    )
    assert step_owner("atomdyn-prefill@20261202T000000Z-disagg-mocker") == "20261202T000000Z-disagg-mocker"
    assert step_owner("atomdyn-prefill") is None and step_owner("batch") is None
