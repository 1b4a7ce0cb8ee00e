"""Model profiles: the data each model brings to the engines."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from atomdyn_launchers.profiles.models import ProfileError, get_model, load_models, parse_models


def test_default_model_is_qwen3_8b_as_the_poc_ran_it() -> None:
    model = get_model("qwen3-8b-bf16")
    assert model.enable_prefix_caching is True
    assert model.max_num_seqs == 32
    assert model.gpus_per_worker == 1 and model.tensor_parallel_size == 1
    args = model.vllm_args()
    assert "--enable-prefix-caching" in args and "--no-enable-prefix-caching" not in args
    assert args[args.index("--max-num-seqs") + 1] == "32"


def test_large_model_carries_atom_recipe_settings() -> None:
    model = get_model("qwen3.5-397b-mxfp4")
    assert model.tensor_parallel_size == 4 and model.gpus_per_worker == 4
    assert model.kv_cache_dtype == "fp8" and model.enable_prefix_caching is False
    assert model.atom_env["ATOM_USE_CUSTOM_ALL_GATHER"] == "0"
    assert model.atom_env["ATOM_ENABLE_QK_NORM_ROPE_CACHE_QUANT_FUSION"] == "1"
    assert "--async-scheduling" in model.atom_args
    config = model.atom_args[model.atom_args.index("--compilation-config") + 1]
    assert json.loads(config) == {"cudagraph_mode": "FULL_AND_PIECEWISE"}
    assert "--quantization" not in model.vllm_args() + list(model.atom_args)


def test_unknown_model_profile_is_named() -> None:
    with pytest.raises(ProfileError, match=r"unknown model profile 'nope'.*qwen3-8b-bf16"):
        get_model("nope")


def _models_text(**changes: object) -> str:
    raw = json.loads(json.dumps({"schema_version": 1, "models": {"m": _entry()}}))
    raw["models"]["m"].update(changes)
    return json.dumps(raw)


def _entry() -> dict[str, object]:
    return {
        "description": "d",
        "hf_id": "x/y",
        "served_model_name": "x/y",
        "gpus_per_worker": 1,
        "tensor_parallel_size": 1,
        "max_num_seqs": None,
        "enable_prefix_caching": True,
        "kv_cache_dtype": None,
        "engine_args": [],
        "atom_env": {},
        "atom_args": [],
    }


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"colour": "red"}, "unknown field 'colour'"),
        ({"gpus_per_worker": "1"}, "field 'gpus_per_worker' has the wrong type"),
        ({"gpus_per_worker": True}, "field 'gpus_per_worker' has the wrong type"),
        ({"engine_args": ["--a", 3]}, "'engine_args' must be a list of strings"),
        ({"tensor_parallel_size": 2}, "gpus_per_worker must be >= tensor_parallel_size"),
    ],
)
def test_bad_model_profiles_name_the_field(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_models(_models_text(**changes))


def test_models_json_parses_and_rejects_garbage() -> None:
    assert set(load_models()) == {
        "qwen3-8b-bf16",
        "qwen3.5-397b-mxfp4",
        "smollm2-135m-instruct",
        "tiny-qwen3-bf16",
    }
    with pytest.raises(ProfileError, match="not valid JSON"):
        parse_models("{")
    with pytest.raises(ProfileError, match="schema_version 1"):
        parse_models('{"models": {}}')


def test_a_built_model_names_its_builder() -> None:
    models = load_models()
    assert (models["tiny-qwen3-bf16"].builder, models["smollm2-135m-instruct"].builder) == (
        "tinymodel",
        "smollm2",
    )
    raw = json.loads(resources.files("atomdyn_launchers.profiles").joinpath("models.json").read_text())
    raw["models"]["smollm2-135m-instruct"]["builder"] = "hub"
    with pytest.raises(ProfileError, match="'builder' must be one of tinymodel, smollm2"):
        parse_models(json.dumps(raw))
