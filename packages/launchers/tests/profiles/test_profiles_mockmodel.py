"""The generated model directory of the mocker profile: complete, usable, reused, never downloaded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from atomdyn_launchers.profiles import mockmodel

tokenizers = pytest.importorskip("tokenizers") if os.environ.get("CI") != "true" else __import__("tokenizers")


def test_generated_model_has_what_the_mocker_reads(tmp_path: Path) -> None:
    path = mockmodel.generate(tmp_path / "m")
    assert sorted(p.name for p in path.iterdir()) == sorted(mockmodel.REQUIRED_FILES)
    config = json.loads((path / "config.json").read_text())
    assert config["vocab_size"] >= mockmodel.MIN_VOCAB_SIZE
    tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == config["vocab_size"]
    # Ids up to ~2000 (what the mocker emits) decode to text.
    assert all(tokenizer.decode([i]) for i in (300, 1000, 1999))
    text = "Prefill and decode on two nodes."
    assert tokenizer.decode(tokenizer.encode(text).ids) == text
    tok_config = json.loads((path / "tokenizer_config.json").read_text())
    assert "add_generation_prompt" in tok_config["chat_template"]
    eos = tokenizer.token_to_id(tok_config["eos_token"])
    assert (
        json.loads((path / "generation_config.json").read_text())["eos_token_id"]
        == eos
        == config["eos_token_id"]
    )


def test_generation_is_deterministic_and_reused(tmp_path: Path) -> None:
    a = mockmodel.generate(tmp_path / "a")
    b = mockmodel.generate(tmp_path / "b")
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    before = (a / "tokenizer.json").stat().st_mtime_ns
    assert mockmodel.generate(tmp_path / "a") == a
    assert (a / "tokenizer.json").stat().st_mtime_ns == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging directory left


def test_incomplete_directory_is_detected(tmp_path: Path) -> None:
    path = mockmodel.generate(tmp_path / "m")
    (path / "generation_config.json").unlink()
    assert not mockmodel.is_complete(path)
    assert mockmodel.generate(path) == path and mockmodel.is_complete(path)  # regenerated in place
    with pytest.raises(mockmodel.MockModelError, match="below the minimum 2048"):
        mockmodel.generate(tmp_path / "small", vocab_size=1000)
