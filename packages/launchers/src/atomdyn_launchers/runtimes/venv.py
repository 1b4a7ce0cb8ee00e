"""``RUNTIME=venv``: a role's processes run with the venv's Python directly, on the node, with the job's
environment; no image."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from atomdyn_launchers.runtimes.base import RuntimeKind, RuntimeSpec, env_prefix
from atomdyn_launchers.runtimes.devices import DeviceAccess
from atomdyn_launchers.sbatch import Arg, ProcessSpec

if TYPE_CHECKING:
    from atomdyn_launchers.config.cluster import ClusterConfig


@dataclass(frozen=True)
class VenvRuntime(RuntimeKind):
    venv: Path
    name: ClassVar[str] = "venv"
    in_image: ClassVar[bool] = False
    node_images: ClassVar[bool] = False

    @classmethod
    def build(cls, config: ClusterConfig, spec: RuntimeSpec) -> VenvRuntime:
        return cls(spec.venv)

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def image(self) -> str:
        return ""  # no image: the venv's own packages

    def wrap(
        self,
        name: str,
        argv: Sequence[Arg],
        env: Mapping[str, Arg],
        devices: DeviceAccess,
        inherit: Sequence[str] = (),
    ) -> ProcessSpec:
        """``inherit``: variables the job script exports (secrets): a process started from it has them."""
        return ProcessSpec(name, list(argv), dict(env))

    def tool(
        self,
        argv: Sequence[str],
        env: Mapping[str, Arg] | None = None,
        devices: DeviceAccess | None = None,
        name: str | None = None,
    ) -> list[Arg]:
        """A short-lived command (a probe) from the venv; ``env`` is added in front of it. The node's devices
        are the process's own: ``devices`` and ``name`` change nothing."""
        command: list[Arg] = [str(self.venv / "bin" / argv[0]), *argv[1:]]
        if argv[0] == "python":
            command[0] = self.python
        return [*env_prefix(env), *command]

    def prelude(self, devices: DeviceAccess) -> list[str]:
        return []

    def image_prelude(self, images_dir: str, target: str, node_python: Sequence[str]) -> list[str]:
        return []  # no image to record: the run's lock is the checkout's
