"""Engine profiles: how a role (agg, prefill, decode) is started by each engine, in each runtime.

The launchers only know roles; this module turns a role into process command lines:

- ``mocker``: Dynamo 1.3's CPU mock engine (the rehearsal), ``python -m dynamo.mocker``.
- ``vllm``: ``python -m dynamo.vllm`` on NVIDIA GPUs, KV moved by vLLM's NixlConnector.
- ``atom``: the same on MI355X with ATOM as vLLM's platform plugin, plus the ionic/ROCm UCX settings, the
  NIXL HOST-classification opt-in and the dma-buf registration helper preloaded.

Runtimes: ``venv`` runs the venv's Python directly; ``docker`` wraps each engine command in ``docker run``
of the built image with the GPU and RDMA devices, the shared directory, host networking and host IPC.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_launchers.profiles.models import ModelProfile, ProfileError
from atomdyn_launchers.sbatch import Arg, ProcessSpec, Shell

ENGINES = ("mocker", "vllm", "atom")
MODES = ("agg", "prefill", "decode")

KV_TRANSFER_CONFIG = json.dumps(
    {"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":")
)

# ionic RoCE with ROCm memory (FIELD_NOTES §10). RC queue pairs only: UD fails on ionic, so neither UD
# transports nor the `ib` alias that pulls them in; the ROCm transports let UCX see VRAM as VRAM.
ATOM_UCX_ENV: Mapping[str, str] = {
    "UCX_TLS": "rc_v,tcp,rocm,rocm_copy,rocm_ipc,self,sm",
    "UCX_MEMTYPE_CACHE": "y",
    "UCX_IB_GID_INDEX": "1",  # the IPv4 RoCEv2 GID on ionic
    "VLLM_ROCM_USE_AITER": "1",
    # Read by the NIXL compatibility patch: lets VRAM that UCX classifies as HOST register (and says so).
    "NIXL_COMPAT_ALLOW_HOST_VRAM": "1",
    "SAFETENSORS_FAST_GPU": "1",
    "VLLM_RPC_TIMEOUT": "1800000",
}


@dataclass(frozen=True)
class Ports:
    """Per-role ports. Fixed numbers: each role runs on its own node (or its own network namespace)."""

    http: int = 8000
    system: int = 8081
    bootstrap: int = 8090
    nixl_side_channel: int = 20097

    @classmethod
    def for_role(cls, index: int, base_offset: int = 0) -> Ports:
        # Distinct per role even if two roles ever share a host: side-channel ports must be unique per worker.
        return cls(
            http=8000 + base_offset,
            system=8081 + index + base_offset,
            bootstrap=8090 + index + base_offset,
            nixl_side_channel=20097 + index + base_offset,
        )


@dataclass(frozen=True)
class VenvRuntime:
    venv: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def wrap(
        self, name: str, argv: Sequence[Arg], env: Mapping[str, Arg], devices: bool = True
    ) -> ProcessSpec:
        return ProcessSpec(name, list(argv), dict(env))

    def tool(self, argv: Sequence[str]) -> list[str]:
        return [str(self.venv / "bin" / argv[0]), *argv[1:]]


@dataclass(frozen=True)
class DockerRuntime:
    image: str
    container_prefix: str
    mounts: Sequence[str]
    gpu_vendor: str  # "amd" | "nvidia" | "none"
    docker: str = "docker"
    python: str = "python3"
    pass_env: Sequence[str] = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

    def _base(self, name: str, devices: bool) -> list[Arg]:
        args: list[Arg] = [self.docker, "run", "--rm", "--name", f"{self.container_prefix}-{name}"]
        args += ["--network", "host", "--ipc", "host", "--cap-add", "IPC_LOCK", "--ulimit", "memlock=-1"]
        vendor = self.gpu_vendor if devices else "none"  # the frontend needs no GPU or NIC
        if vendor == "amd":
            # The RDMA path is the point on MI355X: a node without /dev/infiniband fails loudly here.
            args += ["--device", "/dev/kfd", "--device", "/dev/dri", "--device", "/dev/infiniband"]
            args += ["--group-add", "video", "-v", "/etc/libibverbs.d:/etc/libibverbs.d:ro"]
        elif vendor == "nvidia":
            # NVLink-only hosts have no RDMA devices; pass them when present (see prelude()).
            args += ["--gpus", "all", Shell('"${IB_DEVICE_ARGS[@]}"')]
        for mount in self.mounts:
            args += ["-v", f"{mount}:{mount}"]
        for var in self.pass_env:
            args += ["-e", var]  # passed through from the job (Slurm's GPU binding), absent if unset
        return args

    def wrap(
        self, name: str, argv: Sequence[Arg], env: Mapping[str, Arg], devices: bool = True
    ) -> ProcessSpec:
        """``env`` must hold everything the process needs: a container does not inherit the job's exports."""
        args = self._base(name, devices)
        for key, value in sorted(env.items()):
            args += [
                "-e",
                Shell(shlex.quote(f"{key}=") + value.text) if isinstance(value, Shell) else f"{key}={value}",
            ]
        return ProcessSpec(name, [*args, self.image, *argv], {})

    def tool(self, argv: Sequence[str]) -> list[str]:
        """A short-lived command in the image (a probe, no devices); ``python`` means the image's Python."""
        command = [self.python if argv[0] == "python" else argv[0], *argv[1:]]
        return [self.docker, "run", "--rm", "--network", "host", self.image, *command]

    def prelude(self) -> list[str]:
        if self.gpu_vendor != "nvidia":
            return []
        return [
            "IB_DEVICE_ARGS=()",
            "if [ -e /dev/infiniband ]; then IB_DEVICE_ARGS=(--device /dev/infiniband); fi",
        ]


Runtime = VenvRuntime | DockerRuntime


@dataclass(frozen=True)
class RoleContext:
    """Everything an engine profile needs to start one role."""

    run_id: str
    role: str
    mode: str  # agg | prefill | decode
    with_frontend: bool
    index: int
    model: ModelProfile
    model_path: str
    etcd_endpoint: str
    namespace: str
    home_dir: str
    ports: Ports
    runtime: Runtime
    speedup_ratio: float = 10.0
    router_mode: str = "kv"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # The helper `nodes.prepare` installed on the shared filesystem; the venv runtime prefers it when present.
    prepared_shim: str = ""


@dataclass(frozen=True)
class RolePlan:
    """The processes of a role, the shell prelude they need, and what the registration helper checks."""

    processes: list[ProcessSpec]
    prelude: list[str]
    env: dict[str, Arg]
    worker_process: str
    gpus: int
    served_model_name: str


def _wrap(
    ctx: RoleContext, name: str, argv: list[Arg], env: dict[str, Arg], devices: bool = True
) -> ProcessSpec:
    if isinstance(ctx.runtime, DockerRuntime):
        env = {**dynamo_env(ctx), **env}  # the job's exports do not reach into a container
    return ctx.runtime.wrap(name, argv, env, devices)


def dynamo_env(ctx: RoleContext) -> dict[str, Arg]:
    """Discovery through etcd, TCP request plane, ZMQ events: no NATS (FIELD_NOTES §6)."""
    env: dict[str, Arg] = {
        "DYN_DISCOVERY_BACKEND": "etcd",
        "ETCD_ENDPOINTS": ctx.etcd_endpoint,
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_EVENT_PLANE": "zmq",
        "DYN_NAMESPACE": ctx.namespace,
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(ctx.extra_env)
    return env


def _frontend(ctx: RoleContext) -> ProcessSpec:
    argv: list[Arg] = [ctx.runtime.python, "-m", "dynamo.frontend", "--namespace", ctx.namespace]
    argv += ["--http-host", "0.0.0.0", "--http-port", str(ctx.ports.http), "--router-mode", ctx.router_mode]
    # The frontend caches model cards under ~/.cache/dynamo: a per-run HOME keeps runs from seeing stale ones.
    env: dict[str, Arg] = {"HOME": f"{ctx.home_dir}/frontend"}
    return _wrap(ctx, "frontend", argv, env, devices=False)


def _worker_name(mode: str) -> str:
    return {"agg": "worker", "prefill": "prefill", "decode": "decode"}[mode]


def plan_mocker(ctx: RoleContext) -> RolePlan:
    model = ctx.model
    argv: list[Arg] = [ctx.runtime.python, "-m", "dynamo.mocker", "--model-path", ctx.model_path]
    argv += ["--disaggregation-mode", ctx.mode, "--speedup-ratio", f"{ctx.speedup_ratio:g}"]
    if model.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(model.max_num_seqs)]
    argv.append("--enable-prefix-caching" if model.enable_prefix_caching else "--no-enable-prefix-caching")
    if ctx.mode == "prefill":
        argv += ["--bootstrap-ports", str(ctx.ports.bootstrap)]
    env: dict[str, Arg] = {
        "DYN_SYSTEM_PORT": str(ctx.ports.system),
        # Serves the tokenizer files to the frontend; without it the frontend tries the model hub.
        "DYN_SELF_HOST_METADATA": "1",
        "HOME": f"{ctx.home_dir}/{_worker_name(ctx.mode)}",
    }
    processes = [_wrap(ctx, _worker_name(ctx.mode), argv, env)]
    if ctx.with_frontend:
        processes.insert(0, _frontend(ctx))
    return RolePlan(processes, [], dynamo_env(ctx), _worker_name(ctx.mode), 0, ctx.model_path)


def _probe_disagg_prelude(ctx: RoleContext) -> list[str]:
    """Shell asking the installed dynamo.vllm which disaggregation flag it takes (renamed across releases)."""
    probe = " ".join(shlex.quote(a) for a in ctx.runtime.tool(["python", "-m", "dynamo.vllm", "--help"]))
    legacy = {"agg": "", "prefill": "--is-prefill-worker", "decode": "--is-decode-worker"}[ctx.mode]
    return [
        "# Which disaggregation flag does this dynamo.vllm take? (older: --is-prefill-worker)",
        f'VLLM_HELP=$({probe} 2>&1) || {{ log "dynamo.vllm --help failed: $VLLM_HELP"; exit 2; }}',
        'if grep -q -- "--disaggregation-mode" <<<"$VLLM_HELP"; then',
        f"  DISAGG_ARGS=(--disaggregation-mode {ctx.mode})",
        'elif grep -q -- "--is-prefill-worker" <<<"$VLLM_HELP"; then',
        f"  DISAGG_ARGS=({legacy})",
        "else",
        '  log "dynamo.vllm --help shows neither --disaggregation-mode nor --is-prefill-worker"',
        "  exit 2",
        "fi",
        'log "disaggregation flags: ${DISAGG_ARGS[*]:-(none)}"',
    ]


def _mgmt_prelude(ctx: RoleContext) -> list[str]:
    """The node's management address: the source of its route to etcd (not `hostname -I`, which may list
    RDMA interfaces first). ATOMDYN_MGMT_ADDR overrides it."""
    host = ctx.etcd_endpoint.split("://", 1)[-1].rsplit(":", 1)[0]
    return [
        f"ETCD_HOST_ADDR=$(getent ahostsv4 {shlex.quote(host)} | awk 'NR==1 {{print $1}}')",
        "ROUTE_SRC=$(ip -4 route get \"$ETCD_HOST_ADDR\" | sed -n 's/.* src \\([0-9.]*\\).*/\\1/p')",
        "MGMT_ADDR=${ATOMDYN_MGMT_ADDR:-$ROUTE_SRC}",
        'if [ -z "$MGMT_ADDR" ]; then',
        '  log "cannot determine the management address (no route to $ETCD_HOST_ADDR)"',
        "  exit 2",
        "fi",
        'log "management address $MGMT_ADDR"',
    ]


def _shim_prelude(ctx: RoleContext) -> list[str]:
    """The dma-buf registration helper's LD_PRELOAD path, as `dmabuf-shim env` reports it in the runtime."""
    tool = " ".join(shlex.quote(a) for a in ctx.runtime.tool(["dmabuf-shim", "env"]))
    lines = [f"SHIM_TOOL=({tool})"]
    if isinstance(ctx.runtime, VenvRuntime) and ctx.prepared_shim:
        prepared = shlex.quote(ctx.prepared_shim)
        python = shlex.quote(ctx.runtime.python)
        lines += [
            f"if [ -d {prepared} ]; then",
            f"  SHIM_TOOL=(env PYTHONPATH={prepared} {python} -m dmabuf_shim env)",
            f"  log 'dma-buf helper from the prepared install {ctx.prepared_shim}'",
            "fi",
        ]
    return [
        *lines,
        """if ! SHIM_LINE=$("${SHIM_TOOL[@]}" | grep -m1 'LD_PRELOAD='); then""",
        "  log 'dmabuf-shim env printed no LD_PRELOAD line: is dmabuf-shim installed?'",
        "  exit 2",
        "fi",
        "SHIM_PRELOAD=${SHIM_LINE#*LD_PRELOAD=}",
        "SHIM_PRELOAD=${SHIM_PRELOAD#export }",
        'SHIM_PRELOAD=${SHIM_PRELOAD//\\"/}',
        'log "preloading $SHIM_PRELOAD"',
    ]


def plan_vllm(ctx: RoleContext, atom: bool) -> RolePlan:
    model = ctx.model
    argv: list[Arg] = [ctx.runtime.python, "-m", "dynamo.vllm", "--model", ctx.model_path]
    argv += ["--served-model-name", model.served_model_name, Shell('"${DISAGG_ARGS[@]}"')]
    if ctx.mode != "agg":
        argv += ["--kv-transfer-config", KV_TRANSFER_CONFIG]
    argv += model.vllm_args()
    if atom:
        argv += list(model.atom_args)
    env: dict[str, Arg] = {
        "DYN_SYSTEM_PORT": str(ctx.ports.system),
        "VLLM_NIXL_SIDE_CHANNEL_HOST": Shell('"$MGMT_ADDR"'),
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(ctx.ports.nixl_side_channel),
    }
    prelude = _probe_disagg_prelude(ctx) + _mgmt_prelude(ctx)
    if isinstance(ctx.runtime, DockerRuntime):
        prelude += ctx.runtime.prelude()
    if atom:
        env.update(ATOM_UCX_ENV)
        env.update(model.atom_env)
        env["LD_PRELOAD"] = Shell('"$SHIM_PRELOAD"')
        prelude += _shim_prelude(ctx)
    else:
        env["ATOM_DISABLE_VLLM_PLUGIN"] = "1"
    processes = [_wrap(ctx, _worker_name(ctx.mode), argv, env)]
    if ctx.with_frontend:
        processes.insert(0, _frontend(ctx))
    return RolePlan(
        processes,
        prelude,
        dynamo_env(ctx),
        _worker_name(ctx.mode),
        model.gpus_per_worker,
        model.served_model_name,
    )


def plan_role(engine: str, ctx: RoleContext) -> RolePlan:
    if ctx.mode not in MODES:
        raise ProfileError(f"unknown role mode {ctx.mode!r}; known: {', '.join(MODES)}")
    if engine == "mocker":
        return plan_mocker(ctx)
    if engine == "vllm":
        return plan_vllm(ctx, atom=False)
    if engine == "atom":
        return plan_vllm(ctx, atom=True)
    raise ProfileError(f"unknown engine profile {engine!r}; known: {', '.join(ENGINES)}")


def platform_label(engine: str) -> str:
    return {
        "mocker": "rehearsal (CPU, mock engine)",
        "vllm": "NVIDIA GPU (vllm profile), not MI355X",
        "atom": "MI355X",
    }[engine]
