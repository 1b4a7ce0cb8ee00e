"""The ``dynamo.vllm`` worker command lines a run would write, per worker mode, for the in-image validator.

``invoke validate.gpu`` (and the ladder's validate rung) hands them to ``atomdyn-validate --worker-args``, which
puts each through Dynamo's own ``parse_args`` inside the image on the node: a flag the image's Dynamo or vLLM
refuses fails validation, not the run's first minutes. They come from the submit stage's own planning
(:meth:`Submission.role`, as :func:`write_jobs` renders the job scripts), so they are the arguments the golden
snapshots show after ``-m dynamo.vllm``; only the leased port numbers of a real run differ.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.rundir import RunDir
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.run.context import ready_timeout_s
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import RoleSpec, plan_roles
from atomdyn_launchers.run.submission import Submission

WORKER_MODULE = "dynamo.vllm"
# The etcd endpoint is not on a worker's command line; the plan needs one.
_PLANNING_ETCD = "http://etcd.invalid:2379"


class WorkerArgsError(PreflightError):
    """A planned worker command line holds what only the job's shell can expand, or no dynamo.vllm."""


def _mode_roles(config: ClusterConfig, options: LaunchOptions) -> list[RoleSpec]:
    """The first role of each worker mode a run of ``options`` has: aggregated (rungs 5 and 6 of the ladder run
    them), then prefill and decode placed as the run places them."""
    roles = plan_roles("agg-single", config, nodes=options.nodes)
    try:
        roles += plan_roles(
            "disagg", config, options.prefill_workers, options.decode_workers, nodes=options.nodes
        )
    except PreflightError:  # one node configured: placement changes no argument, only the node
        node = config.primary_node
        roles += [RoleSpec("prefill", node, "prefill", False, 1), RoleSpec("decode", node, "decode", True, 0)]
    first: dict[str, RoleSpec] = {}
    for spec in roles:
        first.setdefault(spec.mode, spec)
    return list(first.values())


def worker_args(argv: list[object]) -> list[str]:
    """The arguments after ``-m dynamo.vllm`` of a process's command line (runtime wrapper and all)."""
    words = list(argv)
    for i in range(len(words) - 1):
        if words[i] == "-m" and words[i + 1] == WORKER_MODULE:
            tail = words[i + 2 :]
            shell = [w for w in tail if not isinstance(w, str)]
            if shell:
                raise WorkerArgsError(
                    f"a {WORKER_MODULE} argument is expanded by the job's shell ({shell[0]!r}): "
                    "it cannot be checked before the run"
                )
            return [str(w) for w in tail]
    raise WorkerArgsError(f"no '-m {WORKER_MODULE}' in the command line")


def planned_worker_args(
    config: ClusterConfig, options: LaunchOptions, image: str | None = None
) -> dict[str, list[str]]:
    """Mode (agg, prefill, decode) -> the arguments its worker gets after ``python -m dynamo.vllm``; empty for
    an engine whose workers are not ``dynamo.vllm`` (the mock engine). ``image``: the image validated, standing
    for the configured ones where the cluster configuration names none (the arguments do not depend on it)."""
    engine = get_engine(options.engine or config.engine_profile)
    if engine.dynamo_module != "vllm":
        return {}
    model = get_model(options.model or engine.default_model)
    if image:
        config = replace(
            config,
            dynamo_atom_image=config.dynamo_atom_image or image,
            nixl_image=config.nixl_image or image,
        )
    out: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="atomdyn-worker-args-") as tmp:
        for spec in _mode_roles(config, options):
            kind = "agg-single" if spec.mode == "agg" else "disagg"
            run_options = replace(options, kind=kind)
            rundir = RunDir(Path(tmp) / "plan", "plan")
            submission = Submission(
                config,
                run_options,
                engine,
                model,
                rundir,
                _PLANNING_ETCD,
                ready_timeout_s(run_options, engine),
            )
            plan, _ = submission.role(spec, submission.runtime())
            worker = next(p for p in plan.processes if p.name == plan.worker_process)
            out[spec.mode] = worker_args(list(worker.argv))
    return out
