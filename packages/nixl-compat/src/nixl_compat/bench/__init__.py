"""KV-transfer bench: vLLM's per-layer descriptor layout moved by NIXL between two processes."""
