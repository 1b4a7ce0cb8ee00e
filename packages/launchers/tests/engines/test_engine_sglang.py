"""The sglang engine: dynamo.sglang workers with SGLang's MORI transfer backend on MI355X, planned from the flags
of the pinned SGLang and Dynamo (the parser test, tests/run/test_sglang_recipe.py, parses them with SGLang's own
parser)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines import EngineError, RoleContext, RolePlan, get_engine
from atomdyn_launchers.engines.sglang import SGLANG_METRICS, rdma_devices
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.runtimes import DockerRuntime
from atomdyn_launchers.sbatch import Shell

DOCKER = DockerRuntime("dynamo-sglang-mi35x:1.3.0-0.5.14", "atomdyn-r", ["/shared"])


def _ctx(mode: str, index: int = 0, net: str | None = "ionic_0:1,eth0", gid: str = "1") -> RoleContext:
    return RoleContext(
        run_id="20260101T000000Z-disagg-sglang",
        role=mode,
        mode=mode,
        with_frontend=mode == "decode",
        index=index,
        model=get_model("qwen3-8b-bf16"),
        model_path="/shared/models/qwen3-8b",
        etcd_endpoint="http://10.1.2.3:2379",
        namespace="atomdyn-test",
        home_dir="/shared/runs/r/home/x",
        ports=Ports.for_role(index, 40),
        runtime=DOCKER,
        run_dir="/shared/runs/r",
        ucx_net_devices=net,
        ucx_gid_index=gid,
    )


def _worker(plan: RolePlan) -> tuple[list[str], dict[str, str]]:
    """The worker's own command line, and the environment its container gets (docker's -e NAME=value)."""
    proc = next(p for p in plan.processes if p.name == plan.worker_process)
    argv = [a.text if isinstance(a, Shell) else a for a in proc.argv]
    env = dict(v.partition("=")[::2] for k, v in itertools.pairwise(argv) if k == "-e" and "=" in v)
    return argv[argv.index("dynamo.sglang") - 2 :], env


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_pd_workers_move_kv_over_mori_with_the_leased_bootstrap_port() -> None:
    engine = get_engine("sglang")
    prefill = engine.plan(_ctx("prefill", index=1))
    argv, env = _worker(prefill)
    assert argv[:3] == ["python3", "-m", "dynamo.sglang"]
    assert _value(argv, "--disaggregation-mode") == "prefill"
    assert _value(argv, "--disaggregation-transfer-backend") == "mori"
    # The role's leased port, not the one Dynamo would pick (args.py:348-354); checked free by the job.
    assert _value(argv, "--disaggregation-bootstrap-port") == str(Ports.for_role(1, 40).bootstrap)
    assert "bootstrap" in prefill.listens and "kv_events" in prefill.listens
    # MORI takes device names (MORI_RDMA_DEVICES): the RDMA device of ionic_0:1, not the netdev.
    assert _value(argv, "--disaggregation-ib-device") == "ionic_0"
    assert _value(argv, "--kv-canary") == "raise" and _value(argv, "--kv-canary-real-data") == "partial"
    assert env["SGLANG_HOST_IP"] == '"$MGMT_ADDR"' and env["MORI_IB_GID_INDEX"] == "1"
    assert any("job.rdma" in line for line in prefill.prelude)  # the RDMA check before the engine starts

    decode = engine.plan(_ctx("decode"))
    argv, env = _worker(decode)
    assert [p.name for p in decode.processes] == ["frontend", "decode"]
    assert _value(argv, "--disaggregation-mode") == "decode"
    assert "--kv-events-config" not in argv and "bootstrap" not in decode.listens


def test_an_aggregated_worker_moves_no_kv() -> None:
    plan = get_engine("sglang").plan(_ctx("agg", net=None))
    argv, env = _worker(plan)
    assert "--disaggregation-mode" not in argv and "--kv-canary" not in argv  # SGLang's default: null
    assert "MORI_IB_GID_INDEX" not in env
    assert not any("job.rdma" in line for line in plan.prelude)
    assert "--enable-metrics" in argv  # SGLang's metrics reach Dynamo's system port only with it


def test_mori_devices_and_gid() -> None:
    assert rdma_devices(_ctx("prefill", net="ionic_0:1,ionic_1:1,ionic_0:2,eth0")) == ["ionic_0", "ionic_1"]
    env = _worker(get_engine("sglang").plan(_ctx("prefill", gid="auto")))[1]
    assert "MORI_IB_GID_INDEX" not in env  # unset: MORI picks the GID itself
    with pytest.raises(EngineError, match="names no RDMA device"):
        get_engine("sglang").plan(_ctx("prefill", net="eth0"))
    problems = get_engine("sglang").launch_problems("disagg", ["n1", "n2"], {"n1": "ionic_0:1"}.get)
    assert len(problems) == 1 and "n2" in problems[0]


def test_the_engine_declares_its_gates_and_metrics() -> None:
    engine = get_engine("sglang")
    expectations = engine.expectations
    assert expectations.metrics == SGLANG_METRICS
    assert expectations.metrics.named("kv_failed_transfers") == "sglang:num_transfer_failed_reqs"
    assert expectations.aggregated_answer and expectations.answer_prefix_tokens == 16
    # MORI registers and moves the KV itself: none of the NIXL path's gates.
    assert not expectations.nixl_transfers and not expectations.dmabuf_registrations
    assert expectations.kv_transport is None and not expectations.doctor_required
    assert engine.images("disagg", "img:1", "nixl:1") == ["img:1"]
    assert not engine.nixl_probe and get_engine("atom").nixl_probe  # the ladder's NIXL rung: not needed
    with pytest.raises(EngineError, match="not NIXL"):
        engine.plan(replace(_ctx("prefill"), kv_probe=object()))  # type: ignore[arg-type]


def test_golden_snapshots_exist() -> None:
    golden = Path(__file__).resolve().parents[1] / "golden"
    for case in ("agg-single-sglang", "disagg-sglang"):
        for runtime in ("docker", "podman", "pyxis"):
            assert (golden / f"{case}-{runtime}" / "commands.txt").is_file()


def test_the_ladder_s_nixl_rung_is_not_needed_for_mori(tmp_path: Path) -> None:
    from golden_launch import golden_config

    from atomdyn_launchers.certify.rungs import NOT_NEEDED, Climb, nixl
    from atomdyn_launchers.engines.base import ProbeOptions
    from atomdyn_launchers.progress import Progress
    from atomdyn_launchers.run.options import LaunchOptions

    config = golden_config("sglang", "docker")
    climb = Climb(config, LaunchOptions(kind="disagg"), ProbeOptions(), tmp_path, Progress(enabled=False))
    result = nixl(climb)
    assert result.verdict == NOT_NEEDED and result.passed
    assert result.detail == "the sglang engine does not move KV over NIXL"
