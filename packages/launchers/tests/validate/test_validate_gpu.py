"""`invoke validate.gpu` on the local two-node Slurm cluster: one real job running the validator in the image.

The image is made the way a release makes it: `atomdyn-images build --target base` (run as a command, as the
launchers always call the image builder) on a stand-in base, with small real wheels pinned by a test lock.
The launchers do not import the image builder; only this test uses its helpers to make the test's inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from atomdyn_launchers.rehearsal.localcluster import LocalCluster, missing_tools
from atomdyn_launchers.validate.gpu import job_script, run_gpu_validation

IN_CI = os.environ.get("CI") == "true"
IMAGES_CLI = (sys.executable, "-m", "atomdyn_images.cli")
RELEASE = {"name": "atomdyn-validate-test", "version": "1.3.0-0.1.6rc0"}


def _need(condition: bool, what: str) -> None:
    if condition:
        return
    if IN_CI:
        pytest.fail(f"{what} is missing in CI: .ci/run must install it")
    pytest.skip(f"{what} is not available here")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    _need(
        os.geteuid() == 0 and not missing_tools(),
        f"root and the local cluster tools ({', '.join(missing_tools())})",
    )
    base = tmp_path_factory.mktemp("vgpu")
    lc = LocalCluster(base / "state", shared_dir=base / "shared", python_venv=Path(sys.prefix))
    lc.up()
    try:
        yield lc
    finally:
        lc.down()


@pytest.fixture(scope="module")
def docker_host() -> Iterator[str]:
    from atomdyn_core.dockerd import find_dockerd

    _need(find_dockerd() is not None, "dockerd (Debian package docker.io)")
    from atomdyn_images.daemon import start_daemon

    root = Path(tempfile.mkdtemp(prefix="atomdyn-vgpu-dockerd-"))
    private = start_daemon(root, reuse=False)
    try:
        yield private.host
    finally:
        private.stop()
        shutil.rmtree(root, ignore_errors=True)


def _entry(path: Path, project: str, version: str, **extra: str) -> dict[str, object]:
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    entry: dict[str, object] = {
        "filename": path.name, "source": "pypi", "project": project, "version": version,
        "size": path.stat().st_size, "sha256": sha, "roles": ["image-base"],
    }  # fmt: skip
    entry.update(extra)
    return entry


def _base_lock(tmp: Path) -> tuple[Path, Path]:
    """Small real wheels with what the validator inspects, and a lock pinning them; returns (lock, mirror)."""
    from atomdyn_images.standin_inputs import write_atom_wheel
    from atomdyn_images.wheelfile import write_wheel

    mirror = tmp / "mirror"
    mirror.mkdir()
    dynamo = write_wheel(mirror, "ai-dynamo", "1.3.0.post1",
                         {"dynamo/frontend/__init__.py": "", "dynamo/vllm/__init__.py": ""})  # fmt: skip
    runtime = write_wheel(mirror, "ai-dynamo-runtime", "1.3.0.post1", {"dynamo/runtime/__init__.py": ""})
    atom = write_atom_wheel(mirror, "0.1.6rc0+rocm7.1")
    raw = {
        "schema_version": 1,
        "release": RELEASE,
        "images": {"atom_base": {"repository": "rocm/atom-dev", "tag": "v0.1.6-rc0", "digest": "unrecorded"}},
        "sources": {},
        "wheels": {
            "ai-dynamo": _entry(dynamo, "ai-dynamo", "1.3.0.post1"),
            "ai-dynamo-runtime": _entry(runtime, "ai-dynamo-runtime", "1.3.0.post1"),
            "atom-rocm7.1": _entry(atom, "atom", "0.1.6rc0+rocm7.1", variant="rocm7.1"),
        },
    }
    lock = tmp / "release-lock.json"
    lock.write_text(json.dumps(raw, indent=2), encoding="utf-8")
    return lock, mirror


def _images(*args: str, docker_host: str) -> str:
    done = subprocess.run([*IMAGES_CLI, *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"atomdyn-images {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.integration
def test_validate_gpu_submits_one_job_and_reports_each_check(
    cluster: LocalCluster, docker_host: str, tmp_path: Path
) -> None:
    lock, mirror = _base_lock(tmp_path)
    standin = "atomdyn-standin:validate-test"
    _images("standin", standin, "--docker-host", docker_host, docker_host=docker_host)
    _images("build", "--target", "base", "--lock", str(lock), "--base", standin, "--mirror", str(mirror),
            "--workdir", str(tmp_path / "work"), "--docker-host", docker_host, "--quiet",
            docker_host=docker_host)  # fmt: skip
    image = f"{RELEASE['name']}:{RELEASE['version']}"
    config = replace(cluster.config(), dynamo_atom_image=image)
    node = config.decode_node
    result = run_gpu_validation(config, node=node, docker_host=docker_host, timeout_s=120)
    assert result.job.nodes == node
    assert result.report is not None, (result.run_dir / f"slurm-{result.job.job_id}.out").read_text()
    found = {c["name"]: c["ok"] for c in result.report["checks"]}
    # The stand-in image has the lock's wheels but no ROCm torch and no vLLM, and its Dynamo wheel is a stub without
    # dynamo.vllm's worker modules and arguments: exactly those checks fail. The local cluster's engine (the mock
    # engine) runs no dynamo.vllm worker: the job passes an empty set of worker argv, which the validator accepts.
    assert found == {
        "dynamo-version": True, "atom-version": True, "vllm-commit": False, "torch-rocm": False,
        "atom-platform": True, "atom-qwen3": False, "dynamo-imports": False,
        "dynamo-disaggregation-flag": False, "dynamo-worker-args": True,
    }  # fmt: skip
    assert json.loads((result.run_dir / "worker-args.json").read_text(encoding="utf-8")) == {}
    assert result.job.state == "FAILED" and result.job.exit_code == (1, 0)
    assert not result.ok
    lines = result.lines()
    assert "FAIL torch-rocm: torch does not import: ModuleNotFoundError: No module named 'torch'" in lines
    assert lines[-1] == "RESULT FAIL"


def _docker_job_script(
    tmp_path: Path, partition: str, engine: str, image: str, docker: str = "/usr/bin/docker"
) -> str:
    """The validator's job script for a docker-runtime cluster of ``engine`` running ``image``."""
    from atomdyn_launchers.config.cluster import load_cluster_config

    env = tmp_path / "cluster.env"
    env.write_text(
        f"SLURM_ACCOUNT=acct\nSLURM_PARTITION={partition}\nSLURM_QOS=normal\nPRIMARY_NODE=n1\nPREFILL_NODE=n1\n"
        f"DECODE_NODE=n2\nSHARED_DIR={tmp_path}\nMODEL_PATH={tmp_path}\nENGINE_PROFILE={engine}\nRUNTIME=docker\n"
        f"PROJECT_DIR={tmp_path}\nPYTHON_VENV={tmp_path}\nDYNAMO_ATOM_IMAGE={image}\n"
    )
    return job_script(load_cluster_config(env), image, tmp_path, docker)


def test_job_script_for_an_atom_cluster_passes_the_gpu_devices(tmp_path: Path) -> None:
    script = _docker_job_script(tmp_path, "gpu", "atom", "dynamo-atom-mi355x:1.3.0-0.1.6rc0")
    assert "--device /dev/kfd --device /dev/dri" in script
    assert "--ulimit memlock=-1" in script
    assert "dynamo-atom-mi355x:1.3.0-0.1.6rc0 atomdyn-validate --json" in script


def test_invoke_task_reports_a_bad_cluster_config(tmp_path: Path) -> None:
    from invoke.context import Context
    from invoke.exceptions import Exit

    from atomdyn_launchers.validate.invoke_tasks import gpu, ns

    assert ns.name == "validate" and "gpu" in ns.task_names
    with pytest.raises(Exit, match=r"no-such\.env"):
        gpu(Context(), config=str(tmp_path / "no-such.env"))


def test_job_script_for_a_cpu_engine_keeps_the_nodes_memlock_limit(tmp_path: Path) -> None:
    """No GPU, nothing pinned for RDMA: a node's dockerd may refuse to raise the limit (the local cluster's does)."""
    script = _docker_job_script(tmp_path, "cpu", "vllm-cpu", "atomdyn-vllm-cpu:x")
    assert "memlock" not in script and "--device" not in script
    assert "atomdyn-vllm-cpu:x atomdyn-validate --json" in script


# A docker client for the validation job: `docker run ... atomdyn-validate --json` prints the report on stdout and
# a log line on stderr, exiting $FAKE_STATUS; no container of the job's name exists beforehand.
FAKE_DOCKER = """#!/bin/bash
case "$1" in
  run) echo "INFO vLLM logs while it is imported" >&2; printf '{"ok": %s, "checks": []}\\n' "$FAKE_OK"; exit "$FAKE_STATUS";;
  container) exit 1;;
  *) exit 0;;
esac
"""


@pytest.mark.parametrize(("ok", "status"), [("true", 0), ("false", 1)])
def test_the_validation_job_keeps_the_report_apart_and_exits_with_the_validators_status(
    tmp_path: Path, ok: str, status: int
) -> None:
    """The job (one-shot, through the launchers' renderer) run with bash: validate.json holds the validator's
    stdout alone, its stderr is in its log, and the job's status is the validator's."""
    docker = tmp_path / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    script = tmp_path / "validate.sbatch"
    script.write_text(_docker_job_script(tmp_path, "cpu", "vllm-cpu", "atomdyn-vllm-cpu:x", str(docker)))
    env = {**os.environ, "FAKE_OK": ok, "FAKE_STATUS": str(status)}
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == status, done.stdout + done.stderr
    report = json.loads((tmp_path / "validate.json").read_text(encoding="utf-8"))
    assert report == {"ok": ok == "true", "checks": []}
    assert "vLLM logs while it is imported" in (tmp_path / "validate.check.log").read_text(encoding="utf-8")
    failure = tmp_path / "validate.failure"
    if status == 0:
        assert "check finished its work" in done.stdout and not failure.exists()
    else:
        assert failure.read_text(encoding="utf-8") == (
            "process check exited first, on its own (status 1): INFO vLLM logs while it is imported\n"
        )
