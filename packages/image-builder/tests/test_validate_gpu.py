"""`invoke validate.gpu` on the local two-node Slurm cluster: one real job running the validator in the image."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import PATCHES, Daemon, Fixture, need

from atomdyn_core.lock import load_lock
from atomdyn_images import render
from atomdyn_images.build import BuildOptions, build
from atomdyn_images.gpu_validate import run_gpu_validation
from atomdyn_launchers.localcluster import LocalCluster, missing_tools

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    need(
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


def test_validate_gpu_submits_one_job_and_reports_each_check(
    cluster: LocalCluster, fixture: Fixture, daemon: Daemon
) -> None:
    lock = load_lock(fixture.lock_path)
    options = BuildOptions(
        workdir=fixture.workdir,
        base=daemon.standin,
        mirror=str(fixture.mirror),
        patches=PATCHES,
        targets=("base",),
    )
    build(lock, options, daemon.docker)
    config = replace(cluster.config(), dynamo_atom_image=render.release_tag(lock))
    node = config.decode_node
    result = run_gpu_validation(config, node=node, docker_host=daemon.docker.host, timeout_s=120)
    assert result.job.nodes == node
    assert result.report is not None, (result.run_dir / f"slurm-{result.job.job_id}.out").read_text()
    found = {c["name"]: c["ok"] for c in result.report["checks"]}
    # The stand-in image has the lock's wheels but no ROCm torch and no vLLM: exactly those checks fail.
    assert found == {
        "dynamo-version": True, "atom-version": True, "torch-rocm": False,
        "atom-platform": True, "atom-qwen3": False, "dynamo-imports": True,
    }  # fmt: skip
    assert result.job.state == "FAILED" and result.job.exit_code == (1, 0)
    assert not result.ok
    lines = result.lines()
    assert "FAIL torch-rocm: torch does not import: ModuleNotFoundError: No module named 'torch'" in lines
    assert lines[-1] == "RESULT FAIL"


def test_job_script_for_an_atom_cluster_passes_the_gpu_devices(tmp_path: Path) -> None:
    from atomdyn_images.gpu_validate import job_script
    from atomdyn_launchers.config import load_cluster_config

    env = tmp_path / "cluster.env"
    env.write_text(
        "SLURM_ACCOUNT=acct\nSLURM_PARTITION=gpu\nSLURM_QOS=normal\nPRIMARY_NODE=n1\nPREFILL_NODE=n1\n"
        f"DECODE_NODE=n2\nSHARED_DIR={tmp_path}\nMODEL_PATH={tmp_path}\nENGINE_PROFILE=atom\nRUNTIME=docker\n"
        f"PROJECT_DIR={tmp_path}\nPYTHON_VENV={tmp_path}\nDYNAMO_ATOM_IMAGE=dynamo-atom-mi355x:1.3.0-0.1.6rc0\n"
    )
    script = job_script(
        load_cluster_config(env), "dynamo-atom-mi355x:1.3.0-0.1.6rc0", tmp_path, "/usr/bin/docker"
    )
    assert "--device /dev/kfd --device /dev/dri" in script
    assert "--ulimit memlock=-1" in script
    assert "dynamo-atom-mi355x:1.3.0-0.1.6rc0 atomdyn-validate --json" in script


def test_invoke_task_reports_a_bad_cluster_config(tmp_path: Path) -> None:
    from invoke.context import Context
    from invoke.exceptions import Exit

    from atomdyn_images.invoke_tasks import gpu, ns

    assert ns.name == "validate" and "gpu" in ns.task_names
    with pytest.raises(Exit, match=r"no-such\.env"):
        gpu(Context(), config=str(tmp_path / "no-such.env"))
