"""The vllm-cpu engine: the dynamo.vllm line of the GPU engines, with the CPU rehearsal's settings as data."""

from __future__ import annotations

import json
from pathlib import Path

from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.base import RoleContext
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.rehearsal.tasks import kv_transfer_figures
from atomdyn_launchers.runtimes import VenvRuntime
from atomdyn_launchers.sbatch import render_arg

ENGINE = get_engine("vllm-cpu")


def _ctx(mode: str, index: int, cache_dir: str = "/shared/cache") -> RoleContext:
    return RoleContext(
        run_id="r",
        role=mode,
        mode=mode,
        with_frontend=mode == "decode",
        index=index,
        model=get_model(ENGINE.default_model),
        model_path="/shared/models/tiny-qwen3-bf16",
        etcd_endpoint="http://head:2379",
        namespace="ns",
        home_dir="/shared/runs/r/home",
        ports=Ports.for_role(index),
        runtime=VenvRuntime(ENGINE.venv(Path("/p/.venv"), Path("/p"))),
        run_dir="/shared/runs/r",
        cache_dir=cache_dir,
    )


def _worker(mode: str, index: int, cache_dir: str = "/shared/cache") -> tuple[list[str], dict[str, str]]:
    plan = ENGINE.plan(_ctx(mode, index, cache_dir))
    worker = next(p for p in plan.processes if p.name == plan.worker_process)
    return [render_arg(a) for a in worker.argv], {k: render_arg(v) for k, v in worker.env.items()}


def test_workers_run_the_shared_dynamo_vllm_line_from_the_cpu_environment() -> None:
    argv, env = _worker("prefill", 1)
    assert argv[:3] == ["/p/.venv-vllm-cpu/bin/python", "-m", "dynamo.vllm"]
    assert argv[argv.index("--model") + 1] == "/shared/models/tiny-qwen3-bf16"
    config = json.loads(argv[argv.index("--kv-transfer-config") + 1].strip("'"))
    assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"}
    assert "--enforce-eager" not in argv  # decode dies with "Illegal instruction" in eager mode
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == '"$MGMT_ADDR"'  # the address the peer must use


def test_every_worker_runs_the_model_in_its_engine_core_process() -> None:
    """The uni executor, as vLLM runs one GPU; the CPU platform keeps it only with multiprocessing off."""
    for mode in ("agg", "prefill", "decode"):
        argv, env = _worker(mode, 0)
        assert argv[argv.index("--distributed-executor-backend") + 1] == "uni"
        assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_kv_path_is_forced_onto_tcp_and_shows_its_transport() -> None:
    for mode, index in (("prefill", 1), ("decode", 0)):
        _, env = _worker(mode, index)
        assert env["UCX_TLS"] == "tcp,self" and env["UCX_PROTO_INFO"] == "y"
    _, agg = _worker("agg", 0)
    assert "UCX_TLS" not in agg  # no KV moves between aggregated workers


def test_each_worker_has_its_own_side_channel_port_and_core() -> None:
    workers = [_worker(mode, i)[1] for mode, i in (("prefill", 1), ("decode", 0))]
    assert len({env["VLLM_NIXL_SIDE_CHANNEL_PORT"] for env in workers}) == 2
    # Expanded by the job on the node: the role's index modulo the cores there.
    assert {env["VLLM_CPU_OMP_THREADS_BIND"] for env in workers} == {
        '"$(( 1 % $(nproc) ))"',
        '"$(( 0 % $(nproc) ))"',
    }
    assert all(env["OMP_NUM_THREADS"] == "1" for env in workers)


def test_compile_caches_live_on_the_shared_directory() -> None:
    _, env = _worker("decode", 0)
    assert env["VLLM_CACHE_ROOT"] == "/shared/cache/vllm-cpu/vllm"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/shared/cache/vllm-cpu/inductor"
    _, per_run = _worker("decode", 0, cache_dir="")
    assert per_run["VLLM_CACHE_ROOT"].startswith("/shared/runs/r/home/")


def test_no_gpus_and_the_tiny_model_by_default() -> None:
    plan = ENGINE.plan(_ctx("decode", 0))
    assert plan.gpus == 0 and not ENGINE.needs_gpus()
    assert ENGINE.default_model == "tiny-qwen3-bf16"
    assert get_model(ENGINE.default_model).build_digest is not None


def test_gates_demand_a_real_kv_move_over_tcp() -> None:
    expected = ENGINE.expectations.for_kind("disagg")
    assert expected.nixl_transfers and expected.external_prefix_hits
    assert expected.kv_transport == "tcp"
    assert {"cma", "sysv", "posix"} <= set(expected.forbidden_kv_transports)
    assert not ENGINE.expectations.for_kind("agg-single").nixl_transfers


def test_platform_label_says_rehearsal_on_cpu() -> None:
    assert ENGINE.platform_label({"accelerator": None}) == "rehearsal (CPU, vLLM, NIXL over TCP)"
    assert "not MI355X" in ENGINE.platform_label(
        {"accelerator": "nvidia", "nvidia": {"gpus": [{"name": "H200"}]}}
    )


def test_bench_reads_the_kv_transfers_from_a_real_runs_metrics() -> None:
    fixture = (
        Path(__file__).parents[1]
        / "evidence"
        / "fixtures"
        / "vllm-cpu-disagg"
        / "20261201T124322Z-disagg-vllm-cpu"
    )
    assert kv_transfer_figures(fixture) == "9 NIXL transfers, 206 KiB and 274.4 ms each on average"
    assert kv_transfer_figures(Path(__file__).parent / "no-such-run") is None


def test_vllm_cpu_roles_tolerate_a_stalled_node_longer_than_their_lease_would() -> None:
    """During UCX's TCP-emulated KV reads a 2-core node's other traffic stalled for 5-13 s (measured): the
    helper waits 60 s for etcd before failing the role, and its lease outlives that wait."""
    from atomdyn_launchers.contract.leases import ETCD_LOST_S, call_timeout_for
    from atomdyn_launchers.engines import get_engine

    assert get_engine("vllm-cpu").timeouts.etcd_grace_s == 60.0
    assert get_engine("mocker").timeouts.etcd_grace_s == ETCD_LOST_S  # the fault bounds stay as documented
    # Its etcd calls wait longer too (etcd answered in 4-5 s on the starved machine); the others' do not.
    assert (call_timeout_for(60.0, 2.0), call_timeout_for(ETCD_LOST_S, 2.0)) == (8.0, 2.0)
    golden = Path(__file__).parents[1] / "golden" / "disagg-vllm-cpu-venv" / "decode.sbatch"
    register = next(line for line in golden.read_text().splitlines() if line.startswith("start register "))
    words = register.split()
    assert words[words.index("--etcd-lost-s") + 1] == "60"
    assert int(words[words.index("--ttl") + 1]) > 60
    # Dynamo's own lease (worker and frontend) outlives the stall too: with its default 10 s a stalled prefill
    # worker lost its lease, shut itself down mid-run, and the frontend answered 503 (measured).
    assert "export ETCD_LEASE_TTL=300" in golden.read_text().splitlines()
    mocker = Path(__file__).parents[1] / "golden" / "disagg-mocker-venv" / "decode.sbatch"
    assert "ETCD_LEASE_TTL" not in mocker.read_text()  # production engines keep Dynamo's default
