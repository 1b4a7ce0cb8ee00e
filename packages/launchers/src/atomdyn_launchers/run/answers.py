"""Asking the fixed prompt of the KV correctness check (:mod:`atomdyn_launchers.contract.answers` says what it
is and which files it leaves), and finding the aggregated answer a P/D run compares with."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig, resolve_cluster_config
from atomdyn_launchers.contract import direct_http
from atomdyn_launchers.contract.answers import FIXED_PROMPT, MAX_TOKENS, reference_key, reference_path
from atomdyn_launchers.engines import Engine, get_engine
from atomdyn_launchers.profiles.models import ModelProfile, get_model
from atomdyn_launchers.run.lockinfo import checkout_lock_digest
from atomdyn_launchers.run.smoke import chat_request


class AnswerError(RuntimeError):
    """The fixed prompt got no usable answer; the message says what came back."""


def ask(base_url: str, served_model: str, timeout_s: float) -> tuple[list[str], list[float], str]:
    """The fixed prompt's answer at temperature 0, asked alone: its tokens and their log probabilities (from the
    logprobs) and its text."""
    body = {
        "model": served_model,
        "messages": [{"role": "user", "content": FIXED_PROMPT}],
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
        "ignore_eos": True,  # always MAX_TOKENS tokens: an early stop would shorten what is compared
        "logprobs": True,
    }
    try:
        with direct_http.urlopen(chat_request(base_url, body), timeout=timeout_s) as response:
            reply = json.loads(response.read())
    except (OSError, urllib.error.URLError, json.JSONDecodeError) as exc:
        raise AnswerError(f"the fixed prompt got no answer from {base_url}: {exc}") from None
    try:
        choice = reply["choices"][0]
        content = (choice.get("logprobs") or {}).get("content") or []
        tokens = [str(c["token"]) for c in content]
        logprobs = [float(c["logprob"]) for c in content]
        text = str(choice["message"]["content"] or "")
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise AnswerError(f"the fixed prompt's answer has no {exc}: {json.dumps(reply)[:300]}") from None
    if len(tokens) != MAX_TOKENS:
        raise AnswerError(
            f"the fixed prompt's answer has {len(tokens)} tokens with logprobs, expected {MAX_TOKENS}"
        )
    return tokens, logprobs, text


def reference_for(
    config: ClusterConfig, engine: Engine, model: ModelProfile, lock_path: Path | None
) -> tuple[str, Path]:
    """The key and file of the fixed prompt's aggregated answer for this engine, model and build."""
    lock = checkout_lock_digest(lock_path, config.project_dir) or ""
    key = reference_key(engine.name, model.name, model.build_digest or "", lock)
    return key, reference_path(config.shared_dir, key)


def aggregated_reference_missing(engine: str, config: ClusterConfig | None = None) -> bool:
    """Whether a P/D run of ``engine`` would find no aggregated answer to compare with (``nox -s demo`` then
    runs an aggregated one first)."""
    cfg = config or resolve_cluster_config(None)
    chosen = get_engine(engine)
    if not chosen.expectations.aggregated_answer:
        return False
    return not reference_for(cfg, chosen, get_model(chosen.default_model), None)[1].is_file()
