"""``nodes.check``: the per-node preflight, run on each node by a small Slurm job, reported as a table and JSON.

Every check answers ``pass``, ``fail`` or ``not needed`` (for this engine profile and runtime), with a detail;
free GPU memory answers ``unknown`` where no tool can tell. What a node must have comes from the engine object
(``Engine.node_needs``: GPU device paths, whether RDMA is required, optional or not needed, the helper check);
the mocker in a venv needs no GPU, RDMA, Docker or image checks and says so. What is checked on the node:

- devices: the engine's GPU device paths (/dev/kfd and /dev/dri for atom, the NVIDIA control device for vllm),
  /dev/infiniband where the engine needs RDMA;
- rdma: RDMA devices with an ACTIVE port and their RoCE v2 GIDs (read from /sys/class/infiniband);
- advertise: the management address (source of the route to etcd, what the NIXL side channel gets) is not on
  an RDMA interface, and the node's hostname resolves to it (what Dynamo advertises);
- docker and image: the runtime's image store (:mod:`atomdyn_launchers.job.stores`) answers for itself and each
  image: the node's daemon or podman storage holds it, with the archive manifest's id when ``nodes.prepare``
  recorded one; a squashfs store: ``srun --help`` lists ``--container-image`` (pyxis is installed) and each
  image's squashfs in SHARED_DIR/images matches its import record;
- shared-dir: a token written by the submit host reads back identical at the same path;
- model-path: MODEL_PATH is readable; gpu-memory: free memory per GPU from amd-smi/rocm-smi/nvidia-smi;
- dmabuf-shim: ``dmabuf-shim env --check`` (atom) where the workers load it;
- ucx: UCX's own ``ucx_info -v -c -p -e -u t -P inter`` in the workers' runtime with the P/D workers' UCX
  variables for the node (from the engine's plan of a decode role there): a UCP context and an endpoint to a
  peer on another node, judged by :mod:`atomdyn_launchers.job.ucx_check` (a transport of UCX_TLS left with no
  device by UCX_NET_DEVICES, the auxiliary one included; an RDMA device or port UCX does not have; the ROCm
  memory domain's error line; a GID index with no RoCE v2 GID), each failure naming the variable to change;
- boot-config: whether the host has ``/boot/config-$(uname -r)``, the only place UCX reads ROCm dma-buf
  support from (the ATOM_UCX_PATH=rocm workers get it mounted).

The node-side half is :mod:`atomdyn_launchers.job.node_check` (``python -m atomdyn_launchers.job.node_check
--spec ... --node ...``), run by the check jobs (inside an allocation, by job steps of it: nodes/jobs.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json, atomic_write_text
from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines import EngineError, get_engine
from atomdyn_launchers.engines.base import Engine, RoleContext
from atomdyn_launchers.job import images, node_check
from atomdyn_launchers.job.node_check import FAIL, UNKNOWN, Check
from atomdyn_launchers.nodes import jobs
from atomdyn_launchers.nodes.prepare import archive_dir
from atomdyn_launchers.profiles.models import ProfileError, get_model
from atomdyn_launchers.runtimes import get_runtime
from atomdyn_launchers.runtimes.devices import RdmaMounts
from atomdyn_launchers.runtimes.venv import VenvRuntime
from atomdyn_launchers.sbatch import Shell
from atomdyn_launchers.slurm.client import Slurm

CHECK_TIMEOUT_S = 300.0
# A check job that cannot start (the node is busy with another job) is not waited for: its checks are
# reported "unknown" and the run goes on to queue behind that job like any other would.
PENDING_GRACE_S = 15.0


@dataclass
class CheckReport:
    engine: str
    runtime: str
    nodes: dict[str, list[Check]]
    errors: dict[str, str] = field(default_factory=dict)  # node -> why no result came back
    work_dir: Path | None = None  # where the check's spec, outputs and report.json are

    @property
    def ok(self) -> bool:
        return not self.failures()

    def failures(self) -> list[tuple[str, str, str]]:
        """(node, check, detail) of every failed check, plus nodes whose check job gave no result."""
        found = [(n, "job", e) for n, e in sorted(self.errors.items())]
        for node, checks in sorted(self.nodes.items()):
            found += [(node, c.name, c.detail) for c in checks if c.status == FAIL]
        return found

    def require_ok(self) -> None:
        failures = self.failures()
        if failures:
            lines = [f"node {n}: check {c} failed: {d}" for n, c, d in failures]
            raise PreflightError("node check failed (nothing was submitted):\n  " + "\n  ".join(lines))

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "runtime": self.runtime,
            "ok": self.ok,
            "nodes": {n: [c.to_json() for c in cs] for n, cs in sorted(self.nodes.items())},
            "errors": self.errors,
        }

    def table(self) -> str:
        rows = [("node", "check", "status", "detail")]
        for node, checks in sorted(self.nodes.items()):
            rows += [
                (node, c.name, c.status.upper() if c.status == FAIL else c.status, c.detail) for c in checks
            ]
        rows += [(n, "job", "FAIL", e.replace("\n", " | ")) for n, e in sorted(self.errors.items())]
        width = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = ["  ".join([*(r[i].ljust(width[i]) for i in range(3)), r[3]]).rstrip() for r in rows]
        verdict = "all needed checks pass" if self.ok else f"{len(self.failures())} failed"
        return "\n".join([f"nodes.check ({self.engine}, {self.runtime}): {verdict}", *lines])


def run_images(config: ClusterConfig, kind: str | None, engine: str | None = None) -> list[str]:
    """The images a run of ``kind`` uses in the container runtimes (as the engine picks them)."""
    if not get_runtime(config.runtime).in_image:
        return []
    chosen = get_engine(engine or config.engine_profile)
    try:
        return chosen.images(kind, config.dynamo_atom_image, config.nixl_image)
    except EngineError as exc:
        raise PreflightError(str(exc)) from None


def check_nodes(
    config: ClusterConfig,
    nodes: Sequence[str],
    *,
    engine: str | None = None,
    image_tags: Sequence[str] | None = None,
    kind: str | None = None,
    slurm: Slurm | None = None,
    timeout_s: float = CHECK_TIMEOUT_S,
    pending_grace_s: float = PENDING_GRACE_S,
    allocation: int | None = None,
    rows: Sequence[str] | None = None,
) -> CheckReport:
    """Run the node-side checks on every node (one job each, in parallel) and collect the report.
    ``allocation``: each node's check is a job step of that allocation instead of a batch job (a run inside
    an allocation), its output in the same place. ``rows``: only these checks (the NIXL rung runs ``ucx``)."""
    engine = engine or config.engine_profile
    needs = get_engine(engine).node_needs(kind)
    tags = list(image_tags) if image_tags is not None else run_images(config, kind, engine)
    work = jobs.work_dir(config, "check")
    token = secrets.token_hex(16)
    atomic_write_text(work / "shared-token", token)
    recorded = images.recorded_ids(archive_dir(config), tags)
    probe = _probe_target(config, nodes)
    spec = {
        "engine": engine,
        "needs": needs.to_json(),
        # What worker containers mount to see the NICs (atom): it must exist on the node to be mounted.
        "rdma_mounts": [str(p) for p in config.rdma_provider_libs],
        "runtime": config.runtime,  # named in messages; what the checks ask of it is runtime_facts
        "runtime_facts": get_runtime(config.runtime).node_facts(),
        "images": {t: recorded.get(t) for t in tags},
        # Where a shared image store's files are (nodes.prepare imports them there).
        "images_dir": str(archive_dir(config)),
        "token_path": str(work / "shared-token"),
        "shared_dir": str(config.shared_dir),
        "token": token,
        "model_path": str(config.model_path),
        "probe_target": probe,
        "python_venv": str(config.python_venv),
        # The image the workers that load the helper run: P/D's (the overlay) when the check covers P/D.
        "shim_image": _shim_image(config, kind, tags),
        # The venv the workers run from (RUNTIME=venv): the ucx row runs its ucx_info, else the node's.
        "worker_venv": str(get_engine(engine).venv(config.python_venv, config.project_dir)),
        "ucx": worker_ucx(config, get_engine(engine), nodes, kind),
        "rows": list(rows) if rows is not None else None,
    }
    spec_path = work / "spec.json"
    atomic_write_json(spec_path, spec)
    runs = jobs.submit_and_wait(
        config,
        list(nodes),
        work=work,
        label="check",
        module=node_check.MODULE,
        args_for=lambda node, out: [
            "--spec",
            str(spec_path),
            "--node",
            node,
            "--docker-host",
            jobs.docker_host(config, node),
            "--out",
            str(out),
        ],
        timeout_s=timeout_s,
        slurm=slurm,
        pending_grace_s=pending_grace_s,
        allocation=allocation,
    )
    report = CheckReport(engine, config.runtime, {}, work_dir=work)
    for node, run in runs.items():
        if run.pending:
            report.nodes[node] = [Check("job", UNKNOWN, f"checks not run: {run.pending}")]
            continue
        if run.unavailable:
            report.nodes[node] = [
                Check("job", FAIL, f"checks not run: {run.unavailable}; {jobs.NODE_UNAVAILABLE_FIX}")
            ]
            continue
        if run.result is None:
            report.errors[node] = f"{run.label} ended {run.state} without a result: {run.output_tail}"
            continue
        report.nodes[node] = [Check(**c) for c in run.result["checks"]]
    atomic_write_json(work / "report.json", report.to_json())
    return report


def _shim_image(config: ClusterConfig, kind: str | None, tags: Sequence[str]) -> str | None:
    if not get_runtime(config.runtime).in_image or not tags:
        return None
    if kind is None and config.nixl_image:
        return config.nixl_image
    return tags[0]


def _probe_target(config: ClusterConfig, nodes: Sequence[str]) -> str:
    """Where the management route must lead: etcd's host, else a peer node (nodes reach each other)."""
    if config.etcd_endpoint:
        return config.etcd_endpoint.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")
    peers = [n for n in (config.prefill_node, config.decode_node, config.primary_node) if n not in nodes[:1]]
    return config.node_address(peers[0]) if peers else config.node_address(nodes[0])


def worker_ucx(
    config: ClusterConfig, engine: Engine, nodes: Sequence[str], kind: str | None
) -> dict[str, Any] | None:
    """The P/D workers' UCX variables per node, as the engine plans a decode worker there (its process's own
    environment: the variables a run's job gives it), for the ``ucx`` row; None when no P/D worker of the
    engine moves KV through UCX (the mock engine, aggregated runs). A variable the job computes on the node
    (shell text, e.g. UCX_NET_DEVICES with the netdev under the RoCE port for tcp:aux) is sent as that text and
    expanded on the node (job/node_check.py)."""
    if kind == "agg":
        return None
    env: dict[str, dict[str, str]] = {}
    shell: dict[str, dict[str, str]] = {}  # variables the job computes on the node: their shell text
    for node in nodes:
        try:
            plan = engine.plan(_decode_context(config, engine, node))
        except (EngineError, ProfileError) as exc:
            raise PreflightError(f"{engine.name}'s P/D worker on {node} cannot be planned: {exc}") from None
        worker = next((p for p in plan.processes if p.name == plan.worker_process), None)
        ucx = {k: v for k, v in (worker.env if worker else {}).items() if k.startswith("UCX_")}
        if not ucx:
            return None
        env[node] = {k: v for k, v in ucx.items() if not isinstance(v, Shell)}
        shell[node] = {k: v.text for k, v in ucx.items() if isinstance(v, Shell)}
    return {"env": env, "shell": shell}


def _decode_context(config: ClusterConfig, engine: Engine, node: str) -> RoleContext:
    """A decode role of ``engine`` on ``node`` with the config's UCX settings (what a P/D run gives it)."""
    return RoleContext(
        run_id="nodes-check",
        role="decode-0",
        mode="decode",
        with_frontend=False,
        index=1,
        model=get_model(engine.default_model),
        model_path=str(config.model_path),
        etcd_endpoint=config.etcd_endpoint or "http://127.0.0.1:2379",
        namespace="atomdyn-nodes-check",
        home_dir=str(config.shared_dir),
        run_dir=str(config.shared_dir / "nodes" / "plan"),  # the plan is read, never written or run
        ports=Ports.for_role(1),
        runtime=VenvRuntime(engine.venv(config.python_venv, config.project_dir)),
        ucx_net_devices=config.ucx_net_devices_for(node),
        ucx_path=config.atom_ucx_path,
        ucx_wireup=config.atom_ucx_wireup,
        ucx_aux_netdev=config.atom_ucx_aux_netdev,
        ucx_gid_index=config.ucx_ib_gid_index,
        rdma=RdmaMounts(str(config.rdma_verbs_config_dir), tuple(str(p) for p in config.rdma_provider_libs)),
    )
