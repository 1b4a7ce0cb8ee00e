"""Role planning and the checks that refuse a run before Slurm is asked anything (no cluster needed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError, parse_cluster_env
from atomdyn_launchers.contract.rundir import RunDir, make_run_id, read_jsonl
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.run.launch import Launch
from atomdyn_launchers.run.lockinfo import run_lock_digest
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import plan_roles, required_instances
from atomdyn_launchers.run.stages.record import role_files
from atomdyn_launchers.run.submission import Submission
from atomdyn_launchers.sbatch import Shell, render


def _config(tmp_path: Path, **changes: object) -> ClusterConfig:
    text = "\n".join(
        [
            "SLURM_ACCOUNT=a",
            "SLURM_PARTITION=p",
            "SLURM_QOS=q",
            "PRIMARY_NODE=n1",
            "PREFILL_NODE=n1",
            "DECODE_NODE=n2",
            f"SHARED_DIR={tmp_path}",
            f"MODEL_PATH={tmp_path}",
            "ENGINE_PROFILE=mocker",
            "RUNTIME=venv",
            f"PROJECT_DIR={tmp_path}",
            f"PYTHON_VENV={tmp_path}/venv",
            "GPUS_PER_NODE=2",
            "ETCD_ENDPOINT=http://127.0.0.1:9",
        ]
    )
    return dataclasses.replace(parse_cluster_env(text), **changes)


def test_default_request_counts() -> None:
    counts = {
        kind: LaunchOptions(kind=kind).resolved_requests() for kind in ("agg-single", "agg-two", "disagg")
    }
    assert counts == {"agg-single": 8, "agg-two": 32, "disagg": 32}
    assert LaunchOptions(kind="disagg", requests=3).resolved_requests() == 3


def test_roles_per_kind(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    assert [(r.role, r.node, r.mode, r.with_frontend) for r in plan_roles("agg-single", cfg)] == [
        ("agg", "n1", "agg", True)
    ]
    assert [(r.role, r.node, r.with_frontend) for r in plan_roles("agg-two", cfg)] == [
        ("agg1", "n1", True),
        ("agg2", "n2", False),
    ]
    # Prefill is submitted first; the frontend lives with decode.
    assert [(r.role, r.node, r.mode, r.with_frontend) for r in plan_roles("disagg", cfg)] == [
        ("prefill", "n1", "prefill", False),
        ("decode", "n2", "decode", True),
    ]
    assert required_instances("disagg") == {"prefill": 1, "backend": 1}
    assert required_instances("agg-two") == {"backend": 2}


@pytest.mark.parametrize(
    ("kind", "changes", "message"),
    [
        ("disagg", {"decode_node": "n1"}, "PREFILL_NODE and DECODE_NODE are the same"),
        ("agg-two", {"decode_node": "n1"}, "agg-two needs two nodes"),
        ("both", {}, "unknown run kind 'both'"),
    ],
)
def test_impossible_layouts_are_refused(
    tmp_path: Path, kind: str, changes: dict[str, str], message: str
) -> None:
    with pytest.raises(PreflightError, match=message):
        plan_roles(kind, _config(tmp_path, **changes))


def test_missing_job_venv_is_refused_before_slurm(tmp_path: Path) -> None:
    launch = Launch(_config(tmp_path), LaunchOptions(kind="disagg"))
    with pytest.raises(PreflightError, match=r"PYTHON_VENV .*/venv has no bin/python"):
        launch.run()
    assert not (tmp_path / "runs").exists()


def test_venv_without_dynamo_is_refused(tmp_path: Path) -> None:
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    launch = Launch(_config(tmp_path), LaunchOptions(kind="agg-single"))
    with pytest.raises(PreflightError, match=r"has no dynamo.mocker \(install ai-dynamo==1.3.0.post1"):
        launch.run()


def test_model_larger_than_a_node_is_refused(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        engine_profile="atom",
        runtime="docker",
        dynamo_atom_image="img:1",
        nixl_image="img:2",
        ucx_net_devices=(("*", "ionic_0:1"),),
    )
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    launch = Launch(cfg, LaunchOptions(kind="disagg", model="qwen3.5-397b-mxfp4"))
    with pytest.raises(PreflightError, match="needs 4 GPUs per worker; GPUS_PER_NODE is 2"):
        launch.run()


def test_atom_p_d_without_the_overlay_image_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path, engine_profile="atom", runtime="docker", dynamo_atom_image="img:1")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    with pytest.raises(PreflightError, match="atom P/D runs need NIXL_IMAGE"):
        Launch(cfg, LaunchOptions(kind="disagg")).run()
    assert not (tmp_path / "runs").exists()


def test_atom_p_d_without_ucx_net_devices_is_refused(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        engine_profile="atom",
        runtime="docker",
        dynamo_atom_image="img:1",
        nixl_image="img:2",
        ucx_net_devices=(("n1", "ionic_0:1"),),
    )
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    with pytest.raises(PreflightError, match="UCX_NET_DEVICES names no device for n2"):
        Launch(cfg, LaunchOptions(kind="disagg")).run()


def test_cross_layer_kv_blocks_reach_vllms_connector_where_the_engine_can(tmp_path: Path) -> None:
    """KV_CROSS_LAYER_BLOCKS=yes: the vllm and atom workers ask vLLM's NixlConnector for one range per block;
    an engine whose vLLM has no such layout is refused before anything is submitted, saying why."""
    for engine, setting in (("vllm", "yes"), ("atom", "yes"), ("vllm", "no")):
        cfg = _config(
            tmp_path,
            engine_profile=engine,
            kv_cross_layer_blocks=setting,
            ucx_net_devices=(("*", "ionic_0:1"),),
        )
        run_id = f"20260101T000000Z-disagg-{engine}"
        submission = Submission(
            cfg,
            LaunchOptions(kind="disagg"),
            get_engine(engine),
            get_model("qwen3-8b-bf16"),
            RunDir(tmp_path / setting / run_id, run_id),
            "http://127.0.0.1:2379",
            60.0,
        )
        runtime = submission.runtime()
        for spec in plan_roles("disagg", cfg):
            plan, _ = submission.role(spec, runtime)
            words = [a.text if isinstance(a, Shell) else a for p in plan.processes for a in p.argv]
            config = json.loads(words[words.index("--kv-transfer-config") + 1])
            extra = config.get("kv_connector_extra_config")
            assert extra == ({"enable_cross_layers_blocks": "true"} if setting == "yes" else None), (
                engine,
                extra,
            )
    cfg = _config(tmp_path, engine_profile="vllm-cpu", kv_cross_layer_blocks="yes")
    (tmp_path / "venv" / "bin").mkdir(parents=True, exist_ok=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    with pytest.raises(
        PreflightError, match=r"KV_CROSS_LAYER_BLOCKS=yes: engine vllm-cpu cannot \(vLLM 0.32's CPU"
    ):
        Launch(cfg, LaunchOptions(kind="disagg")).run()


@pytest.mark.parametrize(("gres", "expected"), [(False, 0), (True, 1)])
def test_gres_only_when_the_config_asks(tmp_path: Path, gres: bool, expected: int) -> None:
    cfg = _config(tmp_path, engine_profile="atom", slurm_gpu_gres=gres, ucx_net_devices=(("*", "ionic_0:1"),))
    run_id = "20260101T000000Z-disagg-atom"
    submission = Submission(
        cfg,
        LaunchOptions(kind="disagg"),
        get_engine("atom"),
        get_model("qwen3-8b-bf16"),
        RunDir(tmp_path / run_id, run_id),
        "http://127.0.0.1:2379",
        60.0,
    )
    runtime = submission.runtime()
    for spec in plan_roles("disagg", cfg):
        plan, job = submission.role(spec, runtime)
        assert plan.gpus == 1 and job.gpus == expected
        assert ("#SBATCH --gres=gpu:1" in render(job)) is gres


def test_run_ids_keep_their_format_when_two_start_in_one_second(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    moment = datetime(2026, 11, 30, 0, 42, 7, tzinfo=timezone.utc)
    assert make_run_id("disagg", "mocker", moment) == "20261130T004207Z-disagg-mocker"
    first = RunDir.create(tmp_path, "disagg", "mocker", moment)
    second = RunDir.create(tmp_path, "disagg", "mocker", moment)
    assert (first.run_id, second.run_id) == (
        "20261130T004207Z-disagg-mocker",
        "20261130T004208Z-disagg-mocker",
    )
    with pytest.raises(ValueError, match="unknown run kind"):
        make_run_id("agg", "mocker")


def test_timeline_and_requests_refuse_off_contract_records(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path, "agg-single", "mocker")
    run.event("submitted", role="agg", job_id=7, detail="node n1", t=1.5)
    with pytest.raises(ValueError, match="unknown timeline event"):
        run.event("started")
    with pytest.raises(ValueError, match="lacks"):
        run.request({"index": 0})
    assert read_jsonl(run.path / "timeline.jsonl") == [
        {"t": 1.5, "event": "submitted", "role": "agg", "job_id": 7, "detail": "node n1"}
    ]
    # A partial last line (a write in progress) is not returned.
    with (run.path / "timeline.jsonl").open("a") as handle:
        handle.write('{"t": 2.0, "ev')
    assert len(read_jsonl(run.path / "timeline.jsonl")) == 1


def test_docker_runs_record_the_lock_digest_of_the_running_image() -> None:
    # The checkout's lock may differ from the one the image was built from: the image's label wins.
    images = {
        "prefill": {"image": "img:2", "id": "sha256:1", "lock_digest": "sha256:image"},
        "decode": {"image": "img:2", "id": "sha256:1", "lock_digest": "sha256:image"},
    }
    assert run_lock_digest("docker", images, "sha256:checkout") == (
        "sha256:image",
        "image label io.atomdyn.lock.digest",
    )
    unlabeled = {**images, "decode": {**images["decode"], "lock_digest": ""}}
    digest, source = run_lock_digest("docker", unlabeled, "sha256:checkout")
    assert digest is None and "decode carries no io.atomdyn.lock.digest label" in source
    mixed = {**images, "decode": {**images["decode"], "lock_digest": "sha256:other"}}
    assert run_lock_digest("docker", mixed, "sha256:checkout")[0] is None
    assert run_lock_digest("docker", {}, "sha256:checkout")[0] is None
    assert run_lock_digest("venv", {}, "sha256:checkout") == (
        "sha256:checkout",
        "checkout lock (venv runtime)",
    )


def test_platform_comes_from_the_roles_fingerprints_not_the_engine_name(tmp_path: Path) -> None:
    atom = get_engine("atom")
    # Every probe agreeing (engines/hardware.py): the management tool, the ROCm runtime, the driver.
    ok = dict.fromkeys(
        ("amd-smi static", "amdgpu_module", "rocminfo", "nvidia-smi", "nvidia-smi banner"), "ok"
    )
    runtime = {"marketing_names": ["AMD Instinct MI355X"] * 8, "gfx": ["gfx950"]}
    amd = {"gpus": ["AMD Instinct MI355X"] * 8, "amdgpu_driver": "6.12.12", "runtime": runtime}
    mi355x = {"accelerator": "amd", "amd": amd, "probes": ok}
    nvidia = {"gpus": [{"name": "NVIDIA H200"}], "driver": "580.159.04", "cuda_version": "13.0"}
    h200 = {"accelerator": "nvidia", "nvidia": nvidia, "probes": ok}
    cpu = {"accelerator": None, "probes": {"amd-smi": "absent", "nvidia-smi": "absent"}}
    assert atom.platform_of({"prefill": mi355x, "decode": mi355x}) == "MI355X"
    assert atom.platform_of(
        {"decode": {"accelerator": "amd", "amd": {"gpus": ["AMD Instinct MI355X"]}}}
    ).startswith("unknown (")  # a name alone, no probe behind it
    assert atom.platform_of({"decode": h200}) == "H200 (NVIDIA), not MI355X"
    assert atom.platform_of({"decode": cpu}) == "CPU (no GPU seen), not MI355X"
    assert atom.platform_of({}) == "unknown (no fingerprint), not MI355X"
    assert get_engine("mocker").platform_of({"decode": cpu}) == "rehearsal (CPU, mock engine)"
    # role_files reads what the jobs wrote, skipping a file being written.
    (tmp_path / "fingerprints").mkdir()
    (tmp_path / "fingerprints" / "decode.json").write_text(json.dumps(h200))
    (tmp_path / "fingerprints" / "prefill.json.tmp").write_text("{")
    assert role_files(tmp_path, "fingerprints") == {"decode": h200}
