"""RUNTIME=pyxis: the configuration, the srun command lines the runtime builds (mounts, devices, environment,
limits), and the job script's stop path with a pyxis step as the child it waits on (a stand-in srun that, like
srun, forwards SIGTERM to its task: no pyxis here)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import ClusterConfigError, parse_cluster_env
from atomdyn_launchers.engines.atom import container_args
from atomdyn_launchers.run.lockinfo import run_lock_digest
from atomdyn_launchers.runtimes import PyxisRuntime
from atomdyn_launchers.runtimes.devices import NO_DEVICES, DeviceAccess, RdmaMounts
from atomdyn_launchers.sbatch import JobSpec, Shell, render, render_arg
from atomdyn_launchers.validate.gpu import job_script

BASE = """\
SLURM_ACCOUNT=acct
SLURM_PARTITION=gpu
SLURM_QOS=normal
PRIMARY_NODE=n01
PREFILL_NODE=n01
DECODE_NODE=n02
SHARED_DIR=/shared
MODEL_PATH=/shared/models/m
ENGINE_PROFILE=atom
PROJECT_DIR=/shared/checkout
GPUS_PER_NODE=8
"""
SQSH = "/shared/images/img+1.sqsh"
LIB = "/usr/lib/libionic-rdmav34.so"


def test_runtime_pyxis_is_a_runtime_and_needs_an_image() -> None:
    cfg = parse_cluster_env(BASE + "RUNTIME=pyxis\nDYNAMO_ATOM_IMAGE=img:1\n")
    assert cfg.runtime == "pyxis"
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(BASE + "RUNTIME=pyxis\n")
    assert "DYNAMO_ATOM_IMAGE: required when RUNTIME=pyxis" in info.value.problems
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(
            BASE.replace("MODEL_PATH=/shared/models/m", "MODEL_PATH=/shared/a,b")
            + "RUNTIME=pyxis\nDYNAMO_ATOM_IMAGE=img:1\n"
        )
    assert any(p.startswith("MODEL_PATH:") and "--container-mounts" in p for p in info.value.problems)
    # the same path is fine for docker (only ':' splits -v)
    parse_cluster_env(
        BASE.replace("MODEL_PATH=/shared/models/m", "MODEL_PATH=/shared/a,b")
        + "RUNTIME=docker\nDYNAMO_ATOM_IMAGE=img:1\n"
    )


def words(argv: list[object]) -> list[str]:
    return [render_arg(a) for a in argv]  # type: ignore[arg-type]


def test_amd_worker_with_rdma_required() -> None:
    runtime = PyxisRuntime(SQSH, ["/shared", "/shared/models/m"])
    access = DeviceAccess(
        "amd",
        "ROCR_VISIBLE_DEVICES",
        rdma_required=True,
        rdma=RdmaMounts(provider_libs=(LIB,)),
        container_args=container_args("prefill"),
    )
    env = {"UCX_TLS": "rc_verbs,self", "LD_PRELOAD": Shell('"$SHIM_PRELOAD"'), "ETCD_KEY": Shell('"$K"')}
    proc = runtime.wrap("prefill", ["python3", "-m", "dynamo.vllm"], env, access, inherit=["ETCD_KEY"])
    assert words(list(proc.argv)) == [
        "srun", "--overlap", "--ntasks=1", "--nodes=1", f"--container-image={SQSH}",
        "--container-mounts=/shared:/shared,/shared/models/m:/shared/models/m,/dev/kfd:/dev/kfd,/dev/dri:/dev/dri,"
        f"/dev/infiniband:/dev/infiniband,{LIB}:{LIB}:ro",
        "--no-container-mount-home", "--no-container-remap-root", "--no-container-entrypoint",
        "--container-env=ETCD_KEY,RDMAV_DRIVERS,UCX_TLS",
        "env", "-u", "HIP_VISIBLE_DEVICES", "-u", "CUDA_VISIBLE_DEVICES", "-u", "GPU_DEVICE_ORDINAL",
        'LD_PRELOAD="$SHIM_PRELOAD"',
        "python3", "-m", "dynamo.vllm",
    ]  # fmt: skip
    # Values on srun (the job's env prefix), the loader's variables only inside, the secret only by name.
    assert dict(proc.env) == {"RDMAV_DRIVERS": "/usr/lib/libionic", "UCX_TLS": "rc_verbs,self"}
    assert proc.container is None  # nothing to stop by name: the step ends with its srun
    prelude = runtime.prelude(access)
    assert prelude[1].startswith("ulimit -S -l unlimited 2>/dev/null || echo ")
    assert any(line.startswith("ulimit -S -s 65536 ") for line in prelude)  # stack=67108864 bytes
    assert any(line.startswith("ulimit -S -n 65536 ") for line in prelude)  # nofile=65536:524288
    assert not any("IB_MOUNT" in line for line in prelude)  # required: mounted unconditionally


def test_nvidia_worker_gets_the_hook_variables_and_optional_infiniband() -> None:
    runtime = PyxisRuntime(SQSH, ["/shared"])
    access = DeviceAccess("nvidia", "CUDA_VISIBLE_DEVICES")
    proc = runtime.wrap("decode", ["python3"], {}, access)
    argv = words(list(proc.argv))
    assert argv[5] == '--container-mounts=/shared:/shared"$IB_MOUNT"'
    assert "--container-env=NVIDIA_DRIVER_CAPABILITIES,NVIDIA_VISIBLE_DEVICES" in argv
    assert proc.env == {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    assert argv[-8:] == [
        "env", "-u", "ROCR_VISIBLE_DEVICES", "-u", "HIP_VISIBLE_DEVICES", "-u", "GPU_DEVICE_ORDINAL", "python3"
    ]  # fmt: skip
    assert runtime.prelude(access)[-2:] == [
        "IB_MOUNT=''",
        "if [ -e /dev/infiniband ]; then IB_MOUNT=,/dev/infiniband:/dev/infiniband; fi",
    ]


def test_frontend_and_bare_tool() -> None:
    runtime = PyxisRuntime(SQSH, ["/shared"])
    proc = runtime.wrap("frontend", ["python3", "-m", "dynamo.frontend"], {"HOME": "/h"}, NO_DEVICES)
    assert words(list(proc.argv))[-4:] == ["--container-env=HOME", "python3", "-m", "dynamo.frontend"]
    assert words(runtime.tool(["dmabuf-shim", "env"])) == [
        "srun", "--overlap", "--ntasks=1", "--nodes=1", f"--container-image={SQSH}",
        "--no-container-mount-home", "--no-container-remap-root", "--no-container-entrypoint",
        "dmabuf-shim", "env",
    ]  # fmt: skip
    probe = words(runtime.tool(["ibv_devinfo", "-l"], env={"LD_DEBUG": "libs"}, devices=NO_DEVICES))
    assert probe[0] == "srun" and probe[-3:] == ["LD_DEBUG=libs", "ibv_devinfo", "-l"]  # not on srun


# Like srun: options first, then the task, which gets SIGTERM when srun does (srun forwards it).
FAKE_SRUN = """#!/bin/bash
while [ "${1#--}" != "$1" ]; do
  case "$1" in --container-env=*) echo "names ${1#*=} A=$A" >>"$CALLS" ;; esac
  shift
done
echo "run $*" >>"$CALLS"
"$@" &
task=$!
trap 'echo forwarded TERM >>"$CALLS"; kill -TERM "$task"' TERM
wait "$task"
wait "$task"
"""


def test_job_script_stops_a_pyxis_step_through_srun(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text(FAKE_SRUN)
    (bindir / "srun").chmod(0o755)
    calls = tmp_path / "calls"
    runtime = PyxisRuntime(SQSH, ["/shared"])
    proc = runtime.wrap("worker", ["sleep", "300"], {"A": "1"}, NO_DEVICES)
    job = JobSpec(
        role="agg", job_name="j", node="n", account="a", partition="p", qos="q",
        output=str(tmp_path / "out"), log_dir=str(tmp_path / "logs"), processes=[proc], stop_grace_s=5,
    )  # fmt: skip
    script = tmp_path / "job.sh"
    script.write_text(render(job))
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(calls)}
    job_proc = subprocess.Popen(
        ["bash", str(script)], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 20
        while not (calls.exists() and "run " in calls.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "run sleep 300" in calls.read_text()
        start = time.monotonic()
        job_proc.send_signal(signal.SIGTERM)
        out, _ = job_proc.communicate(timeout=20)
    finally:
        if job_proc.poll() is None:
            os.killpg(job_proc.pid, signal.SIGKILL)
    assert job_proc.returncode == 0, out
    assert time.monotonic() - start < 4  # the task stopped on the forwarded TERM, not at the grace's SIGKILL
    assert "all processes stopped" in out
    assert calls.read_text().splitlines() == ["names A A=1", "run sleep 300", "forwarded TERM"]


def test_validation_job_and_the_run_lock_digest_with_pyxis(tmp_path: Path) -> None:
    cfg = parse_cluster_env(BASE + "RUNTIME=pyxis\nDYNAMO_ATOM_IMAGE=img:1\n")
    text = job_script(cfg, "img:1", tmp_path, "docker")
    assert "srun --overlap --ntasks=1 --nodes=1 --container-image=/shared/images/img+1.sqsh " in text
    assert "docker run --rm" not in text
    # The lock digest a pyxis run used is the one its jobs recorded from the squashfs's import record.
    recorded = {"prefill": {"lock_digest": "d1"}, "decode": {"lock_digest": "d1"}}
    assert run_lock_digest("pyxis", recorded, "c") == ("d1", "image label io.atomdyn.lock.digest")


@pytest.mark.parametrize(("ib", "expected"), [("", "<x><y>"), (",/dev/infiniband:/dev/infiniband", None)])
def test_optional_infiniband_with_nothing_else_to_mount(ib: str, expected: str | None) -> None:
    runtime = PyxisRuntime(SQSH, [])
    argv = words(runtime.tool(["true"], devices=DeviceAccess("nvidia")))
    (mounts,) = [w for w in argv if "IB_MOUNT" in w]
    done = subprocess.run(
        ["bash", "-c", f'IB_MOUNT={ib}; printf "<%s>" x {mounts} y'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == (expected or "<x><--container-mounts=/dev/infiniband:/dev/infiniband><y>")
