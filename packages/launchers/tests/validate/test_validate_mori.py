"""validate.mori and the ladder's validate rung for an engine whose KV moves over MORI (the sglang engine):
mori-repro in the image on each worker node before any model loads. The job script is rendered and shellchecked;
the verdict is judged on what the real mori-repro program prints for the exact arguments the job gives it, run
here against the shared test doubles of libibverbs and the HSA runtime (testing/doubles), and with no GPU."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from golden_launch import golden_config

from atomdyn_launchers.certify import rungs
from atomdyn_launchers.certify.rungs import FAILED, PASS, Climb
from atomdyn_launchers.config.cluster import ClusterConfig, find_repo_root
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.slurm.client import JobInfo
from atomdyn_launchers.validate.mori import MoriRepro, job_script, judge, repro_args

REPO = find_repo_root(Path(__file__).parent)
LIB_VARS = ("MORI_REPRO_LIBIBVERBS", "MORI_REPRO_LIBHSA", "MORI_REPRO_LIBCUDA")


def _config(devices: str = "ionic_0:1") -> ClusterConfig:
    config = golden_config("sglang", "docker")
    return dataclasses.replace(config, ucx_net_devices=tuple((n, devices) for n, _ in config.ucx_net_devices))


@pytest.fixture(scope="module")
def doubles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    build = REPO / "testing" / "doubles" / "build.py"
    spec = importlib.util.spec_from_file_location("atomdyn_testing_doubles_build", build)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    built: dict[str, Path] = module.build_doubles(tmp_path_factory.mktemp("doubles"))
    return built


def repro(args: list[str], libs: dict[str, str]) -> dict[str, Any]:
    """The installed mori-repro with the job's arguments (its program name replaced by this environment's)."""
    assert args[:2] == ["mori-repro", "run"]
    env = {k: v for k, v in os.environ.items() if k not in LIB_VARS} | libs
    exe = Path(sys.executable).with_name("mori-repro")
    done = subprocess.run(
        [str(exe), *args[1:]], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["exit_code"] == done.returncode, done.stderr
    return report


def test_the_job_runs_mori_repro_in_the_image_with_a_p_d_worker_s_devices(tmp_path: Path) -> None:
    config = _config()
    text = job_script(config, "dynamo-sglang-mi35x:1.3.0-0.5.14", tmp_path, "docker", node="gpu-node-01")
    start = next(line for line in text.splitlines() if line.startswith("start mori-repro "))
    assert f"report_to {tmp_path}/mori-repro.json docker run" in start
    for option in (
        "--device /dev/kfd",
        "--device /dev/dri",
        "--device /dev/infiniband",
        "-e ROCR_VISIBLE_DEVICES",
    ):
        assert option in start, option
    assert start.endswith(
        "dynamo-sglang-mi35x:1.3.0-0.5.14 mori-repro run --device ionic_0 --port 1 --gid-index 1 --json"
    )
    assert "#SBATCH --nodelist=gpu-node-01" in text or "gpu-node-01" in text
    exe = shutil.which("shellcheck")
    if exe is not None:
        script = tmp_path / "mori-repro.sbatch"
        script.write_text(text)
        done = subprocess.run(
            [exe, "--severity=info", str(script)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout


def test_arguments_follow_the_node_s_device_and_gid() -> None:
    config = dataclasses.replace(_config("ionic_1:2,eth0"), ucx_ib_gid_index="auto")
    assert repro_args(config, "gpu-node-02") == [
        "mori-repro",
        "run",
        "--device",
        "ionic_1",
        "--port",
        "2",
        "--json",
    ]
    with pytest.raises(Exception, match="names no RDMA device:port for gpu-node-01"):
        repro_args(_config("eth0"), "gpu-node-01")


def test_the_verdict_of_the_real_program_decides(doubles: dict[str, Path]) -> None:
    args = repro_args(_config("ionic_dbl0:1"), "gpu-node-01")
    libs = {"MORI_REPRO_LIBIBVERBS": str(doubles["ibverbs"]), "MORI_REPRO_LIBHSA": str(doubles["hsa"])}
    # HSA semantics: offset 0 misplaces the write, the exporter's offset lands: the node can run MORI's fix.
    ok, why = judge(repro(args, libs))
    assert ok and why.startswith("bug-reproduced (exit 10): "), why
    # A NIC that refuses the registration's access: the fix is not confirmed, a defect of its own.
    ok, why = judge(repro(args, libs | {"IBV_DOUBLE_REJECT_ACCESS": "2"}))
    assert not ok and why.startswith("fix-not-confirmed (exit 11): "), why
    # Nothing to run on (this machine: no GPU runtime, no RDMA device): it cannot say, so it does not pass.
    ok, why = judge(repro(args, {}))
    assert not ok and why.startswith("environment-cannot-run (exit 20): "), why
    assert judge(None) == (False, "no mori-repro report")
    assert not judge({"exit_code": 0, "verdict": "bug-reproduced"})[0]  # a report at odds with itself


def test_the_validate_rung_runs_mori_repro_after_the_validator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config()
    job = JobInfo(1, "atomdyn-mori-repro", "FAILED", None, "gpu-node-01", None, None, "sacct")
    reports = {"gpu-node-01": {"exit_code": 10, "verdict": "bug-reproduced", "summary": "bug reproduced: …"},
               "gpu-node-02": {"exit_code": 20, "verdict": "environment-cannot-run", "summary": "missing rdma"}}  # fmt: skip
    ran: list[str] = []

    class Validated:
        ok = True
        run_dir = tmp_path / "validate"

    def fake_repro(cfg: ClusterConfig, *, node: str, timeout_s: float) -> MoriRepro:
        ran.append(node)
        return MoriRepro(job, tmp_path / node, reports[node])

    monkeypatch.setattr(rungs, "run_gpu_validation", lambda *a, **k: Validated())
    monkeypatch.setattr(rungs, "run_mori_repro", fake_repro)
    climb = Climb(config, LaunchOptions(kind="disagg"), ProbeOptions(), tmp_path, Progress(enabled=False))
    result = rungs.validate(climb)
    assert ran == ["gpu-node-01", "gpu-node-02"]
    assert result.verdict == FAILED
    assert result.detail == "gpu-node-02: FAIL mori-repro: environment-cannot-run (exit 20): missing rdma"
    reports["gpu-node-02"] = reports["gpu-node-01"]
    assert rungs.validate(climb).verdict == PASS
    # An engine whose KV is NIXL's runs no reproducer.
    atom = Climb(golden_config("atom", "docker"), LaunchOptions(kind="disagg"), ProbeOptions(), tmp_path,
                 Progress(enabled=False))  # fmt: skip
    ran.clear()
    assert rungs.validate(atom).verdict == PASS and ran == []
