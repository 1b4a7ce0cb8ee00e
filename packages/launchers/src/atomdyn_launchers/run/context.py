"""What every stage of a run shares, built once after preflight and never changed: the configuration, the
options, the engine and model, the roles, the run directory, the etcd session and the leased ports. What the
run observes while it goes on lives in the :class:`~atomdyn_launchers.run.monitor.Monitor`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.contract.rundir import RunDir
from atomdyn_launchers.engines import Engine
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.profiles.models import ModelProfile
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.etcd_session import EtcdSession
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import RoleSpec
from atomdyn_launchers.run.submission import Submission
from atomdyn_launchers.slurm.client import Allocation, Slurm

# Callbacks for tests and tools: called with (event name, details) at each timeline event; the details'
# "run" is the run's Monitor (what the run has observed, and its context as .ctx).
Hook = Callable[[str, dict[str, object]], None]


class LaunchFailure(RuntimeError):
    """The run failed; the message says which role or step and why."""


def ready_timeout_s(options: LaunchOptions, engine: Engine) -> float:
    """How long the roles may take to become ready: the option, else the engine's."""
    return options.ready_timeout_s if options.ready_timeout_s is not None else engine.timeouts.ready_s


@dataclass(frozen=True)
class RunContext:
    """Everything the stages share."""

    config: ClusterConfig
    options: LaunchOptions
    engine: Engine
    model: ModelProfile
    roles: list[RoleSpec]
    slurm: Slurm
    progress: Progress
    hook: Hook | None
    rundir: RunDir
    etcd: EtcdSession
    # The run's leased ports per role (ports.allocate); empty: the fixed defaults (Ports.for_role).
    ports: Mapping[str, Ports] = field(default_factory=dict)
    # Set: the run is the cross-node NIXL probe (two one-shot jobs), not a serving run.
    probe: ProbeOptions | None = None
    # Set: the roles start as job steps of this allocation (options.allocation), checked in preflight.
    allocation: Allocation | None = None

    @property
    def ready_timeout_s(self) -> float:
        return ready_timeout_s(self.options, self.engine)

    @property
    def first_response_timeout_s(self) -> float | None:
        if self.options.first_response_timeout_s is not None:
            return self.options.first_response_timeout_s
        return self.engine.timeouts.first_response_s

    @property
    def settle_timeout_s(self) -> float:
        if self.options.settle_timeout_s is not None:
            return self.options.settle_timeout_s
        return self.engine.timeouts.settle_s

    @property
    def frontend_role(self) -> RoleSpec:
        return next(r for r in self.roles if r.with_frontend)

    def submission(self) -> Submission:
        return Submission(
            self.config,
            self.options,
            self.engine,
            self.model,
            self.rundir,
            self.etcd.endpoint,
            self.ready_timeout_s,
            self.ports,
            self.probe,
        )
