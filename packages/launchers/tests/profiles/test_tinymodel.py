"""The tiny Qwen3 the real-engine rehearsal serves: same bytes every time, its digest the profile's."""

from __future__ import annotations

import itertools
import json
import os
import struct
from pathlib import Path

import pytest

from atomdyn_launchers.profiles import tinymodel
from atomdyn_launchers.profiles.models import ProfileError, get_model, parse_models

if os.environ.get("CI") != "true":  # in CI a missing tokenizers library fails, never skips
    pytest.importorskip("tokenizers")

PROFILE = get_model("tiny-qwen3-bf16")


def _header(path: Path) -> dict[str, dict[str, object]]:
    data = (path / tinymodel.WEIGHTS_FILE).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header: dict[str, dict[str, object]] = json.loads(data[8 : 8 + length])
    return header


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("tiny") / "model"
    return path, tinymodel.build(path)


def test_two_builds_give_the_recorded_digest(built: tuple[Path, str], tmp_path: Path) -> None:
    path, digest = built
    assert digest == PROFILE.build_digest
    assert tinymodel.build(tmp_path / "again", PROFILE.build_digest) == digest
    for name in tinymodel.FILES:
        assert (tmp_path / "again" / name).read_bytes() == (path / name).read_bytes(), name


def test_config_and_weights_describe_the_qwen3_shape(built: tuple[Path, str]) -> None:
    path, _ = built
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"]) == (128, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 32)
    assert config["vocab_size"] >= 2048 and config["torch_dtype"] == "bfloat16"
    header = _header(path)
    header.pop("__metadata__")
    assert header["model.embed_tokens.weight"]["shape"] == [config["vocab_size"], 128]
    assert header["model.layers.1.self_attn.k_proj.weight"]["shape"] == [2 * 32, 128]
    assert header["model.layers.0.self_attn.q_norm.weight"]["shape"] == [32]
    assert {t["dtype"] for t in header.values()} == {"BF16"}
    # The data region holds exactly the tensors, back to back, in offset order.
    spans = sorted(tuple(t["data_offsets"]) for t in header.values())  # type: ignore[arg-type]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)) and spans[0][0] == 0
    size = (path / tinymodel.WEIGHTS_FILE).stat().st_size
    (length,) = struct.unpack("<Q", (path / tinymodel.WEIGHTS_FILE).read_bytes()[:8])
    assert spans[-1][1] == size - 8 - length
    tokenizer_config = json.loads((path / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tokenizer_config["chat_template"]
    assert json.loads((path / "generation_config.json").read_text())["eos_token_id"] == config["eos_token_id"]


def test_a_changed_file_fails_the_digest_check(built: tuple[Path, str], tmp_path: Path) -> None:
    path, digest = built
    copy = tmp_path / "model"
    copy.mkdir()
    for name in tinymodel.FILES:
        (copy / name).write_bytes((path / name).read_bytes())
    weights = bytearray((copy / tinymodel.WEIGHTS_FILE).read_bytes())
    weights[-1] ^= 0xFF
    (copy / tinymodel.WEIGHTS_FILE).write_bytes(bytes(weights))
    with pytest.raises(tinymodel.TinyModelError, match=r"has digest sha256:\w+, the profile records"):
        tinymodel.build(copy, digest)


def test_a_fresh_build_with_another_digest_is_not_put_in_place(tmp_path: Path) -> None:
    with pytest.raises(tinymodel.TinyModelError, match="rebuild and record the new digest"):
        tinymodel.build(tmp_path / "model", "sha256:" + "0" * 64)
    assert not (tmp_path / "model").exists()
    assert list(tmp_path.iterdir()) == []  # no staging directory left behind


def test_build_digest_must_be_a_sha256() -> None:
    entry = {
        "description": "d",
        "hf_id": "",
        "served_model_name": "m",
        "gpus_per_worker": 1,
        "tensor_parallel_size": 1,
        "max_num_seqs": None,
        "enable_prefix_caching": True,
        "kv_cache_dtype": None,
        "engine_args": [],
        "atom_env": {},
        "atom_args": [],
        "build_digest": "md5:abc",
    }
    with pytest.raises(ProfileError, match="'build_digest' must be 'sha256:'"):
        parse_models(json.dumps({"schema_version": 1, "models": {"m": entry}}))
