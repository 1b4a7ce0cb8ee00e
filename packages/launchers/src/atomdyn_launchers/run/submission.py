"""What the submit stage renders: every job script and its sbatch options, from the run's inputs alone (no
live objects: the golden snapshots build one from a fixed config, and a dry run writes the same scripts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.config.etcd import etcd_access, worker_etcd_env
from atomdyn_launchers.contract.leases import ETCD_LOST_S, LEASE_TTL_S
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.contract.rundir import RunDir
from atomdyn_launchers.engines import Engine
from atomdyn_launchers.engines.base import KvProbe, MockTiming, ProbeOptions, RoleContext, RolePlan
from atomdyn_launchers.etcd.keys import launcher_key, probe_prefix, run_prefix
from atomdyn_launchers.nodes import jobs
from atomdyn_launchers.nodes.prepare import shim_current
from atomdyn_launchers.profiles.models import ModelProfile
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import RoleSpec, model_path
from atomdyn_launchers.run.ports import named_ports
from atomdyn_launchers.runtimes import Runtime, get_runtime, runtime_for
from atomdyn_launchers.runtimes.devices import RdmaMounts
from atomdyn_launchers.sbatch import Arg, JobSpec, Shell, pid_var, render
from atomdyn_launchers.slurm.client import Slurm
from atomdyn_launchers.slurm.steps import step_name

# Where the probe's sides write their reports in the run directory (<run dir>/nixl/<role>.json).
PROBE_DIR = "nixl"


@dataclass(frozen=True)
class Submission:
    """The inputs of every job script and command line of a run."""

    config: ClusterConfig
    options: LaunchOptions
    engine: Engine
    model: ModelProfile
    rundir: RunDir
    etcd_endpoint: str
    ready_timeout_s: float
    ports: Mapping[str, Ports] = field(default_factory=dict)  # per role; empty: Ports.for_role
    # Set: every role runs the cross-node NIXL probe in its worker's runtime instead of the engine.
    probe: ProbeOptions | None = None

    @property
    def etcd_prefix(self) -> str:
        return run_prefix(self.rundir.run_id)

    def kv_probe(self) -> KvProbe | None:
        """The probe's arguments, shaped like the model's KV cache (its profile's kv_shape)."""
        if self.probe is None:
            return None
        shape = self.model.kv_shape
        if shape is None:
            raise PreflightError(
                f"model profile {self.model.name!r} has no kv_shape: the NIXL probe moves blocks of the "
                "model's KV layout (layers, KV heads per rank, head size, block tokens, element bytes)"
            )
        probe = self.probe
        return KvProbe(
            key_prefix=probe_prefix(self.rundir.run_id),
            report_dir=str(self.rundir.path / PROBE_DIR),
            layers=shape.layers,
            kv_heads=shape.kv_heads,
            head_dim=shape.head_dim,
            block_tokens=shape.block_tokens,
            dtype_bytes=shape.dtype_bytes,
            options=probe,
        )

    def runtime(self) -> Runtime:
        config = self.config
        images: list[str] = []
        if get_runtime(config.runtime).in_image:
            images = self.engine.images(self.options.kind, config.dynamo_atom_image, config.nixl_image)
            if not images:
                raise PreflightError(f"RUNTIME={config.runtime} needs DYNAMO_ATOM_IMAGE")
        return runtime_for(
            config,
            image=images[0] if images else "",
            venv=self.engine.venv(config.python_venv, config.project_dir),
            container_prefix=f"atomdyn-{self.rundir.run_id}",
            mounts=sorted({str(config.shared_dir), str(config.model_path), str(config.project_dir)}),
            lock_memory=self.engine.vendor != "none",
        )

    def node_python(self) -> list[str]:
        """How a job runs this project's modules on the node, outside any container: where the runtime runs no
        image, the venv the jobs run from (preflight requires it), else as the node jobs do."""
        if not get_runtime(self.config.runtime).in_image:
            return [str(self.config.python_venv / "bin" / "python")]
        return jobs.node_python(self.config)

    def role_context(self, spec: RoleSpec, runtime: Runtime) -> RoleContext:
        run_id = self.rundir.run_id
        return RoleContext(
            run_id=run_id,
            role=spec.role,
            mode=spec.mode,
            with_frontend=spec.with_frontend,
            index=spec.index,
            model=self.model,
            model_path=str(model_path(self.config, self.model)),
            etcd_endpoint=self.etcd_endpoint,
            namespace=f"atomdyn-{run_id.lower()}",
            home_dir=str(self.rundir.home / spec.role),
            ports=self.ports[spec.role] if self.ports else Ports.for_role(spec.index),
            runtime=runtime,
            mock=MockTiming(
                self.options.speedup_ratio,
                self.options.kv_transfer_bandwidth_gbps,
                self.options.kv_bytes_per_token,
            ),
            router_mode=self.options.router_mode,
            prepared_shim=str(shim_current(self.config)),
            run_dir=str(self.rundir.path),
            cache_dir=str(self.config.shared_dir / "cache"),
            node_python=tuple(self.node_python()),
            etcd_env=worker_etcd_env(self.config),
            dynamo_lease_ttl_s=self.dynamo_lease_ttl_s(),
            ucx_net_devices=self.config.ucx_net_devices_for(spec.node),
            ucx_path=self.config.atom_ucx_path,
            ucx_wireup=self.config.atom_ucx_wireup,
            ucx_aux_netdev=self.config.atom_ucx_aux_netdev,
            ucx_gid_index=self.config.ucx_ib_gid_index,
            kv_cross_layer_blocks=self.config.kv_cross_layer_blocks == "yes",
            kv_probe=self.kv_probe(),
            rdma=RdmaMounts(
                str(self.config.rdma_verbs_config_dir),
                tuple(str(p) for p in self.config.rdma_provider_libs),
            ),
        )

    def dynamo_lease_ttl_s(self) -> int:
        """Dynamo's lease for an engine with a longer etcd grace (as the helpers' leases); 0: Dynamo's default."""
        timeouts = self.engine.timeouts
        return timeouts.lease_s if timeouts.lease_s != LEASE_TTL_S else 0

    def register_command(self, spec: RoleSpec, plan: RolePlan, ports: Ports) -> list[Arg]:
        """The registration helper: runs on the node, outside any container, after every process started."""
        args: list[Arg] = [*self.node_python(), "-m", "atomdyn_launchers.job.readiness", "register"]
        access = etcd_access(self.config, None if self.config.etcd_endpoints else self.etcd_endpoint)
        args += [*access.cli_args(), "--key", self.etcd_prefix + spec.role, "--role", spec.role]
        args += ["--job-id", Shell('"${SLURM_JOB_ID:-}"'), "--timeout", f"{self.ready_timeout_s:.0f}"]
        args += ["--launcher-key", launcher_key(self.rundir.run_id)]
        timeouts = self.engine.timeouts
        if timeouts.etcd_grace_s != ETCD_LOST_S:
            args += ["--etcd-lost-s", f"{timeouts.etcd_grace_s:g}"]
        if timeouts.lease_s != LEASE_TTL_S:  # outlives the grace (Timeouts.lease_s)
            args += ["--ttl", str(timeouts.lease_s)]
        for proc in plan.processes:
            args += ["--pid", Shell(f'{proc.name}="${pid_var(proc.name)}"')]
        if spec.with_frontend:
            args += [
                "--port",
                f"frontend={ports.http}",
                "--frontend-health",
                f"http://127.0.0.1:{ports.http}/health",
            ]
        args += [
            "--port",
            f"{plan.worker_process}={ports.system}",
            "--worker-health",
            f"http://127.0.0.1:{ports.system}/health",
        ]
        return args

    def gres_gpus(self, plan: RolePlan) -> int:
        """GPUs asked of Slurm (--gres) for a role: only when SLURM_GPU_GRES=yes."""
        return plan.gpus if self.config.slurm_gpu_gres else 0

    def role(self, spec: RoleSpec, runtime: Runtime) -> tuple[RolePlan, JobSpec]:
        """One role's plan and job."""
        role_ctx = self.role_context(spec, runtime)
        plan = self.engine.plan(role_ctx)
        job = JobSpec(
            role=spec.role,
            job_name=f"atomdyn-{spec.role}",
            node=spec.node,
            account=self.config.slurm_account,
            partition=self.config.slurm_partition,
            qos=self.config.slurm_qos,
            output=str(self.rundir.slurm_out(spec.role)),
            log_dir=str(self.rundir.path / "logs"),
            processes=plan.processes,
            env=plan.env,
            prelude=plan.prelude,
            gpus=self.gres_gpus(plan),
            time_limit=self.options.time_limit or self.engine.timeouts.time_limit,
            register=None if self.probe is not None else self.register_command(spec, plan, role_ctx.ports),
            one_shot=self.probe is not None,
            # The probe binds no port of the lease (UCX's TCP listeners take ephemeral ones).
            ports={}
            if self.probe is not None
            else named_ports(role_ctx.ports, plan.listens, with_frontend=spec.with_frontend),
            header_comment=(
                f"atomdyn run {self.rundir.run_id}: role {spec.role} ({spec.mode}) on {spec.node}, "
                f"engine {self.engine.name}, runtime {self.config.runtime}. Generated; do not edit."
            ),
        )
        return plan, job


@dataclass(frozen=True)
class RoleJob:
    """One role's rendered job: its plan, its script in the run directory and the options sbatch gets."""

    spec: RoleSpec
    plan: RolePlan
    job: JobSpec
    script: Path
    output: Path

    @property
    def gres(self) -> str | None:
        return f"gpu:{self.job.gpus}" if self.job.gpus else None


def write_jobs(submission: Submission, roles: Sequence[RoleSpec]) -> list[RoleJob]:
    """Render every role's job and write its script into the run directory (the submit stage and a dry run)."""
    runtime = submission.runtime()
    rundir = submission.rundir
    out: list[RoleJob] = []
    for spec in roles:
        plan, job = submission.role(spec, runtime)
        script = rundir.write_script(spec.role, render(job))
        out.append(RoleJob(spec, plan, job, script, rundir.slurm_out(spec.role)))
    return out


def step_command(slurm: Slurm, role_job: RoleJob, allocation: int, chdir: Path, run_id: str) -> list[str]:
    """The srun command line that starts ``role_job`` as a step of ``allocation`` on its node: ``srun ... bash
    SCRIPT`` (bash named, so a shared filesystem mounted noexec does not matter), its output where sbatch's
    ``--output`` would put it, named ``<job name>@<run id>`` (:func:`role_step_name`)."""
    args = slurm.srun_args(
        allocation=allocation,
        nodelist=role_job.spec.node,
        job_name=role_step_name(role_job, run_id),
        gres=role_job.gres,
        output=role_job.output,
        chdir=chdir,
    )
    return [*args, "bash", str(role_job.script)]


def role_step_name(role_job: RoleJob, run_id: str) -> str:
    """A role's step's name: its batch job's and the run's id (a dead launcher's steps are found by it)."""
    return step_name(role_job.job.job_name, run_id)
