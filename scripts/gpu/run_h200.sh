#!/usr/bin/env bash
# Issue 9 batch on an NVIDIA GPU machine: NIXL doctor and the VRAM KV-transfer bench, everything under $OUT.
# Usage (repository root, wheels of nixl-cu13 and nixl for cp312 in $WHEELS, default .whl-nixl):
#   atomdyn-lock fetch --role gpu-evidence --cache .whl-nixl      # here, where pip works
#   OUT=/some/dir scripts/gpu/run_h200.sh [full|lean|sgl|sgl-threads|device|quick] # there, carrying .whl-nixl
# Nothing is fetched there: each wheel is checked against release-lock.json, then installed --no-deps.
# Mode `device` also builds the GPU-initiated path with the machine's nvcc; stage its headers here first
# (scripts/gpu/stage_device_headers.sh, into .devapi) and carry .devapi as well.
set -euo pipefail

: "${OUT:?set OUT to the directory that receives the evidence}"
WHEELS=${WHEELS:-.whl-nixl}
MODE=${1:-full}
SITE=$(mktemp -d /tmp/nixl-compat-site.XXXXXX)
LOG="$OUT/run.log"

# Shared GPUs: never let a library turn NVLink multicast on.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 NIXL_LOG_LEVEL=WARN

# The project's packages read their versions from their metadata (atomdyn_core's __init__): give them what an
# install would, in the site the wheels go to.
for pkg in core nixl-compat; do
  python3 - "packages/$pkg/pyproject.toml" "$SITE" <<'PY'
import sys, tomllib
from pathlib import Path
p = tomllib.loads(Path(sys.argv[1]).read_text())["project"]
d = Path(sys.argv[2]) / f"{p['name'].replace('-', '_')}-{p['version']}.dist-info"
d.mkdir(exist_ok=True)
(d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {p['name']}\nVersion: {p['version']}\n")
PY
done

PYTHONPATH="$SITE:$PWD/packages/core/src" python3 - "$WHEELS"/*.whl <<'PY'
import hashlib, sys
from pathlib import Path
from atomdyn_core.lock import load_lock
by_name = {w.filename: w for w in load_lock().wheels.values()}
for path in map(Path, sys.argv[1:]):
    entry = by_name.get(path.name)
    if entry is None:
        sys.exit(f"{path.name}: not in release-lock.json")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != entry.sha256:
        sys.exit(f"{path.name}: sha256 {digest} differs from the lock's {entry.sha256}")
    print(f"{path.name}: sha256 matches the lock")
PY
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE:$PWD/packages/nixl-compat/src:$PWD/packages/core/src${PYTHONPATH:+:$PYTHONPATH}"

{
  echo "== machine"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv || true
  nvidia-smi topo -m || true
  python3 -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "numpy", numpy.__version__)'
} >"$LOG" 2>&1

GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())')
DST=$(( GPUS > 1 ? 1 : 0 ))

echo "== doctor" >>"$LOG"
python3 -m nixl_compat.cli doctor --json >"$OUT/h200-doctor.json" 2>>"$LOG" || echo "doctor: rc=$?" >>"$LOG"

LOCAL=yes
if [ "$MODE" = quick ]; then
  COMMON=(--device cuda --blocks "1,4" --num-blocks 8 --sizes-mib "1,256" --lanes "1,4" --iters 50)
  CONFIGS=(--ucx default --ucx noprog:progress_thread=off)
  LOCAL_CONFIGS=(--ucx default)
else
  COMMON=(--device cuda --blocks "1,4,16,64" --num-blocks 64 --sizes-mib "1,16,256,1024" --lanes "1,4,16" --iters 200)
  CONFIGS=(--ucx default --ucx noprog:progress_thread=off --ucx streams16:UCX_CUDA_IPC_MAX_STREAMS=16
    --ucx "noprog-streams16:UCX_CUDA_IPC_MAX_STREAMS=16,progress_thread=off")
  LOCAL_CONFIGS=(--ucx default --ucx noprog:progress_thread=off)
  if [ "$MODE" = lean ]; then  # the two configurations that matter, GPU0 -> GPU1 only
    CONFIGS=(--ucx default --ucx noprog:progress_thread=off)
    LOCAL=no
  elif [ "$MODE" = sgl ]; then  # one batched copy per transfer (NIXL's SGL put) against worker threads
    COMMON=(--device cuda --blocks "1,4,16,64" --num-blocks 64 --sizes-mib "1,256,1024" --lanes "1,4" --iters 200)
    CONFIGS=(--ucx noprog:progress_thread=off --ucx "sgl:progress_thread=off,NIXL_UCX_SGL_ENABLE=1"
      --ucx sgl-prog:NIXL_UCX_SGL_ENABLE=1 --ucx "thr4:progress_thread=off,threads=4,split=18")
    LOCAL_CONFIGS=(--ucx noprog:progress_thread=off --ucx "sgl:progress_thread=off,NIXL_UCX_SGL_ENABLE=1")
  elif [ "$MODE" = device ]; then  # adds the GPU-initiated path (NIXL's device API, our kernel)
    echo "== build the device-put kernel" >>"$LOG"
    lib=$(UCX_SRC=${UCX_SRC:-.devapi/ucx} NIXL_SRC=${NIXL_SRC:-.devapi/nixl} OUT_DIR="$SITE/device-put" \
      bash scripts/gpu/build_device_put.sh 2>>"$LOG")
    export NIXL_COMPAT_DEVICE_PUT_LIB="$lib"
    COMMON=(--device cuda --blocks "1,4,16" --num-blocks 64 --sizes-mib "1,256,1024" --lanes 1 --iters 300)
    CONFIGS=(--ucx noprog:progress_thread=off --ucx "sgl:progress_thread=off,NIXL_UCX_SGL_ENABLE=1")
    LOCAL_CONFIGS=(--ucx noprog:progress_thread=off)
  elif [ "$MODE" = sgl-threads ]; then  # one KV block's batched copy split over 2, 4 or 8 worker threads
    COMMON=(--device cuda --blocks "1,4" --num-blocks 64 --sizes-mib 1 --lanes 1 --iters 300)
    CONFIGS=()
    for t in 1 2 4 8; do
      CONFIGS+=(--ucx "sgl-t$t:progress_thread=off,NIXL_UCX_SGL_ENABLE=1,threads=$t,split=$((72 / t))")
    done
    LOCAL=no
  fi
fi

echo "== bench GPU0 -> GPU$DST" >>"$LOG"
timeout 360 python3 -m nixl_compat.cli bench "${COMMON[@]}" "${CONFIGS[@]}" --src-gpu 0 --dst-gpu "$DST" \
  --json "$OUT/h200-bench-gpu0-gpu$DST.json" --plot "$OUT/h200-bench-gpu0-gpu$DST.png" >>"$LOG" 2>&1 ||
  echo "bench GPU0 -> GPU$DST: rc=$?" >>"$LOG"
if [ "$DST" = 1 ] && [ "$LOCAL" = yes ]; then
  echo "== bench within GPU0" >>"$LOG"
  timeout 150 python3 -m nixl_compat.cli bench "${COMMON[@]}" "${LOCAL_CONFIGS[@]}" --src-gpu 0 --dst-gpu 0 \
    --json "$OUT/h200-bench-gpu0-gpu0.json" --plot "$OUT/h200-bench-gpu0-gpu0.png" >>"$LOG" 2>&1 ||
    echo "bench within GPU0: rc=$?" >>"$LOG"
fi
echo "== done" >>"$LOG"
