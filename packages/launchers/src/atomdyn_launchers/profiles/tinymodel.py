"""Build the tiny random-weight Qwen3 that real vLLM engines load in the CPU rehearsal, with no downloads.

A real engine needs real weights: this writes a two-layer Qwen3 (hidden 128, 4 query heads, 2 KV heads,
head_dim 32, bf16) whose weights come from a seeded generator, beside the byte-level BPE tokenizer that the
mock model already trains locally. Same bytes every time: the directory's digest (``digest``) is recorded in
the model profile and checked after every build, so a changed generator or tokenizer library shows at once.

The weights are random, so the text it produces is noise; what matters is that prefill and decode compute real
KV blocks of a known shape that the NixlConnector must move, and that greedy decoding is deterministic.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import struct
import sys
import tempfile
from array import array
from collections.abc import Iterator
from pathlib import Path

from atomdyn_core.atomic import atomic_write_bytes, atomic_write_json
from atomdyn_launchers.profiles import mockmodel
from atomdyn_launchers.profiles.modeldir import files_digest, install_staged

# Bump when the generated content changes; the profile's recorded digest must change with it.
GENERATOR_VERSION = 1
SEED = 20261201
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32
MAX_POSITIONS = 4096
WEIGHTS_FILE = "model.safetensors"
FILES = (*mockmodel.REQUIRED_FILES, WEIGHTS_FILE)


class TinyModelError(RuntimeError):
    """The tiny model could not be built, or its bytes differ from the recorded digest."""


def _uniform_bf16(rng: random.Random, count: int, bound: float) -> bytes:
    """``count`` bf16 values uniform in [-bound, bound], little endian.

    From ``random.Random`` bytes (a stream Python keeps stable across versions), through float32, truncated to
    bf16 (the upper half of each float32): plain integer and IEEE arithmetic, so the same on every machine.
    """
    raw = array("H")
    raw.frombytes(rng.randbytes(2 * count))
    if sys.byteorder != "little":
        raw.byteswap()
    scale = 2.0 * bound / 65535.0
    floats = array("f", [u * scale - bound for u in raw]).tobytes()
    if sys.byteorder != "little":
        swapped = array("f")
        swapped.frombytes(floats)
        swapped.byteswap()
        floats = swapped.tobytes()
    out = bytearray(2 * count)
    out[0::2] = floats[2::4]
    out[1::2] = floats[3::4]
    return bytes(out)


def _ones_bf16(count: int) -> bytes:
    return b"\x80\x3f" * count  # 1.0 in bf16 (0x3f80), little endian: RMSNorm weights start at one


def _tensors(vocab_size: int) -> Iterator[tuple[str, tuple[int, ...], bytes]]:
    """Qwen3ForCausalLM's parameters in a fixed order, each from the one seeded stream."""
    rng = random.Random(SEED)
    q_out, kv_out = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM

    def linear(out_features: int, in_features: int) -> bytes:
        # Variance-preserving bound, so activations neither vanish nor blow up through the layers.
        return _uniform_bf16(rng, out_features * in_features, math.sqrt(3.0 / in_features))

    # Large embeddings (tied to the output head) make the logits peaky: greedy decoding then picks one clear
    # winner, so bf16 rounding differences between two engine layouts do not flip the chosen token.
    yield "model.embed_tokens.weight", (vocab_size, HIDDEN), _uniform_bf16(rng, vocab_size * HIDDEN, 0.5)
    for i in range(LAYERS):
        prefix = f"model.layers.{i}"
        yield f"{prefix}.input_layernorm.weight", (HIDDEN,), _ones_bf16(HIDDEN)
        yield f"{prefix}.self_attn.q_proj.weight", (q_out, HIDDEN), linear(q_out, HIDDEN)
        yield f"{prefix}.self_attn.k_proj.weight", (kv_out, HIDDEN), linear(kv_out, HIDDEN)
        yield f"{prefix}.self_attn.v_proj.weight", (kv_out, HIDDEN), linear(kv_out, HIDDEN)
        yield f"{prefix}.self_attn.o_proj.weight", (HIDDEN, q_out), linear(HIDDEN, q_out)
        yield f"{prefix}.self_attn.q_norm.weight", (HEAD_DIM,), _ones_bf16(HEAD_DIM)
        yield f"{prefix}.self_attn.k_norm.weight", (HEAD_DIM,), _ones_bf16(HEAD_DIM)
        yield f"{prefix}.post_attention_layernorm.weight", (HIDDEN,), _ones_bf16(HIDDEN)
        yield f"{prefix}.mlp.gate_proj.weight", (INTERMEDIATE, HIDDEN), linear(INTERMEDIATE, HIDDEN)
        yield f"{prefix}.mlp.up_proj.weight", (INTERMEDIATE, HIDDEN), linear(INTERMEDIATE, HIDDEN)
        yield f"{prefix}.mlp.down_proj.weight", (HIDDEN, INTERMEDIATE), linear(HIDDEN, INTERMEDIATE)
    yield "model.norm.weight", (HIDDEN,), _ones_bf16(HIDDEN)


def safetensors_bytes(tensors: list[tuple[str, tuple[int, ...], bytes]]) -> bytes:
    """The safetensors file format: an 8-byte header length, a JSON header (padded to 8 bytes), the data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, data in tensors:
        if len(data) != 2 * math.prod(shape):
            raise TinyModelError(f"tensor {name}: {len(data)} bytes for shape {shape}")
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(data for _, _, data in tensors)


def config(vocab_size: int, eos_id: int) -> dict[str, object]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "use_sliding_window": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": eos_id,
        "eos_token_id": eos_id,
        "atomdyn_tiny_generator": GENERATOR_VERSION,
    }


def digest(path: Path) -> str:
    """sha256 over each file's name and sha256, in name order (``FILES``)."""
    return files_digest(path, FILES, lambda name: TinyModelError(f"tiny model at {path} has no {name}"))


def is_built(path: Path) -> bool:
    """True when ``path`` holds every file, written by this generator version."""
    if not all((Path(path) / name).is_file() for name in FILES):
        return False
    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and cfg.get("atomdyn_tiny_generator") == GENERATOR_VERSION


def _write(staging: Path) -> None:
    tokenizer_dir = mockmodel.generate(staging / "tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (tokenizer_dir / name).rename(staging / name)
    shutil.rmtree(tokenizer_dir)
    vocab = json.loads((staging / "tokenizer.json").read_text())["model"]["vocab"]
    vocab_size = len(vocab)
    atomic_write_json(staging / "config.json", config(vocab_size, int(vocab["<|im_end|>"])))
    atomic_write_bytes(staging / WEIGHTS_FILE, safetensors_bytes(list(_tensors(vocab_size))))


def build(path: Path, expected_digest: str | None = None) -> str:
    """Build the tiny model at ``path`` (kept when already built) and return its digest.

    With ``expected_digest``, a directory whose bytes differ is an error naming both digests; a fresh build
    that differs is not put in place. Built in a temporary sibling and renamed, so readers never see half.
    """
    path = Path(path)
    if is_built(path):
        found = digest(path)
        if expected_digest is not None and found != expected_digest:
            raise TinyModelError(
                f"tiny model at {path} has digest {found}, the profile records {expected_digest}"
            )
        return found
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    os.chmod(staging, 0o755)  # jobs may run as another user
    try:
        _write(staging)
        found = digest(staging)
        if expected_digest is not None and found != expected_digest:
            raise TinyModelError(
                f"the tiny model built with digest {found}, the profile records {expected_digest} "
                "(the generator or the tokenizers library changed: rebuild and record the new digest)"
            )
        # A copy with another digest is replaced; one another builder just finished is kept.
        install_staged(staging, path, lambda p: is_built(p) and digest(p) == found)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("path", type=Path, help="model directory to create")
    parser.add_argument("--expect", help="digest the result must have (sha256:...)")
    args = parser.parse_args(argv)
    try:
        print(build(args.path, args.expect))
    except (TinyModelError, mockmodel.MockModelError) as exc:
        print(f"tinymodel: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
