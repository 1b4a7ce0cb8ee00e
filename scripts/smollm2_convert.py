"""Dequantise SmolLM2-135M-Instruct's Q4_1 GGUF into a bf16 Llama checkpoint vLLM loads, and compute the
independent reference: transformers' own greedy decode, in float32, of a few fixed prompts.

Run with the real-engine environment's Python (``.venv-vllm-cpu``: torch, transformers, gguf, accelerate); the
project's builder (``atomdyn_launchers.profiles.smollm2``) calls it and records what it wrote. It imports
nothing of the project, so that it runs where the launchers are not installed.

    python scripts/smollm2_convert.py GGUF OUT_DIR PROMPTS_JSON

PROMPTS_JSON: ``{"max_tokens": N, "prompts": [{"name": ..., "messages": [...]}, ...]}``. OUT_DIR receives the
checkpoint (config.json, model.safetensors, tokenizer files, chat template) and ``reference.json``: per prompt
its token ids through the model's chat template, and the reference's token ids, token strings, text, log
probabilities and the margin (log probability of the chosen token over the runner-up) at each step, greedy, up
to N tokens and before the first special token (the prompt's ``max_tokens``, what the rehearsal asks for).
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def convert(gguf: Path, out: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    # The dequantised weights are plain tensors now; transformers 5 refuses to save a model that still
    # carries its GGUF quantizer, which nothing here needs.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config._name_or_path = "SmolLM2-135M-Instruct"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _ids(value: Any) -> list[int]:
    if hasattr(value, "keys") and "input_ids" in value:
        value = value["input_ids"]
    return [int(i) for i in value]


def reference(out: Path, prompts: dict[str, Any]) -> dict[str, Any]:
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    model.eval()
    max_tokens = int(prompts["max_tokens"])
    answers = []
    for prompt in prompts["prompts"]:
        ids = _ids(
            tokenizer.apply_chat_template(prompt["messages"], add_generation_prompt=True, tokenize=True)
        )
        tokens: list[int] = []
        logprobs: list[float] = []
        margins: list[float] = []
        with torch.no_grad():
            out_ = model(torch.tensor([ids]), use_cache=True)
            for _ in range(max_tokens):
                lp = out_.logits[0, -1].float().log_softmax(-1)
                top = lp.topk(2)
                token = int(top.indices[0])
                tokens.append(token)
                logprobs.append(round(float(top.values[0]), 6))
                margins.append(round(float(top.values[0] - top.values[1]), 6))
                out_ = model(torch.tensor([[token]]), past_key_values=out_.past_key_values, use_cache=True)
        # Up to the first special token (the end of the turn): how a frontend renders one in its logprobs is its
        # own choice, and what follows it is no answer. Each prompt's max_tokens is what the run asks for.
        special = set(tokenizer.all_special_ids)
        end = next((i for i, t in enumerate(tokens) if t in special), len(tokens))
        tokens, logprobs, margins = tokens[:end], logprobs[:end], margins[:end]
        answers.append({
            "name": prompt["name"],
            "messages": prompt["messages"],
            "prompt_token_ids": ids,
            "max_tokens": len(tokens),
            "token_ids": tokens,
            "tokens": [tokenizer.decode([t]) for t in tokens],
            "text": tokenizer.decode(tokens),
            "logprobs": logprobs,
            "margins": margins,
        })  # fmt: skip
    versions = {name: metadata.version(name) for name in ("torch", "transformers", "gguf", "accelerate")}
    return {
        "implementation": "transformers greedy decode, float32, KV cache, no stop at end of sequence",
        "versions": versions,
        "max_tokens": max_tokens,
        "answers": answers,
    }


def main(argv: list[str]) -> int:
    gguf, out, prompts_file = Path(argv[0]), Path(argv[1]), Path(argv[2])
    torch.manual_seed(0)
    convert(gguf, out)
    prompts = json.loads(prompts_file.read_text())
    ref = reference(out, prompts)
    (out / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
