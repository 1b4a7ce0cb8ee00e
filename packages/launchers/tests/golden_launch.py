"""Golden launch snapshots: the job scripts and container command lines of every kind x engine x runtime,
rendered from one fixed cluster configuration so that a reviewer reads exactly what a real cluster would run.

Regenerate with ``nox -s snapshots`` (or ``python packages/launchers/tests/golden_launch.py --write``);
``test_golden_launch.py`` compares them. Nothing in them depends on the machine, the clock or a temporary
directory: the run id is fixed and the run directory is rendered at its configured place.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig, parse_cluster_env
from atomdyn_launchers.contract.rundir import RunDir
from atomdyn_launchers.engines import ENGINE_NAMES, get_engine
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import plan_roles
from atomdyn_launchers.run.submission import Submission
from atomdyn_launchers.run.worker_args import planned_worker_args
from atomdyn_launchers.sbatch import render, render_arg
from atomdyn_launchers.validate.gpu import job_script

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
RUNS_DIR = "/shared/atomdyn/runs"
ETCD = "http://etcd-host:2379"
KINDS = ("agg-single", "agg-two", "disagg")
# The cross-node NIXL probe (a P/D pair running nixl_compat.crossnode in the workers' runtime), for the engines
# whose KV moves over NIXL between nodes: the first real cluster's hour runs it before any model.
PROBE = "nixl-pair"
PROBE_CASES = (("atom", "docker"), ("atom", "podman"), ("atom", "venv"), ("vllm-cpu", "venv"))
RUNTIMES = ("venv", "docker")
# RUNTIME=pyxis (srun --container-image of the enroot squashfs) for the GPU engines, aggregated and P/D.
PYXIS_CASES = tuple(
    (engine, kind) for engine in ("atom", "vllm", "sglang") for kind in ("agg-single", "disagg")
)
# RUNTIME=podman (podman run of the same image) for every engine, aggregated and P/D.
PODMAN_CASES = tuple((engine, kind) for engine in ENGINE_NAMES for kind in ("agg-single", "disagg"))
# The atom engine's ROCm-transport path (ATOM_UCX_PATH=rocm), P/D, in each container runtime: the kernel
# configuration UCX's dma-buf check reads is mounted only there.
ROCM = "disagg-rocm"
ROCM_CASES = (("atom", "docker"), ("atom", "podman"), ("atom", "pyxis"))
# invoke validate.gpu's job (the validator in the image, one-shot, given the workers' argv) in each container runtime.
VALIDATE_CASES = (("atom", "docker"), ("atom", "podman"), ("atom", "pyxis"))
# A two-node MI355X-like cluster; nothing here needs to exist on the machine that renders it.
CLUSTER_ENV = f"""\
SLURM_ACCOUNT=acct
SLURM_PARTITION=gpu
SLURM_QOS=normal
PRIMARY_NODE=gpu-node-01
PREFILL_NODE=gpu-node-01
DECODE_NODE=gpu-node-02
SHARED_DIR=/shared/atomdyn
MODEL_PATH=/shared/models/Qwen3-8B
PROJECT_DIR=/shared/atomdyn/checkout
PYTHON_VENV=/shared/atomdyn/checkout/.venv
GPUS_PER_NODE=8
DYNAMO_ATOM_IMAGE=dynamo-atom-mi355x:1.3.0-0.1.6rc0
NIXL_IMAGE=dynamo-atom-mi355x-nixl-rocm:1.3.0-0.1.6rc0
ETCD_ENDPOINTS={ETCD}
UCX_NET_DEVICES='gpu-node-01=ionic_0:1 gpu-node-02=ionic_0:1'
RDMA_PROVIDER_LIBS=/usr/lib/x86_64-linux-gnu/libionic-rdmav34.so
SLURM_GPU_GRES=yes
"""


# The engines whose image is not the ATOM base's: DYNAMO_ATOM_IMAGE names the image their workers run.
ENGINE_IMAGES = {"sglang": "dynamo-sglang-mi35x:1.3.0-0.5.14"}


def golden_config(engine: str, runtime: str, extra: str = "") -> ClusterConfig:
    text = CLUSTER_ENV + f"ENGINE_PROFILE={engine}\nRUNTIME={runtime}\n" + extra
    if engine in ENGINE_IMAGES:
        text = text.replace(
            "DYNAMO_ATOM_IMAGE=dynamo-atom-mi355x:1.3.0-0.1.6rc0",
            f"DYNAMO_ATOM_IMAGE={ENGINE_IMAGES[engine]}",
        )
    return parse_cluster_env(text, "golden.env")


def cases() -> Iterator[tuple[str, str, str]]:
    """(engine, kind, runtime) of every snapshot; two-node aggregated runs only differ by placement, so the
    mocker alone shows them."""
    for engine in ENGINE_NAMES:
        for kind in KINDS:
            if kind == "agg-two" and engine != "mocker":
                continue
            for runtime in RUNTIMES:
                yield engine, kind, runtime
    for engine, kind in PYXIS_CASES:
        yield engine, kind, "pyxis"
    for engine, kind in PODMAN_CASES:
        yield engine, kind, "podman"
    for engine, runtime in PROBE_CASES:
        yield engine, PROBE, runtime
    for engine, runtime in ROCM_CASES:
        yield engine, ROCM, runtime


def render_case(engine: str, kind: str, runtime: str) -> dict[str, str]:
    """File name -> text: one job script per role, and the command lines of every process."""
    config = golden_config(engine, runtime, "ATOM_UCX_PATH=rocm\n" if kind == ROCM else "")
    run_id = f"20260101T000000Z-{kind}-{engine}"
    probe = ProbeOptions() if kind == PROBE else None
    run_kind = "disagg" if probe is not None or kind == ROCM else kind
    options = LaunchOptions(kind=run_kind, engine=engine)
    chosen = get_engine(engine)
    files: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="atomdyn-golden-") as tmp:
        rundir = RunDir(Path(tmp) / run_id, run_id)
        submission = Submission(
            config,
            options,
            chosen,
            get_model(chosen.default_model),
            rundir,
            ETCD,
            chosen.timeouts.ready_s,
            probe=probe,
        )
        runtime_obj = submission.runtime()
        commands: list[str] = []
        for spec in plan_roles(run_kind, config):
            plan, job = submission.role(spec, runtime_obj)
            files[f"{spec.role}.sbatch"] = render(job)
            for proc in plan.processes:
                commands.append(f"# {spec.role}.{proc.name}")
                commands += [f"{key}={render_arg(value)}" for key, value in sorted(proc.env.items())]
                commands += _paired([render_arg(arg) for arg in proc.argv])
                commands.append("")
        files["commands.txt"] = "\n".join(commands)
        return {name: text.replace(tmp, RUNS_DIR) for name, text in files.items()}


def render_validation(engine: str, runtime: str) -> str:
    """invoke validate.gpu's job script, given the workers' argv a 1P1D run of ``engine`` would write."""
    config = golden_config(engine, runtime)
    worker_args = planned_worker_args(config, LaunchOptions(kind="disagg", engine=engine))
    run_dir = Path(RUNS_DIR) / "validate-20260101T000000000000Z"
    return job_script(config, config.dynamo_atom_image or "", run_dir, "docker", worker_args)


def _paired(words: list[str]) -> list[str]:
    """One line per option with its value, so a reviewer reads a command line as a list of settings."""
    lines: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        following = words[i + 1] if i + 1 < len(words) else None
        if word.startswith("-") and following is not None and not following.startswith("-"):
            lines.append(f"  {word} {following}")
            i += 2
            continue
        lines.append(f"  {word}" if lines else word)
        i += 1
    return lines


def case_dir(engine: str, kind: str, runtime: str) -> Path:
    return GOLDEN_DIR / f"{kind}-{engine}-{runtime}"


def expected() -> dict[Path, str]:
    out: dict[Path, str] = {}
    for engine, kind, runtime in cases():
        for name, text in render_case(engine, kind, runtime).items():
            out[case_dir(engine, kind, runtime) / name] = text
    for engine, runtime in VALIDATE_CASES:
        out[case_dir(engine, "validate", runtime) / "validate.sbatch"] = render_validation(engine, runtime)
    return out


def write() -> list[Path]:
    """Rewrite the golden directory to exactly what the code renders; return the files that changed."""
    wanted = expected()
    changed: list[Path] = []
    for path in sorted(p for p in GOLDEN_DIR.rglob("*") if p.is_file()):
        if path not in wanted:
            path.unlink()
            changed.append(path)
    for path, text in wanted.items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)
            changed.append(path)
    for folder in sorted((p for p in GOLDEN_DIR.iterdir() if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the snapshots (default: only compare)")
    args = parser.parse_args(argv)
    if args.write:
        for path in write():
            print(f"updated {path.relative_to(GOLDEN_DIR.parent)}")
        return 0
    wanted = expected()
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    for path in stale:
        print(f"differs: {path.relative_to(GOLDEN_DIR.parent)}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
