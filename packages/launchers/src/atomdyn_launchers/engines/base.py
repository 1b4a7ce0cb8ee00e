"""What every engine object provides, and the pieces all engines share (ports, Dynamo's environment, the
frontend, the job-side probes).

An engine object owns everything that differs between engines: its command lines, vendor, the platform label
(derived from what the node reports), the images it needs per run kind, its node checks, its environment, its
timeouts and which evidence gates apply. The launchers know roles and stages, not engines.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.contract.leases import lease_ttl_for
from atomdyn_launchers.contract.node_needs import NodeNeeds
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines.hardware import ModelClaim, WorkerProbe, corroborate, is_unknown
from atomdyn_launchers.engines.hardware import hardware_label as hardware_label
from atomdyn_launchers.profiles.models import DEFAULT_MODEL, ModelProfile, ProfileError
from atomdyn_launchers.runtimes.base import Runtime, quoted
from atomdyn_launchers.runtimes.devices import NO_DEVICES, DeviceAccess, RdmaMounts
from atomdyn_launchers.sbatch import Arg, ProcessSpec, Shell

MODES = ("agg", "prefill", "decode")


class EngineError(ProfileError):
    """An engine name, or what an engine needs from the configuration, is invalid; the message names it."""


@dataclass(frozen=True)
class Timeouts:
    """How long a run of this engine may take to become ready, to stop, and in all (Slurm's --time)."""

    ready_s: float
    settle_s: float
    time_limit: str
    # How long the roles' registration helpers and the launcher tolerate etcd not answering before they fail
    # the run (the leases outlive that). Raised for engines whose load can stall a small machine for seconds.
    etcd_grace_s: float = 5.0
    # The TTL of the run's etcd leases (the helpers', the launcher's, Dynamo's own); None: just past the grace.
    # A lease outlives a frozen machine only if its TTL is longer than the freeze: etcd expires it by its own
    # clock, which jumps when the machine resumes.
    etcd_lease_s: int | None = None
    # The first-response budget: how long after the frontend lists every worker the first verified response
    # may take (None: only the readiness budget). A pair that is healthy but cannot serve (KV that cannot
    # reach the prefill, a wrong side-channel address) fails within it instead of waiting out the rest of
    # ready_s. GPU engines may compile kernels on their first request, so theirs is generous.
    first_response_s: float | None = None

    @property
    def lease_s(self) -> int:
        return self.etcd_lease_s if self.etcd_lease_s is not None else lease_ttl_for(self.etcd_grace_s)


@dataclass(frozen=True)
class MockTiming:
    """The mock engine's timing model, as a run asks for it (an engine that takes it says so: ``mock_timing``)."""

    speedup_ratio: float = 10.0
    # The KV transfer model of the P/D workers (Dynamo's --kv-transfer-bandwidth, --kv-bytes-per-token).
    kv_transfer_bandwidth_gbps: float | None = None
    kv_bytes_per_token: int | None = None


@dataclass(frozen=True)
class ProbeOptions:
    """What the cross-node NIXL probe moves and how long each side waits for the other (``nixl.cross_node``)."""

    blocks: int = 64  # KV blocks in each side's cache
    transfer_blocks: tuple[int, ...] = (1, 4, 16)  # blocks per READ, one series each
    iterations: int = 20  # timed READs per series
    large_mib: int = 64  # the large transfer
    timeout_s: float = 120.0  # each side's wait for the other, and for one READ

    def __post_init__(self) -> None:
        if self.blocks < 1 or self.iterations < 1 or self.large_mib < 1 or not self.timeout_s > 0:
            raise ValueError("the probe's blocks, iterations, large MiB and timeout must be positive")
        if not self.transfer_blocks or not all(1 <= n <= self.blocks for n in self.transfer_blocks):
            raise ValueError(f"blocks per READ {self.transfer_blocks} must lie in 1..{self.blocks}")


@dataclass(frozen=True)
class KvProbe:
    """The cross-node NIXL probe a role runs in place of its engine (``python -m nixl_compat.crossnode``): the
    prefill role is the target that owns the KV buffers, the decode role the initiator that READs them, each in
    the worker's runtime with the worker's P/D environment, exchanging NIXL metadata through the run's etcd.
    What it moves is the run's ProbeOptions, shaped like the model's KV cache."""

    key_prefix: str  # the pair's etcd keys
    report_dir: str  # each side writes <report_dir>/<role>.json
    layers: int
    kv_heads: int
    head_dim: int
    block_tokens: int
    dtype_bytes: int
    options: ProbeOptions = ProbeOptions()

    def argv(self, python: str, side: str, role: str, device: str) -> list[Arg]:
        args: list[Arg] = [python, "-m", "nixl_compat.crossnode", "--role", side]
        args += [
            "--key-prefix",
            self.key_prefix,
            "--layers",
            str(self.layers),
            "--kv-heads",
            str(self.kv_heads),
        ]
        args += ["--head-dim", str(self.head_dim), "--block-tokens", str(self.block_tokens)]
        options = self.options
        args += ["--dtype-bytes", str(self.dtype_bytes), "--blocks", str(options.blocks)]
        args += ["--transfer-blocks", ",".join(str(n) for n in options.transfer_blocks)]
        args += ["--iterations", str(options.iterations), "--large-mib", str(options.large_mib)]
        args += ["--device", device, "--timeout", f"{options.timeout_s:g}"]
        return [*args, "--json", f"{self.report_dir}/{role}.json"]


@dataclass(frozen=True)
class RoleContext:
    """Everything an engine needs to start one role; built by the launcher from the cluster config."""

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
    mock: MockTiming = field(default_factory=MockTiming)
    router_mode: str = "kv"
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # etcd's TLS files or user for Dynamo, as shell text (readiness.worker_etcd_env): read on the node.
    etcd_env: Mapping[str, str] = field(default_factory=dict)
    # The helper `nodes.prepare` installed on the shared filesystem; the venv runtime prefers it when present.
    prepared_shim: str = ""
    # Where the job writes its per-role files (doctor/, fingerprints/, rdma/, images/): the run directory.
    run_dir: str = ""
    # A directory on the shared filesystem that outlives the run (compile caches); "" when there is none.
    cache_dir: str = ""
    # How a job runs this project's modules on the node itself (outside any container).
    node_python: tuple[str, ...] = ("python3",)
    # UCX_NET_DEVICES for this role's node (from the config's per-node map); None: not configured.
    ucx_net_devices: str | None = None
    # Which UCX path the atom engine takes: "host-vram" (validated) or "rocm" (ROCm transports).
    ucx_path: str = "host-vram"
    # The atom engine's UCX wireup auxiliary: "tcp" (tcp:aux, connection messages only) or "ud" (ud_verbs).
    ucx_wireup: str = "tcp"
    # With the tcp wireup, the netdev that joins UCX_NET_DEVICES for tcp:aux: "roce" (the one under each RDMA
    # port, read on the node) or a netdev name (ATOM_UCX_AUX_NETDEV).
    ucx_aux_netdev: str = "roce"
    # UCX_IB_GID_INDEX on the RDMA path: an index ("1") the RDMA check verifies, or "auto" (UCX picks).
    ucx_gid_index: str = "1"
    rdma: RdmaMounts = field(default_factory=RdmaMounts)
    # Dynamo's own etcd lease (ETCD_LEASE_TTL, seconds) for the engine's etcd grace; 0: Dynamo's default (10 s).
    dynamo_lease_ttl_s: int = 0
    # vLLM's cross-layer KV layout for the NixlConnector (KV_CROSS_LAYER_BLOCKS=yes).
    kv_cross_layer_blocks: bool = False
    # Set: the role runs the cross-node NIXL probe with its worker's environment instead of the engine.
    kv_probe: KvProbe | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise EngineError(f"unknown role mode {self.mode!r}; known: {', '.join(MODES)}")


@dataclass(frozen=True)
class RolePlan:
    """The processes of a role, the shell prelude they need, and what the registration helper checks."""

    processes: list[ProcessSpec]
    prelude: list[str]
    env: dict[str, Arg]
    worker_process: str
    gpus: int
    served_model_name: str
    # The ports (fields of Ports) the worker binds, which the job checks free before anything starts; the
    # frontend's is added where the role runs it.
    listens: tuple[str, ...] = ("system",)


def worker_name(mode: str) -> str:
    return {"agg": "worker", "prefill": "prefill", "decode": "decode"}[mode]


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def dynamo_env(ctx: RoleContext) -> dict[str, Arg]:
    """Discovery through etcd, TCP request plane, ZMQ events: no NATS (Dynamo 1.3 on the rehearsal and GPUs)."""
    env: dict[str, Arg] = {
        "DYN_DISCOVERY_BACKEND": "etcd",
        "ETCD_ENDPOINTS": ctx.etcd_endpoint,
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_EVENT_PLANE": "zmq",
        "DYN_NAMESPACE": ctx.namespace,
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    # Dynamo's own HTTP (the frontend fetching model metadata from workers) honours http_proxy, which a job
    # inherits from the submit host; its peers are cluster addresses, never behind a proxy. Dynamo 1.3
    # ignores NO_PROXY=*, so the proxy variables are emptied (an empty one counts as unset).
    env.update(dict.fromkeys(PROXY_VARIABLES, ""))
    if ctx.dynamo_lease_ttl_s:
        # Dynamo renews its lease at half the time left; a node stalled past the TTL loses the lease and the
        # worker shuts itself down (the frontend then answers 503). Workers and frontend alike read this.
        env["ETCD_LEASE_TTL"] = str(ctx.dynamo_lease_ttl_s)
    env.update({name: Shell(value) for name, value in ctx.etcd_env.items()})
    env.update(ctx.extra_env)
    return env


def wrap(
    ctx: RoleContext, name: str, argv: list[Arg], env: Mapping[str, Arg], devices: DeviceAccess
) -> ProcessSpec:
    if ctx.runtime.in_image:
        env = {**dynamo_env(ctx), **env}  # the job's exports do not reach into a container
    # etcd's key and password: exported by the job script, passed by name, never on a command line.
    return ctx.runtime.wrap(name, argv, env, devices, inherit=sorted(ctx.etcd_env))


def frontend(ctx: RoleContext) -> ProcessSpec:
    argv: list[Arg] = [ctx.runtime.python, "-m", "dynamo.frontend", "--namespace", ctx.namespace]
    argv += ["--http-host", "0.0.0.0", "--http-port", str(ctx.ports.http), "--router-mode", ctx.router_mode]
    # The frontend caches model cards under ~/.cache/dynamo: a per-run HOME keeps runs from seeing stale ones.
    env: dict[str, Arg] = {"HOME": f"{ctx.home_dir}/frontend"}
    return wrap(ctx, "frontend", argv, env, NO_DEVICES)


def run_path(ctx: RoleContext, sub: str) -> str:
    """A per-role file in the run directory (the job writes it; the evidence reads it)."""
    if not ctx.run_dir:
        raise EngineError(f"role {ctx.role}: no run directory to write {sub}/ into")
    return f"{ctx.run_dir}/{sub}/{ctx.role}"


def fingerprint_prelude(ctx: RoleContext) -> list[str]:
    """The node's fingerprint (GPU, ROCm/CUDA, NIC, driver), written from inside the job before the engine
    starts, to <run dir>/fingerprints/<role>.json. A failed probe is recorded, never fatal."""
    target = run_path(ctx, "fingerprints") + ".json"
    image = ctx.runtime.image
    env = f"ATOMDYN_IMAGE={shlex.quote(image)} " if image else ""
    return [
        "# This node as the evidence will describe it (written before the engine starts).",
        f"mkdir -p {shlex.quote(ctx.run_dir + '/fingerprints')}",
        f"if {env}{quoted(list(ctx.node_python))} -m atomdyn_core.fingerprint >{shlex.quote(target + '.tmp')}; then",
        f"  mv -f {shlex.quote(target + '.tmp')} {shlex.quote(target)}",
        "else",
        f"  log 'fingerprint failed: the run records no fingerprint for {ctx.role}'",
        "fi",
    ]


def image_prelude(ctx: RoleContext) -> list[str]:
    """What the workers run, as their runtime records it to <run dir>/images/<role>.json before they start
    (``Runtime.image_prelude``: the image with the lock digest it carries, which the run records rather than
    the checkout's); nothing where the runtime runs no image."""
    if not ctx.runtime.in_image:
        return []
    return ctx.runtime.image_prelude(
        ctx.run_dir + "/images", run_path(ctx, "images") + ".json", ctx.node_python
    )


def record_preludes(ctx: RoleContext) -> list[str]:
    """What every role records before its engine starts: the node's fingerprint, the image's lock digest."""
    return fingerprint_prelude(ctx) + image_prelude(ctx)


class Engine(ABC):
    """One engine profile. Subclasses set the class attributes and implement :meth:`plan`."""

    name: str
    vendor: str  # "amd" | "nvidia" | "none": whose GPUs the engine drives
    dynamo_module: str  # the Dynamo entry point its workers run (dynamo.<module>)
    timeouts: Timeouts
    # Which evidence gates apply to a run of this engine (the evidence code reads it).
    expectations: GateExpectations
    description: str = ""
    # Whether KV_CROSS_LAYER_BLOCKS=yes can take effect with this engine's vLLM, and why not where it cannot.
    cross_layer_blocks: bool = True
    cross_layer_blocks_why: str = ""
    # The model profile a run uses unless one is named.
    default_model: str = DEFAULT_MODEL
    # The vLLM platform its workers log choosing ("cuda", "rocm", "cpu": engines/hardware.py reads the lines),
    # which a hardware label needs to agree with; None where they log none (no vLLM: no hardware label).
    logged_platform: str | None = None
    # Whether the engine runs the mock timing model (RoleContext.mock): its values are then the run's to record.
    mock_timing: bool = False
    # The engine whose P/D workers' runtime and environment the cross-node NIXL probe takes (RoleContext.kv_probe):
    # None, this one; an engine that moves no KV over NIXL (the mock engine) names the one its rehearsal stands for.
    kv_probe_engine: str | None = None
    # Whether the cross-node NIXL probe (the ladder's nixl rung) stands for this engine's KV path; an engine whose
    # KV moves otherwise (the sglang engine's MORI) answers the rung "not needed", saying how its KV moves.
    nixl_probe: bool = True
    # Whether the ladder's validate rung also runs mori-repro (the dma-buf offset reproducer) in the image on each
    # worker node: engines whose KV moves over MORI, which registers sub-allocated GPU memory through dma-buf.
    mori_repro: bool = False

    def run_expectations(self, config: Mapping[str, str]) -> GateExpectations:
        """What the evidence of a run recorded with ``config`` (run.json's) must show; by default the engine's."""
        return self.expectations

    @abstractmethod
    def plan(self, ctx: RoleContext) -> RolePlan:
        """The processes, prelude and environment of one role."""

    def images(self, kind: str | None, base_image: str | None, nixl_image: str | None) -> list[str]:
        """The images a run of ``kind`` needs in the docker runtime (first: what the workers run); for no kind
        (a standalone node check), every configured image."""
        if kind is None:
            return [i for i in (base_image, nixl_image) if i]
        image = nixl_image if kind == "disagg" and nixl_image else base_image
        return [image] if image else []

    def node_needs(self, kind: str | None) -> NodeNeeds:
        """What ``nodes.check`` requires of a node for a run of ``kind`` (None: any run of this engine)."""
        return NodeNeeds()

    def launch_problems(
        self, kind: str, nodes: Sequence[str], net_devices: Callable[[str], str | None]
    ) -> list[str]:
        """What in the configuration keeps a run of ``kind`` on ``nodes`` from starting (preflight)."""
        return []

    def venv(self, python_venv: Path, project_dir: Path) -> Path:
        """The environment the workers run from in the venv runtime (default: PYTHON_VENV)."""
        return python_venv

    def needs_gpus(self) -> bool:
        return self.vendor != "none"

    def container_devices(self, rdma: RdmaMounts | None = None) -> DeviceAccess:
        """What a worker's container gets (the frontend gets none); also used by the in-image validator."""
        return NO_DEVICES

    def platform_label(self, fingerprint: Mapping[str, Any] | None) -> str:
        """The platform the evidence names, from what the node reported (never from the engine's name)."""
        return hardware_label(fingerprint)

    def platform_of(
        self,
        fingerprints: Mapping[str, Mapping[str, Any]],
        workers: Mapping[str, WorkerProbe] | None = None,
        model: ModelClaim | None = None,
    ) -> str:
        """The platform the jobs' fingerprints (role -> fingerprint) show where each role's worker log
        (``workers``: role -> what its logs said, engines/hardware.py) agrees: the vLLM platform it logged and the
        model it loaded (``model``: the run's profile). Roles on different hardware are all named; one role's
        probes disagreeing or absent makes the run's platform unknown. ``workers`` None: no engine ran in the jobs
        (a NIXL probe run), the fingerprints alone are read."""
        if not fingerprints:
            return self.platform_label(None)
        labels = []
        for role in sorted(fingerprints):
            label = self.platform_label(fingerprints[role])
            hardware = not label.startswith("rehearsal")
            if workers is not None:
                label = corroborate(label, role, self.logged_platform, workers.get(role), model, hardware)
            labels.append(label)
        labels = list(dict.fromkeys(labels))
        unknown = [label for label in labels if is_unknown(label)]
        if unknown and len(labels) > 1:  # one role's probes disagreeing makes the run's platform unknown
            return unknown[0]
        return "; ".join(labels)
