"""`invoke disagg.run --recipe recipes/sglang-mori-1p1d.yaml --dry-run` writes job scripts whose dynamo.sglang
command lines the pinned parsers accept: SGLang 0.5.14's own (``ServerArgs.add_cli_args``, strict) and Dynamo
1.3.0.post1's ``dynamo.sglang.args.parse_args``, run in .venv-sglang (scripts/install_sglang_parser.sh, which
bootstrap runs). The argument lists are read back from the written scripts, as the job's bash would split them.

What this proves: every flag is one the pinned SGLang defines, every value is of its type and among its choices,
SGLang's model-independent validation (``__post_init__`` up to the device: the PD-disaggregation hook among it)
accepts the combination, and Dynamo's parser takes the same list (its own flags, SGLang's, the bootstrap port)
through to ``ServerArgs.from_cli_args``. What it cannot: this machine has no accelerator, so SGLang stops at
``get_device`` before its device- and model-dependent defaults; whether MORI, the KV canary's kernels and the
model run on MI355X is for the image's validator and the ladder on a node.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.config.cluster import ClusterConfig, find_repo_root, load_cluster_config
from atomdyn_launchers.config.recipes import load_recipe
from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.launch import dry_run
from atomdyn_launchers.run.options import Flags, resolve
from atomdyn_launchers.slurm.client import Slurm

REPO = find_repo_root(Path(__file__).parent)
RECIPE = REPO / "recipes" / "sglang-mori-1p1d.yaml"
HELPER = Path(__file__).with_name("sglang_parse.py")
NODES = ("gpu-node-01", "gpu-node-02")
# Where SGLang first needs an accelerator (server_args.py, __post_init__ -> _handle_missing_default_values).
DEVICE_STEP = ["__post_init__", "_handle_missing_default_values", "get_device"]


def sglang_python() -> Path:
    venv = Path(os.environ.get("ATOMDYN_SGLANG_VENV", REPO / ".venv-sglang"))
    python = venv / "bin" / "python"
    if not python.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(
                f"{venv} is missing: scripts/bootstrap.sh (install_sglang_parser.sh) must make it in CI"
            )
        pytest.skip(f"{venv} is missing (scripts/install_sglang_parser.sh makes it)")
    return python


class NoSlurm(Slurm):
    def run(self, *args: Any, **kwargs: Any) -> str:
        raise AssertionError(f"a dry run ran Slurm: {args}")


def _config(tmp_path: Path) -> ClusterConfig:
    """config/cluster.env.example (a real MI355X cluster's keys) with ENGINE_PROFILE=sglang, a writable
    SHARED_DIR and a MODEL_PATH that exists (Dynamo's parser fetches a model whose path does not)."""
    text = (REPO / "config" / "cluster.env.example").read_text(encoding="utf-8")
    for key, value in {
        "SHARED_DIR": tmp_path / "shared",
        "PROJECT_DIR": REPO,
        "MODEL_PATH": tmp_path / "model",
        "ENGINE_PROFILE": "sglang",
        "PREFILL_NODE": NODES[0],
        "DECODE_NODE": NODES[1],
    }.items():
        text = re.sub(rf"^(# )?{key}=\S+", f"{key}={value}", text, flags=re.M)
    text = re.sub(r"^(# )?(NODE_ADDRS|UCX_NET_DEVICES)=.*$", "", text, flags=re.M)
    text += "NODE_ADDRS='" + ",".join(f"{n}=10.0.0.{i + 1}" for i, n in enumerate(NODES)) + "'\n"
    text += "UCX_NET_DEVICES='" + " ".join(f"{n}=ionic_0:1" for n in NODES) + "'\n"
    for sub in ("shared", "model"):
        (tmp_path / sub).mkdir(exist_ok=True)
    path = tmp_path / "cluster.env"
    path.write_text(text, encoding="utf-8")
    return load_cluster_config(path)


def worker_argv(script: str) -> list[str]:
    """What follows ``-m dynamo.sglang`` on the script's line that starts the worker, split as bash would."""
    lines = [line for line in script.splitlines() if line.startswith("start ") and "-m dynamo.sglang" in line]
    assert len(lines) == 1, lines
    words = shlex.split(lines[0])
    at = words.index("dynamo.sglang")
    assert words[at - 1] == "-m"
    return words[at + 1 :]


def parse(argvs: list[list[str]]) -> list[dict[str, Any]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DYN_NAMESPACE": "atomdyn-parser-test", "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [str(sglang_python()), str(HELPER)],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp_path = tmp_path_factory.mktemp("sglang-dry-run")
    config = _config(tmp_path)
    recipe = load_recipe(RECIPE)
    options = resolve(recipe.kind, None, Flags(offline=True), recipe)
    path = dry_run(options, config, progress=Progress(enabled=False), slurm=NoSlurm(config))
    plan = json.loads((path / "dry-run.json").read_text(encoding="utf-8"))
    assert plan["submitted"] == [] and [r["role"] for r in plan["roles"]] == ["prefill", "decode"]
    return {r["role"]: (path / r["script"]).read_text(encoding="utf-8") for r in plan["roles"]}


def test_the_dry_run_scripts_parse_with_sglang_and_dynamo(scripts: dict[str, str], tmp_path: Path) -> None:
    argvs = {role: worker_argv(text) for role, text in scripts.items()}
    results = dict(zip(argvs, parse(list(argvs.values())), strict=True))
    for role, result in results.items():
        sglang = result["sglang"]
        assert sglang["ok"], (role, sglang)
        assert sglang["disaggregation_mode"] == role
        assert sglang["disaggregation_transfer_backend"] == "mori"
        assert sglang["disaggregation_ib_device"] == "ionic_0"
        assert sglang["kv_canary"] == "raise" and sglang["kv_canary_real_data"] == "partial"
        assert sglang["enable_metrics"] is True and sglang["tp_size"] == 1
        # The model-independent validation passed: SGLang stopped where it first needs an accelerator.
        server_args = result["server_args"]
        assert server_args["frames"][-len(DEVICE_STEP) :] == DEVICE_STEP, (role, server_args)
        assert "from_cli_args" in server_args["frames"]
        assert server_args["message"].startswith("No accelerator"), server_args
        # Dynamo's parser took the same list through its own flags and SGLang's, to from_cli_args.
        dynamo = result["dynamo"]
        assert dynamo["frames"][-len(DEVICE_STEP) :] == DEVICE_STEP and {
            "parse_args",
            "from_cli_args",
        } <= set(dynamo["frames"]), (
            role,
            dynamo,
        )
    # The bootstrap port each worker binds is its leased one (prefill's is the one decode is told of).
    prefill = results["prefill"]["sglang"]["disaggregation_bootstrap_port"]
    assert prefill == Ports.for_role(1).bootstrap
    assert json.loads(results["prefill"]["sglang"]["kv_events_config"])["publisher"] == "zmq"


def test_the_parsers_refuse_what_the_pin_does_not_define() -> None:
    """The check is strict: a misspelt backend and an unknown flag are refused by both parsers."""
    base = ["--model-path", "/nonexistent", "--disaggregation-mode", "prefill"]
    bad = parse([[*base, "--disaggregation-transfer-backend", "moori"], [*base, "--kv-checksum", "on"]])
    for result in bad:
        assert not result["sglang"]["ok"] and result["sglang"]["status"] == 2, result
        assert result["dynamo"]["exception"] == "SystemExit" and result["dynamo"]["status"] == 2, result
    assert "invalid choice: 'moori'" in bad[0]["sglang"]["error"][0]
    assert "unrecognized arguments: --kv-checksum on" in bad[1]["sglang"]["error"][0]
