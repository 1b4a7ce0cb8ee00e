#!/usr/bin/env bash
# There, on the GPU machine, once per device call: keep this call's piece of the stack under /tmp (it stays while
# the machine is warm), check every piece held so far against parts.sha256, say which are still missing; once
# all are there, reassemble, check every file against files.sha256, and install the wheels --no-deps into a
# venv (system site packages: the image's torch 2.11.0+cu130 and the rest) that the jobs run with.
#
#   scripts/gpu/stage_h200.sh .gpu-stage/call-NN      # carrying .gpu-stage/call-NN (prepare_h200_stage.sh)
#
# Once installed it imports what the vllm engine's jobs import (dynamo.vllm's main, handlers and args, vLLM,
# NIXL) and parses a P/D worker's argv with Dynamo's own parse_args; the answers go to $OUT/stage.log.
set -euo pipefail

: "${OUT:?set OUT to the directory that receives the log}"
CALL=${1:?the carried .gpu-stage/call-NN folder}
STAGE=${ATOMDYN_H200_STAGE:-/tmp/atomdyn-stage}
VENV=${ATOMDYN_H200_VENV:-/tmp/atomdyn-venv}
LOG="$OUT/stage.log"
mkdir -p "$STAGE/parts"

exec > >(tee -a "$LOG") 2>&1
echo "== $(date -u +%H:%M:%S) stage $CALL"
if [ -d "$CALL" ]; then
  cp "$CALL"/files.sha256 "$CALL"/parts.sha256 "$STAGE/"
  for part in "$CALL"/part-*; do
    if [ -e "$part" ]; then cp "$part" "$STAGE/parts/"; fi
  done
fi

missing=()
while read -r sha name; do
  if [ ! -f "$STAGE/parts/$name" ]; then
    missing+=("$name")
  elif [ "$(sha256sum "$STAGE/parts/$name" | cut -d' ' -f1)" != "$sha" ]; then
    echo "$name: sha256 differs from parts.sha256: removed"
    rm -f "$STAGE/parts/$name"
    missing+=("$name")
  fi
done <"$STAGE/parts.sha256"
if [ -f "$STAGE/installed" ]; then
  missing=()  # unpacked and installed by an earlier call; the pieces are gone
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "held: $(find "$STAGE/parts" -type f | wc -l) pieces; still missing: ${missing[*]}"
  exit 0
fi
[ -f "$STAGE/installed" ] || echo "all $(wc -l <"$STAGE/parts.sha256") pieces held, each sha256 checked"

fresh=no
if [ ! -f "$STAGE/installed" ]; then
  fresh=yes
  rm -rf "$STAGE/files"
  cat "$STAGE"/parts/part-* | tar -C "$STAGE" -xf -
  (cd "$STAGE" && sha256sum --quiet -c files.sha256) && echo "every file matches files.sha256"
  rm -rf "$VENV"
  python3 -m venv --system-site-packages "$VENV"
  SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$STAGE"/files/whl/*.whl
  rm -rf "$STAGE/parts"  # the files are unpacked; the disk is the machine's
  touch "$STAGE/installed"
fi
# The image's python3 is itself a venv (/opt/torch/.venv): a venv made from it with system site packages sees
# the base interpreter's, not torch's. Its site-packages go after ours.
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$SITE/zz-image-site.pth"
echo "image site-packages: $(cat "$SITE/zz-image-site.pth")"

if [ "$fresh" = no ] && [ "${ATOMDYN_H200_CHECK:-no}" != yes ]; then
  echo "installed by an earlier call (ATOMDYN_H200_CHECK=yes checks the stack again)"
  exit 0
fi

echo "== the stack"
"$VENV/bin/python" - <<'PY' || true
import importlib.metadata as md
from packaging.requirements import Requirement
for name in ("torch", "vllm", "ai-dynamo", "ai-dynamo-runtime", "nixl-cu13", "nixl", "transformers", "numpy",
             "triton", "numba", "huggingface-hub", "tokenizers", "pydantic", "protobuf"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} MISSING")
# Requirements of the stack that the environment does not meet (the kernel extras left out on purpose show here).
for top in ("vllm", "ai-dynamo", "ai-dynamo-runtime", "nixl-cu13"):
    for text in md.requires(top) or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            print(f"unmet: {top} needs {req} (not installed)")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            print(f"unmet: {top} needs {req}, found {have}")
PY
check_dynamo() {  # what the vllm engine's worker imports, and Dynamo's parse_args of a decode worker's argv
  (cd /tmp && "$VENV/bin/python" - <<'PY' 2>&1 | tail -25) || true
import sys, time, traceback
t = time.time()
try:
    import dynamo.vllm.main, dynamo.vllm.handlers, dynamo.vllm.args as args  # noqa: F401
    print(f"import dynamo.vllm.main, .handlers, .args: ok ({time.time() - t:.1f} s)")
    argv = ["--model", "/tmp/atomdyn-stage/files/models/tiny-qwen3-bf16", "--served-model-name", "atomdyn/tiny-qwen3",
            "--disaggregation-mode", "decode", "--kv-transfer-config",
            '{"kv_connector":"NixlConnector","kv_role":"kv_both"}', "--tensor-parallel-size", "1",
            "--max-num-seqs", "16", "--enable-prefix-caching", "--dtype", "bfloat16", "--max-model-len", "2048"]
    config = args.parse_args(argv)
    print("parse_args of a decode worker's argv: ok;", type(config).__name__,
          "disaggregation_mode", getattr(config, "disaggregation_mode", "?"))
except BaseException:
    traceback.print_exc()
    print("dynamo.vllm: FAILED (above)")
try:
    from nixl._api import nixl_agent  # noqa: F401
    import nixl
    print("nixl._api: ok", getattr(nixl, "__file__", ""))
except BaseException:
    traceback.print_exc()
PY
}

echo "== dynamo.vllm on this vLLM, as installed"
check_dynamo
# The nixl 1.5.1 meta wheel installs a nixl_ep package; vLLM 0.22 imports it whenever it is importable
# (vllm/utils/import_utils.py has_nixl_ep, from fused_moe/all2all_utils.py, which dynamo.vllm's scheduler
# imports), and nixl-cu13 1.5.1 ships its extension for torch 2.12, 2.13 and 2.14 only, not torch 2.11.
# ATOMDYN_H200_KEEP_NIXL_EP=yes keeps it (the failure above); otherwise it is moved aside and checked again.
if [ -d "$SITE/nixl_ep" ] && [ "${ATOMDYN_H200_KEEP_NIXL_EP:-no}" != yes ]; then
  rm -rf "$STAGE/nixl_ep.aside" && mv "$SITE/nixl_ep" "$STAGE/nixl_ep.aside"
  echo "moved the nixl meta wheel's nixl_ep package aside ($STAGE/nixl_ep.aside)"
  echo "== dynamo.vllm on this vLLM, without nixl_ep"
  check_dynamo
fi
