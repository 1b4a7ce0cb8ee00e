"""Model profiles: what a model needs from the engine, kept as data in ``models.json``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

DEFAULT_MODEL = "qwen3-8b-bf16"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")

_FIELDS: dict[str, type | tuple[type, ...]] = {
    "description": str,
    "hf_id": str,
    "served_model_name": str,
    "gpus_per_worker": int,
    "tensor_parallel_size": int,
    "max_num_seqs": (int, type(None)),
    "enable_prefix_caching": bool,
    "kv_cache_dtype": (str, type(None)),
    "engine_args": list,
    "atom_env": dict,
    "atom_args": list,
}
# Optional: a model the project builds itself (no hub download), e.g. the CPU rehearsal's tiny Qwen3; the
# shape of one worker's KV cache (what the cross-node NIXL probe moves before any model is loaded).
_OPTIONAL: dict[str, type] = {"build_digest": str, "kv_shape": dict, "builder": str}
# Who builds a model with a build digest: the tiny Qwen3 (tinymodel.py) or the real SmolLM2 (smollm2.py).
BUILDERS = ("tinymodel", "smollm2")
_KV_FIELDS = ("layers", "kv_heads", "head_dim", "block_tokens", "dtype_bytes")


@dataclass(frozen=True)
class KvShape:
    """One worker's attention KV cache, per rank: a K and a V tensor per layer of [blocks, block_tokens,
    kv_heads, head_dim] elements of dtype_bytes, as vLLM lays it out (from the model's config.json)."""

    layers: int
    kv_heads: int
    head_dim: int
    block_tokens: int
    dtype_bytes: int

    @property
    def block_bytes(self) -> int:
        return 2 * self.layers * self.block_tokens * self.kv_heads * self.head_dim * self.dtype_bytes


class ProfileError(ValueError):
    """A profile name or profile file is invalid; the message names the profile and field."""


@dataclass(frozen=True)
class ModelProfile:
    name: str
    description: str
    hf_id: str
    served_model_name: str
    gpus_per_worker: int
    tensor_parallel_size: int
    max_num_seqs: int | None
    enable_prefix_caching: bool
    kv_cache_dtype: str | None
    engine_args: tuple[str, ...]
    # Settings that only ATOM needs (its recipes); the vllm profile on NVIDIA leaves them out.
    atom_env: Mapping[str, str]
    atom_args: tuple[str, ...]
    # Set for a model built locally (atomdyn_launchers.profiles.tinymodel): the digest its directory must have.
    build_digest: str | None = None
    kv_shape: KvShape | None = None
    builder: str = "tinymodel"

    def vllm_args(self) -> list[str]:
        """Engine flags shared by the vllm and atom profiles (vLLM's own CLI)."""
        args = ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.max_num_seqs is not None:
            args += ["--max-num-seqs", str(self.max_num_seqs)]
        args.append("--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching")
        if self.kv_cache_dtype is not None:
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        return args + list(self.engine_args)


def _parse(name: str, raw: Any) -> ModelProfile:
    if not isinstance(raw, dict):
        raise ProfileError(f"model profile {name!r}: expected an object")
    unknown = sorted(set(raw) - set(_FIELDS) - set(_OPTIONAL))
    if unknown:
        raise ProfileError(f"model profile {name!r}: unknown field {unknown[0]!r}")
    for field, kind in _FIELDS.items():
        if field not in raw:
            raise ProfileError(f"model profile {name!r}: missing field {field!r}")
        value = raw[field]
        # bool is an int subclass: refuse it where a count is expected.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ProfileError(f"model profile {name!r}: field {field!r} has the wrong type")
    digest = raw.get("build_digest")
    if digest is not None and not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
        raise ProfileError(f"model profile {name!r}: 'build_digest' must be 'sha256:' and 64 hex digits")
    builder = raw.get("builder", "tinymodel")
    if builder not in BUILDERS:
        raise ProfileError(f"model profile {name!r}: 'builder' must be one of {', '.join(BUILDERS)}")
    shape = raw.get("kv_shape")
    if shape is not None and (
        sorted(shape) != sorted(_KV_FIELDS)
        or not all(
            isinstance(shape[k], int) and not isinstance(shape[k], bool) and shape[k] > 0 for k in _KV_FIELDS
        )
    ):
        raise ProfileError(
            f"model profile {name!r}: 'kv_shape' must give positive integers for {', '.join(_KV_FIELDS)}"
        )
    for field in ("engine_args", "atom_args"):
        if not all(isinstance(a, str) for a in raw[field]):
            raise ProfileError(f"model profile {name!r}: {field!r} must be a list of strings")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in raw["atom_env"].items()):
        raise ProfileError(f"model profile {name!r}: 'atom_env' must map strings to strings")
    if raw["gpus_per_worker"] < raw["tensor_parallel_size"] or raw["tensor_parallel_size"] < 1:
        raise ProfileError(f"model profile {name!r}: gpus_per_worker must be >= tensor_parallel_size >= 1")
    return ModelProfile(
        name=name,
        description=raw["description"],
        hf_id=raw["hf_id"],
        served_model_name=raw["served_model_name"],
        gpus_per_worker=raw["gpus_per_worker"],
        tensor_parallel_size=raw["tensor_parallel_size"],
        max_num_seqs=raw["max_num_seqs"],
        enable_prefix_caching=raw["enable_prefix_caching"],
        kv_cache_dtype=raw["kv_cache_dtype"],
        engine_args=tuple(raw["engine_args"]),
        atom_env=dict(raw["atom_env"]),
        atom_args=tuple(raw["atom_args"]),
        build_digest=digest,
        kv_shape=KvShape(**shape) if shape is not None else None,
        builder=builder,
    )


def parse_models(text: str) -> dict[str, ModelProfile]:
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ProfileError(f"models.json is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("schema_version") != 1 or not isinstance(raw.get("models"), dict):
        raise ProfileError("models.json: expected schema_version 1 and a 'models' object")
    return {name: _parse(name, entry) for name, entry in raw["models"].items()}


def load_models() -> dict[str, ModelProfile]:
    text = resources.files(__package__).joinpath("models.json").read_text(encoding="utf-8")
    return parse_models(text)


def get_model(name: str) -> ModelProfile:
    models = load_models()
    if name not in models:
        raise ProfileError(f"unknown model profile {name!r}; known: {', '.join(sorted(models))}")
    return models[name]
