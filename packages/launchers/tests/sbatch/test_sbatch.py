"""Generated job scripts: shellcheck-clean, and they really forward SIGTERM, wait, and fail fast.

The scripts are run with bash directly here (Slurm runs them the same way); the end-to-end tests submit them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

import atomdyn_launchers
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.base import RoleContext
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.runtimes import DockerRuntime, VenvRuntime
from atomdyn_launchers.runtimes.devices import NO_DEVICES
from atomdyn_launchers.sbatch import (
    PORTS_TAKEN_EXIT,
    Container,
    JobSpec,
    ProcessSpec,
    Shell,
    render,
    render_arg,
    supervisor_parts,
)

IN_CI = os.environ.get("CI") == "true"

# A process that records its start, and on SIGTERM takes a moment to shut down before recording its stop:
# the script must not exit before it has.
SLOW_STOPPER = """
import pathlib, signal, sys, time
d = pathlib.Path(sys.argv[1]); name = sys.argv[2]
def stop(*_):
    time.sleep(0.5)  # models a server draining its requests
    (d / f"{name}.stopped").write_text("ok")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
(d / f"{name}.started").write_text("ok")
while True:
    signal.pause()
"""
# Crashes once its sibling is up (a crash after startup, not a race with the sibling's own start).
CRASHER = """
import pathlib, sys, time
d = pathlib.Path(sys.argv[1])
deadline = time.monotonic() + 15
while not (d / "frontend.started").exists() and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(3)
"""


def _shellcheck(path: Path) -> None:
    exe = shutil.which("shellcheck")
    if exe is None:
        if IN_CI:
            pytest.fail("shellcheck is not installed (.ci/run must install it)")
        pytest.skip("shellcheck is not installed")
    done = subprocess.run([exe, "--severity=info", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout


def _job(tmp: Path, processes: list[ProcessSpec], **kw: object) -> JobSpec:
    fields: dict[str, object] = {
        "role": "decode",
        "job_name": "atomdyn-decode",
        "node": "node2",
        "account": "acct",
        "partition": "part",
        "qos": "normal",
        "output": str(tmp / "logs" / "decode.slurm.out"),
        "log_dir": str(tmp / "logs"),
        "processes": processes,
    }
    fields.update(kw)
    return JobSpec(**fields)  # type: ignore[arg-type]


def _python(name: str, code: str, tmp: Path) -> ProcessSpec:
    return ProcessSpec(name, [sys.executable, "-c", code, str(tmp), name])


def _wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def _start(script: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_header_carries_placement_and_explicit_slurm_options(tmp_path: Path) -> None:
    text = render(_job(tmp_path, [ProcessSpec("worker", ["true"])], gpus=2, time_limit="00:10:00"))
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for expected in (
        "#SBATCH --nodelist=node2",
        "#SBATCH --account=acct",
        "#SBATCH --partition=part",
        "#SBATCH --qos=normal",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --time=00:10:00",
        f"#SBATCH --output={tmp_path}/logs/decode.slurm.out",
    ):
        assert expected in lines


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"processes": []}, "no processes"),
        ({"node": "node1 node2"}, "--nodelist has an unusable value"),
        ({"processes": [ProcessSpec("Bad Name", ["true"])]}, "invalid role or process name"),
        ({"processes": [ProcessSpec("w", ["true"]), ProcessSpec("w", ["true"])]}, "same name"),
        ({"env": {"1BAD": "x"}}, "invalid environment variable name"),
    ],
)
def test_bad_job_specs_are_refused(tmp_path: Path, changes: dict[str, object], message: str) -> None:
    base = {"processes": [ProcessSpec("worker", ["true"])]}
    base.update(changes)
    processes = base.pop("processes")
    job = _job(tmp_path, processes, **base)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        render(job)


def test_sigterm_is_forwarded_and_the_script_waits_for_every_process(tmp_path: Path) -> None:
    job = _job(
        tmp_path, [_python("frontend", SLOW_STOPPER, tmp_path), _python("decode", SLOW_STOPPER, tmp_path)]
    )
    script = tmp_path / "decode.sbatch"
    script.write_text(render(job))
    _shellcheck(script)
    proc = _start(script)
    try:
        _wait_for(
            "both processes to start",
            lambda: all((tmp_path / f"{n}.started").exists() for n in ("frontend", "decode")),
        )
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # Both had finished their (slow) shutdown before the script exited, and the script reports success.
    assert (tmp_path / "frontend.stopped").exists() and (tmp_path / "decode.stopped").exists()
    assert proc.returncode == 0, out
    assert "TERM received: stopping 2 processes" in out and "all processes stopped" in out
    assert (tmp_path / "logs" / "decode.frontend.log").exists()


def test_first_process_to_fail_stops_the_others_and_fails_the_job(tmp_path: Path) -> None:
    job = _job(tmp_path, [_python("frontend", SLOW_STOPPER, tmp_path), _python("decode", CRASHER, tmp_path)])
    script = tmp_path / "decode.sbatch"
    script.write_text(render(job))
    proc = _start(script)
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 3, out
    assert (tmp_path / "frontend.stopped").exists()
    assert "decode exited (status 3) on their own: stopping the others" in out.replace("process(es) ", "")


def _venv_that_refuses_dynamo(tmp: Path) -> Path:
    """A stand-in for a GPU node's venv whose Python fails loudly: a job prelude must not run dynamo.vllm (its
    --help once cost 10-35 s per worker on the rehearsal, and on ROCm vLLM's platform code may want a GPU)."""
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text('#!/bin/sh\necho "the prelude ran python $*"\nexit 99\n')
    python.chmod(0o755)
    return venv


@pytest.mark.parametrize("mode", ["agg", "prefill", "decode"])
def test_the_disaggregation_flag_is_written_not_probed(tmp_path: Path, mode: str) -> None:
    ctx = RoleContext(
        run_id="r",
        role=mode,
        mode=mode,
        with_frontend=False,
        index=0,
        model=get_model("qwen3-8b-bf16"),
        model_path="/m",
        etcd_endpoint="http://127.0.0.1:2379",
        namespace="ns",
        home_dir=str(tmp_path / "home"),
        ports=Ports(),
        runtime=VenvRuntime(_venv_that_refuses_dynamo(tmp_path)),
        run_dir=str(tmp_path / "run"),
        node_python=(sys.executable,),
    )
    plan = get_engine("vllm").plan(ctx)
    argv = [render_arg(a) for a in plan.processes[0].argv]
    # Dynamo 1.3.0's flag (its backend_args.py), written for every mode.
    assert argv[argv.index("--disaggregation-mode") + 1] == mode
    script = tmp_path / "prelude.sh"
    script.write_text("\n".join(["#!/bin/bash", 'log() { echo "$*"; }', *plan.prelude, ""]))
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    assert "the prelude ran python" not in done.stdout, done.stdout
    assert "management address 127.0.0.1" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("engine", ["mocker", "vllm", "atom"])
@pytest.mark.parametrize("runtime_kind", ["venv", "docker"])
def test_every_engine_and_runtime_renders_shellcheck_clean(
    tmp_path: Path, engine: str, runtime_kind: str
) -> None:
    runtime: VenvRuntime | DockerRuntime
    if runtime_kind == "venv":
        runtime = VenvRuntime(Path("/opt/venv"))
    else:
        runtime = DockerRuntime("img:1", "atomdyn-r", ["/shared"])
    for mode, frontend in (("prefill", False), ("decode", True), ("agg", True)):
        ctx = RoleContext(
            run_id="r",
            role=mode,
            mode=mode,
            with_frontend=frontend,
            index=0,
            model=get_model("qwen3.5-397b-mxfp4"),
            model_path="/models/q",
            etcd_endpoint="http://head:2379",
            namespace="ns",
            home_dir="/shared/home",
            ports=Ports(),
            runtime=runtime,
            run_dir="/shared/runs/r",
        )
        plan = get_engine(engine).plan(ctx)
        job = _job(
            tmp_path,
            plan.processes,
            env=plan.env,
            prelude=plan.prelude,
            gpus=plan.gpus,
            register=[
                "/opt/venv/bin/python",
                "-m",
                "atomdyn_launchers.job.readiness",
                "register",
                "--pid",
                Shell('decode="$PID_DECODE"'),
            ],
        )
        script = tmp_path / f"{engine}-{runtime_kind}-{mode}.sbatch"
        script.write_text(render(job))
        _shellcheck(script)


def _docker_job(**changes: object) -> JobSpec:
    runtime = DockerRuntime("img:1", "atomdyn-r", ["/shared"])
    processes = [runtime.wrap(name, ["python3", "-V"], {}, NO_DEVICES) for name in ("frontend", "decode")]
    job = JobSpec(
        role="decode", job_name="atomdyn-decode", node="n2", account="a", partition="p", qos="q",
        output="/l/decode.slurm.out", log_dir="/l", processes=processes, ports={"system": 8081},
    )  # fmt: skip
    return replace(job, **changes)  # type: ignore[arg-type]


def test_a_jobs_containers_are_stopped_and_removed_by_name() -> None:
    text = render(_docker_job())
    assert "docker run --rm --init --name atomdyn-r-decode" in text
    assert "CONTAINERS=(atomdyn-r-frontend atomdyn-r-decode)" in text
    assert 'for name in "${CONTAINERS[@]}"; do\n    docker stop -t "$STOP_GRACE_S" "$name"' in text
    assert "trap remove_containers EXIT" in text  # every exit path, a failed prelude's too
    stop_all = text[text.index("stop_all() {") :]
    assert stop_all.index("\n  stop_containers\n") < stop_all.index("\n}\n")  # with the clients
    # A stale container of the same name (an earlier attempt's) would hold the ports: removed before the check.
    assert text.index("remove_containers  # an earlier attempt's") < text.index("check_ports system=8081")
    venv = _job(Path("/t"), [ProcessSpec("decode", ["python3", "-V"])])
    assert "remove_containers" not in render(venv)  # the venv runtime starts no container


def test_one_jobs_containers_share_one_client() -> None:
    job = _docker_job()
    other = replace(job.processes[1], container=Container("atomdyn-r-decode", "podman"))
    with pytest.raises(ValueError, match=r"one client, not \['docker', 'podman'\]"):
        render(replace(job, processes=[job.processes[0], other]))


FINISHER = CRASHER.replace("sys.exit(3)", "sys.exit(0)").replace("frontend.started", "helper.started")


@pytest.mark.parametrize(("one_shot", "status"), [(True, 0), (False, 1)])
def test_a_one_shot_jobs_process_that_finishes_ends_the_job_well(
    tmp_path: Path, one_shot: bool, status: int
) -> None:
    # The NIXL probe's job: its process exits 0 when its work is done. A service's job (the default) still
    # counts any process exiting on its own as a failure; neither leaves the other process running.
    job = _job(
        tmp_path,
        [_python("helper", SLOW_STOPPER, tmp_path), _python("probe", FINISHER, tmp_path)],
        one_shot=one_shot,
    )
    script = tmp_path / "decode.sbatch"
    script.write_text(render(job))
    _shellcheck(script)
    proc = _start(script)
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == status, out
    assert (tmp_path / "helper.stopped").exists()
    assert ("probe finished its work" in out) is one_shot, out
    assert (tmp_path / "logs" / "decode.failure").exists() is not one_shot


SUPERVISOR = Path(atomdyn_launchers.__file__).with_name("supervisor.sh")


def test_the_supervisor_is_a_shellcheck_clean_bash_file_that_runs_its_example(tmp_path: Path) -> None:
    """supervisor.sh as a file: shellchecked as it is, and run as it is, its example job of one process."""
    _shellcheck(SUPERVISOR)
    text = SUPERVISOR.read_text(encoding="utf-8").replace("/tmp/atomdyn-supervisor-example", str(tmp_path))
    script = tmp_path / "supervisor.sh"
    script.write_text(text.replace("check_ports example=18098", "check_ports example=1"))
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "worker finished its work: stopping the others" in done.stdout
    assert done.stdout.rstrip().endswith("all processes stopped")


def _found(lines: list[str], part: tuple[str, ...], start: int) -> int:
    """Where ``part`` begins in ``lines`` at or after ``start``, a setting's assignment with any value."""
    settings = ("LOG_DIR=", "ROLE=", "STOP_GRACE_S=", "CONTAINERS=")

    def same(mine: str, rendered: str) -> bool:
        return mine == rendered or (
            mine.startswith(settings) and rendered.startswith(mine.split("=")[0] + "=")
        )

    for i in range(start, len(lines) - len(part) + 1):
        if all(same(line, lines[i + j]) for j, line in enumerate(part)):
            return i
    raise AssertionError(f"not inlined after line {start}: {part[:3]}")


def test_every_part_of_the_supervisor_is_inlined_into_a_job_that_needs_it() -> None:
    """A job with containers, ports and one-shot work carries every part, in the file's order; the example parts,
    the file's header and its notes are in no job."""
    parts = supervisor_parts()
    assert list(parts) == [
        "setup", "containers", "stop-all", "stop-containers", "supervise", "remove-containers", "ports", "wait",
        "one-shot", "finish",
    ]  # fmt: skip
    text = render(replace(_docker_job(), one_shot=True))
    lines = text.splitlines()
    at = 0
    for part in parts.values():
        at = _found(lines, part, at) + len(part)
    assert "#@" not in text and "\n##" not in text
    assert "atomdyn-supervisor-example" not in text and "EXAMPLE_DURATION_S" not in text
    assert f"    exit {PORTS_TAKEN_EXIT}" in parts["ports"]  # the status the launcher reads as ports taken
