"""Labels every evidence document carries: platform, lock digest, machine fingerprint."""

from __future__ import annotations

import json
from typing import Any


def evidence_labels(platform: str) -> dict[str, Any]:
    out: dict[str, Any] = {"platform": platform}
    try:
        from atomdyn_core.lock import load_lock

        out["lock_digest"] = load_lock().digest
    except (ImportError, OSError, ValueError) as exc:
        out["lock_digest"] = f"unavailable: {exc}"
    try:
        from atomdyn_core.fingerprint import collect_fingerprint

        out["fingerprint"] = collect_fingerprint()
    except ImportError as exc:
        out["fingerprint"] = {"unavailable": str(exc)}
    return out


def sanitized_json(doc: dict[str, Any]) -> str:
    """JSON text passed through the project's one sanitizer (host names, users, addresses)."""
    text = json.dumps(doc, indent=1) + "\n"
    try:
        from atomdyn_core.sanitize import sanitize
    except ImportError:
        return text
    clean = sanitize(text)
    json.loads(clean)  # the sanitizer must leave valid JSON behind
    return clean


def default_platform(gpu_names: list[str]) -> str:
    if not gpu_names:
        return "rehearsal (CPU, DRAM), not MI355X"
    if all("H200" in n for n in gpu_names):
        return "H200 (NVIDIA), not MI355X"
    if all("MI355" in n for n in gpu_names):
        return "MI355X"
    return " + ".join(sorted(set(gpu_names))) + ", not MI355X"
