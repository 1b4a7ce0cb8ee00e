"""What a worker's job records and checks before its engine starts: the node's fingerprint, the image's lock
digest, the RDMA devices as the worker sees them, and NIXL's doctor. The shell the engines generate runs here
with bash; the doctor is the real `nixl-compat doctor` of the project environment, and `ibv_devinfo` (no
RDMA NIC here) is a stand-in printing text in rdma-core's format (tests/fixtures/ibv_devinfo); the image label is
read by the real docker CLI from a private daemon."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from atomdyn_core.dockerd import dockerd_argv, find_dockerd
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.base import RoleContext, record_preludes
from atomdyn_launchers.engines.dynamo_vllm import doctor_prelude, rdma_check_prelude
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.rehearsal.localcluster.dockerd import ping
from atomdyn_launchers.runtimes import DockerRuntime, VenvRuntime
from atomdyn_launchers.runtimes.devices import NO_DEVICES, DeviceAccess, RdmaMounts
from atomdyn_launchers.sbatch import Shell

VENV = Path(sys.executable).parent.parent
FIXTURES = Path(__file__).parents[1] / "fixtures" / "ibv_devinfo"
SRC = [str(Path(__file__).resolve().parents[3] / p / "src") for p in ("launchers", "core")]


def _ctx(tmp: Path, mode: str = "prefill", **changes: object) -> RoleContext:
    ctx = RoleContext(
        run_id="r",
        role=mode,
        mode=mode,
        with_frontend=False,
        index=1,
        model=get_model("qwen3-8b-bf16"),
        model_path="/m",
        etcd_endpoint="http://127.0.0.1:2379",
        namespace="ns",
        home_dir=str(tmp / "home"),
        ports=Ports.for_role(1),
        runtime=VenvRuntime(VENV),
        run_dir=str(tmp / "run"),
        node_python=("env", "PYTHONPATH=" + os.pathsep.join(SRC), sys.executable),
        ucx_net_devices="ionic_0:1",
    )
    return replace(ctx, **changes)  # type: ignore[arg-type]


def _run(tmp: Path, lines: list[str], path: str | None = None) -> subprocess.CompletedProcess[str]:
    script = tmp / "job.sh"
    script.write_text(
        "\n".join(["#!/bin/bash", "set -u", 'log() { echo "LOG: $*"; }', *lines, "echo DONE", ""])
    )
    env = {**os.environ, "PATH": f"{path}:{os.environ['PATH']}" if path else os.environ["PATH"]}
    return subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, check=False, timeout=300
    )


def test_p_d_atom_roles_check_rdma_then_doctor_before_the_engine(tmp_path: Path) -> None:
    atom = get_engine("atom")
    prelude = "\n".join(atom.plan(_ctx(tmp_path)).prelude)
    assert prelude.index("ibv_devinfo -v") < prelude.index("nixl-compat doctor --json")
    assert "--expect-net-device ionic_0:1" in prelude and "--need-srq" in prelude
    aggregated = "\n".join(atom.plan(_ctx(tmp_path, mode="agg")).prelude)
    assert "ibv_devinfo" not in aggregated and "nixl-compat doctor" not in aggregated
    vllm = "\n".join(get_engine("vllm").plan(_ctx(tmp_path)).prelude)
    assert "nixl-compat doctor" not in vllm


def test_a_nic_without_srq_fails_the_role_before_the_engine(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "ibv_devinfo").write_text(f"#!/bin/sh\ncat {FIXTURES / 'ionic.txt'}\n")
    (tools / "ibv_devinfo").chmod(0o755)
    ctx = _ctx(tmp_path)
    done = _run(tmp_path, rdma_check_prelude(ctx, NO_DEVICES, {}), path=str(tools))
    assert done.returncode == 3, done.stdout + done.stderr
    assert "DONE" not in done.stdout and "RDMA check failed (see rdma/prefill.json)" in done.stdout
    assert "ionic_0 reports max_srq 0" in done.stderr
    report = json.loads((tmp_path / "run" / "rdma" / "prefill.json").read_text())
    assert report["ok"] is False and report["devices"][0]["device"] == "ionic_0"
    assert (tmp_path / "run" / "rdma" / "prefill.devinfo.txt").read_text().startswith("hca_id:\tionic_0")


def test_an_invisible_nic_fails_the_role(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "ibv_devinfo").write_text(f"#!/bin/sh\ncat {FIXTURES / 'none.txt'}\nexit 255\n")
    (tools / "ibv_devinfo").chmod(0o755)
    done = _run(tmp_path, rdma_check_prelude(_ctx(tmp_path), NO_DEVICES, {}), path=str(tools))
    assert done.returncode == 3 and "ibv_devinfo -v failed where the worker runs" in done.stdout


def test_a_failed_doctor_fails_the_role_and_its_report_is_kept(tmp_path: Path) -> None:
    # The atom KV path's UCX settings on a machine without an RDMA NIC: NIXL cannot self-test, for real.
    ctx = _ctx(tmp_path)
    env = {k: v for k, v in get_engine("atom").plan(ctx).processes[0].env.items() if k.startswith("UCX_")}
    done = _run(
        tmp_path,
        # UCX_AUX_NETDEV: what the job's tcp:aux lines read from sysfs (test_atom_ucx_devices.py), a netdev here.
        [
            "SHIM_PRELOAD=",
            "UCX_AUX_NETDEV=lo",
            *doctor_prelude(ctx, NO_DEVICES, {**env, "LD_PRELOAD": Shell('"$SHIM_PRELOAD"')}),
        ],
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "nixl-compat doctor failed (see doctor/prefill.json)" in done.stdout
    report = json.loads((tmp_path / "run" / "doctor" / "prefill.json").read_text())
    assert report["schema"] == "nixl-compat-doctor/1" and report["selftest"]["ok"] is False
    assert report["environment"]["UCX_TLS"] == "rc_verbs,self,tcp:aux"


def test_a_passing_doctor_lets_the_role_go_on(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, ucx_net_devices="lo")
    env = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}
    done = _run(tmp_path, doctor_prelude(ctx, NO_DEVICES, env))
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr
    report = json.loads((tmp_path / "run" / "doctor" / "prefill.json").read_text())
    assert (
        report["selftest"]["ok"] is True and not (tmp_path / "run" / "doctor" / "prefill.json.tmp").exists()
    )


def test_every_role_writes_its_fingerprint(tmp_path: Path) -> None:
    for engine in ("mocker", "atom"):
        plan = get_engine(engine).plan(_ctx(tmp_path, role=f"{engine}-role"))
        assert "atomdyn_core.fingerprint" in "\n".join(plan.prelude)
    done = _run(tmp_path, record_preludes(_ctx(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    fingerprint = json.loads((tmp_path / "run" / "fingerprints" / "prefill.json").read_text())
    assert fingerprint["schema_version"] == 1 and "accelerator" in fingerprint and "rdma" in fingerprint


@pytest.fixture(scope="module")
def private_docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private Docker daemon (own data root and socket, host network untouched); its DOCKER_HOST."""
    binary = find_dockerd()
    if binary is None or shutil.which("docker") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("dockerd/docker are not installed (.ci/run must install docker.io)")
        pytest.skip("dockerd/docker are not installed")
    root = tmp_path_factory.mktemp("dockerd")
    run = Path(tempfile.mkdtemp(prefix="atomdyn-h1-", dir="/run"))  # short socket paths
    sock = run / "docker.sock"
    log = (root / "dockerd.log").open("w")
    proc = subprocess.Popen(
        dockerd_argv(binary, root / "data", sock, run / "exec", run / "dockerd.pid"),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while not ping(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"private dockerd did not answer /_ping within 60 s ({root / 'dockerd.log'})"
                )
            time.sleep(0.1)
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        shutil.rmtree(run, ignore_errors=True)


def _import_image(host: str, tag: str, labels: dict[str, str]) -> None:
    """A minimal image (one empty directory) with ``labels``, imported into the daemon."""
    rootfs = io.BytesIO()
    with tarfile.open(fileobj=rootfs, mode="w") as tar:
        entry = tarfile.TarInfo("etc")
        entry.type = tarfile.DIRTYPE
        tar.addfile(entry)
    changes = [arg for key, value in labels.items() for arg in ("--change", f"LABEL {key}={value}")]
    subprocess.run(
        ["docker", "-H", host, "import", *changes, "-", tag],
        input=rootfs.getvalue(),
        check=True,
        capture_output=True,
    )


def test_docker_roles_record_the_lock_digest_of_the_image_on_the_node(
    tmp_path: Path, private_docker: str
) -> None:
    _import_image(private_docker, "atomdyn-h1-labeled:1", {"io.atomdyn.lock.digest": "sha256:feed"})
    _import_image(private_docker, "atomdyn-h1-bare:1", {})
    for tag, expected in (("atomdyn-h1-labeled:1", "sha256:feed"), ("atomdyn-h1-bare:1", "")):
        ctx = _ctx(tmp_path, runtime=DockerRuntime(tag, "atomdyn-r", ["/shared"]))
        lines = [f"export DOCKER_HOST={private_docker}", *record_preludes(ctx)]
        done = _run(tmp_path, lines)
        assert done.returncode == 0, done.stdout + done.stderr
        recorded = json.loads((tmp_path / "run" / "images" / "prefill.json").read_text())
        assert recorded["image"] == tag and recorded["id"].startswith("sha256:")
        assert recorded["lock_digest"] == expected
    # An image missing on the node fails the role before its engine starts.
    ctx = _ctx(tmp_path, runtime=DockerRuntime("atomdyn-h1-absent:1", "atomdyn-r", ["/shared"]))
    done = _run(tmp_path, [f"export DOCKER_HOST={private_docker}", *record_preludes(ctx)])
    assert done.returncode == 2 and "cannot inspect image atomdyn-h1-absent:1" in done.stdout


NODE_MLX5 = "/usr/lib/x86_64-linux-gnu/libmlx5-rdmav34.so"
LD_DEBUG = Path(__file__).parents[1] / "fixtures" / "ld_debug"


def _replaying_docker(tools: Path, named: str) -> None:
    """A stand-in for `docker run IMAGE ibv_devinfo ...`: `-v` prints the mlx5 fixture; `-l` replays the loader
    trace rdma-core 44.0 printed (tests/fixtures/ld_debug) for a container given RDMAV_DRIVERS=``named``."""
    tools.mkdir(exist_ok=True)
    (tools / "docker").write_text(
        "#!/bin/sh\n"
        'case " $* " in\n'
        f'  *" ibv_devinfo -v "*) cat {FIXTURES / "mlx5.txt"} ;;\n'
        f'  *" -e RDMAV_DRIVERS={named} "*" ibv_devinfo -l "*) cat {LD_DEBUG / "rdmav-drivers.txt"} ;;\n'
        f'  *" ibv_devinfo -l "*) cat {LD_DEBUG / "image-config-only.txt"} ;;\n'
        "  *) exit 125 ;;\n"
        "esac\n"
    )
    (tools / "docker").chmod(0o755)


def _rdma_access(*libs: str) -> DeviceAccess:
    return DeviceAccess(
        "amd", "ROCR_VISIBLE_DEVICES", rdma_required=True, rdma=RdmaMounts(provider_libs=libs)
    )


def test_the_rdma_check_records_the_provider_library_the_container_loaded(tmp_path: Path) -> None:
    """Issue 23, item 11: the provider RDMA_PROVIDER_LIBS names is named to libibverbs (RDMAV_DRIVERS) in the
    check's container as in the worker's; the check records which library was loaded."""
    _replaying_docker(tmp_path / "bin", named=NODE_MLX5.removesuffix("-rdmav34.so"))
    runtime = DockerRuntime("atomdyn-img:1", "atomdyn-r", ["/shared"])
    ctx = _ctx(tmp_path, runtime=runtime, ucx_net_devices="mlx5_0:1", ucx_gid_index="3")
    done = _run(tmp_path, rdma_check_prelude(ctx, _rdma_access(NODE_MLX5), {}), path=str(tmp_path / "bin"))
    assert done.returncode == 0 and "DONE" in done.stdout, done.stdout + done.stderr
    report = json.loads((tmp_path / "run" / "rdma" / "prefill.json").read_text())
    assert report["ok"] is True and report["provider_libraries"][0] == NODE_MLX5
    assert report["expected_provider_libraries"] == [NODE_MLX5]
    trace = (tmp_path / "run" / "rdma" / "prefill.providers.txt").read_text()
    assert f"calling init: {NODE_MLX5}" in trace


def test_another_provider_library_loaded_fails_the_role_naming_both(tmp_path: Path) -> None:
    # A container where libibverbs is not told the configured library (the earlier mounts): the image's copy of
    # the provider is the one loaded, and the role fails before its engine starts.
    _replaying_docker(tmp_path / "bin", named="/nowhere/libmlx5")
    runtime = DockerRuntime("atomdyn-img:1", "atomdyn-r", ["/shared"])
    ctx = _ctx(tmp_path, runtime=runtime, ucx_net_devices="mlx5_0:1", ucx_gid_index="3")
    done = _run(tmp_path, rdma_check_prelude(ctx, _rdma_access(NODE_MLX5), {}), path=str(tmp_path / "bin"))
    assert done.returncode == 3 and "RDMA check failed (see rdma/prefill.json)" in done.stdout
    image = "/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav34.so"
    assert f"RDMA_PROVIDER_LIBS names {NODE_MLX5}, but {image} was loaded first" in done.stderr
    report = json.loads((tmp_path / "run" / "rdma" / "prefill.json").read_text())
    assert report["ok"] is False and NODE_MLX5 not in report["provider_libraries"]
