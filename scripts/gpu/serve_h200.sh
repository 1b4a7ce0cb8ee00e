#!/usr/bin/env bash
# The vllm engine's own job scripts for real on one NVIDIA GPU machine with no Slurm (the lent H200): the
# launchers run `invoke agg.run` / `invoke disagg.run` as on a cluster, with scripts/gpu/fakeslurm.py standing
# in for Slurm's commands (each job script started as Slurm's batch step starts it, SLURM_* set, one process
# group each; fakeslurm.py's docstring says what it does not do), a run-owned etcd (the lock's etcd-server,
# verified) and two node names for the one machine, so that P/D gets its two jobs on the one GPU.
#
# Usage, repository root, after scripts/gpu/stage_h200.sh has installed the stack (OUT receives the run):
#   OUT=/some/dir scripts/gpu/serve_h200.sh agg|disagg|dry
# agg: aggregated run; disagg: 1P1D (run agg first: its answer is the P/D run's reference); dry: both
# as --dry-run (scripts written, nothing started). $OUT/<run-id>.tar.gz holds the run directory.
#
# What differs from a Slurm run, set here:
# - the two "nodes" h200-0 and h200-1 are one machine and one GPU (127.0.0.1 in /etc/hosts and NODE_ADDRS);
# - vLLM's memory share per worker (--gpu-memory-utilization, ATOMDYN_H200_GPU_MEMORY, default 0.3) is added
#   to the dynamo.vllm worker's argv by a sitecustomize in the venv: the launchers have no key for it, and two
#   workers with vLLM's default 0.9 cannot share one GPU;
# - UCX_PROTO_INFO=y reaches the jobs through the submitter's environment (sbatch's --export=ALL), so that the
#   workers' logs show the protocol UCX chose for the KV;
# - no iproute2 on that machine: a stand-in `ip` answers `ip -4 route get ADDR` (the jobs' management address);
# - the launchers run from the snapshot of HEAD that prepare_h200_stage.sh took (.gpu-stage/src, carried), not
#   from the travelling checkout, which holds others' work in progress;
# - NVLink multicast off (NCCL_NVLS_ENABLE=0 ...), the lending machine's rule.
# docs/nixl-h200.md ("The vllm engine's own job scripts on one H200") has the whole list and the call sequence.
set -euo pipefail

: "${OUT:?set OUT to the directory that receives the run}"
MODE=${1:?agg, disagg or dry}
ROOT=$PWD
VENV=${ATOMDYN_H200_VENV:-/tmp/atomdyn-venv}
SHARED=${ATOMDYN_H200_SHARED:-/tmp/atomdyn-shared}
STAGE=${ATOMDYN_H200_STAGE:-/tmp/atomdyn-stage}
SHARE=${ATOMDYN_H200_GPU_MEMORY:-0.3}

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 UCX_PROTO_INFO=y

# Slurm's commands.
FAKE="$SHARED/fakeslurm"
mkdir -p "$FAKE/bin" "$SHARED/models" "$SHARED/cache/debs"
for cmd in sbatch squeue scontrol sacct sinfo scancel; do ln -sf "$ROOT/scripts/gpu/fakeslurm.py" "$FAKE/bin/$cmd"; done
chmod +x "$ROOT/scripts/gpu/fakeslurm.py"
export PATH="$FAKE/bin:$VENV/bin:$PATH" FAKESLURM_DIR="$FAKE/state" FAKESLURM_PARTITION=h200
export FAKESLURM_NODES=h200-0,h200-1

# Two node names for the one machine (and its own hostname, which the run-owned etcd advertises).
if [ -w /etc/hosts ] && ! grep -q " h200-0" /etc/hosts; then echo "127.0.0.1 h200-0 h200-1" >>/etc/hosts; fi
if [ -w /etc/hosts ] && ! getent ahostsv4 "$(hostname)" >/dev/null; then echo "127.0.0.1 $(hostname)" >>/etc/hosts; fi
# The jobs and the node check take the management address from `ip -4 route get ADDR`. The machine has no
# iproute2: a stand-in answers that one question from the kernel's own choice (the source address of a UDP
# socket connected to ADDR), in ip's format.
if ! command -v ip >/dev/null; then
  cat >"$FAKE/bin/ip" <<'SH'
#!/bin/sh
# scripts/gpu/serve_h200.sh: `ip -4 route get ADDR` only (no iproute2 on this machine).
if [ "$1" = -4 ] && [ "$2" = route ] && [ "$3" = get ] && [ -n "$4" ]; then
  exec python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect((sys.argv[1], 9))
src = s.getsockname()[0]
dev = "lo" if src.startswith("127.") else "unknown"
print(f"{sys.argv[1]} dev {dev} src {src} uid 0")' "$4"
fi
echo "ip stand-in: only '-4 route get ADDR'" >&2
exit 1
SH
  chmod +x "$FAKE/bin/ip"
fi

# The model and the etcd package, from the staged files (the run's preflight verifies both against the
# profile's digest and the lock's sha256).
if [ ! -d "$SHARED/models/tiny-qwen3-bf16" ] && [ -d "$STAGE/files/models/tiny-qwen3-bf16" ]; then
  cp -r "$STAGE/files/models/tiny-qwen3-bf16" "$SHARED/models/"
fi
cp -n "$STAGE"/files/deb/etcd-server_*.deb "$SHARED/cache/debs/" 2>/dev/null || true

# The launchers as committed: the checkout that travels is shared with work in progress, so the run uses the
# snapshot prepare_h200_stage.sh took of HEAD (git archive, .gpu-stage/src/launchers-<commit>.tar.gz), when carried.
SRC=$ROOT
SNAPSHOT=$(find "$ROOT/.gpu-stage/src" -name 'launchers-*.tar.gz' 2>/dev/null | head -n 1)
if [ -n "$SNAPSHOT" ]; then
  SRC=/tmp/atomdyn-src/$(basename "$SNAPSHOT" .tar.gz)
  rm -rf "$SRC" && mkdir -p "$SRC" && tar -C "$SRC" -xzf "$SNAPSHOT"
fi
echo "launchers from $SRC" >>"$OUT/serve-$MODE.log"

SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The project's pure-Python packages, as an editable install would put them: on the path, with their metadata
# (each reads its version from it). The jobs run atomdyn_core.fingerprint and the readiness helper with them.
: >"$SITE/atomdyn-src.pth"
for pkg in core launchers nixl-compat image-builder; do
  echo "$SRC/packages/$pkg/src" >>"$SITE/atomdyn-src.pth"
  "$VENV/bin/python" - "$SRC/packages/$pkg/pyproject.toml" "$SITE" <<'PY'
import sys, tomllib
from pathlib import Path
project = tomllib.loads(Path(sys.argv[1]).read_text())["project"]
info = Path(sys.argv[2]) / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
(info / "INSTALLER").write_text("scripts/gpu/serve_h200.sh\n")
PY
done

# vLLM's memory share, added to the worker's own argv (python -m dynamo.vllm ... --disaggregation-mode M).
cat >"$SITE/sitecustomize.py" <<'PY'
# scripts/gpu/serve_h200.sh: two vLLM workers share one GPU; the launchers have no key for the share.
import os, sys
_share = os.environ.get("ATOMDYN_H200_GPU_MEMORY")
if _share and "--disaggregation-mode" in sys.argv and "--gpu-memory-utilization" not in sys.argv:
    sys.argv += ["--gpu-memory-utilization", _share]
PY
export ATOMDYN_H200_GPU_MEMORY="$SHARE"

CONFIG="$SHARED/cluster.env"
cat >"$CONFIG" <<EOF
SLURM_ACCOUNT=h200
SLURM_PARTITION=h200
SLURM_QOS=normal
PRIMARY_NODE=h200-0
PREFILL_NODE=h200-1
DECODE_NODE=h200-0
SHARED_DIR=$SHARED
MODEL_PATH=$SHARED/models/tiny-qwen3-bf16
PROJECT_DIR=$SRC
PYTHON_VENV=$VENV
ENGINE_PROFILE=vllm
RUNTIME=venv
GPUS_PER_NODE=1
NODE_ADDRS=h200-0=127.0.0.1,h200-1=127.0.0.1
EOF

{
  echo "== machine"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv || true
  "$VENV/bin/python" -c 'import torch, vllm, nixl; print("torch", torch.__version__, "vllm", vllm.__version__)' || true
} >>"$OUT/serve-$MODE.log" 2>&1

run() {  # run KIND RECIPE [FLAGS...]
  local kind=$1 recipe=$2 rc=0 dir
  shift 2
  # Bounded so that a stuck run still leaves its directory to collect within one device call.
  (cd "$SRC" && timeout -s INT "${ATOMDYN_H200_RUN_S:-500}" "$VENV/bin/python" -m invoke "$kind.run" \
    --config "$CONFIG" --recipe "$ROOT/$recipe" --run-dir-file "$OUT/$kind.rundir" --ready-timeout "${ATOMDYN_H200_READY_S:-300}" \
    --first-response-timeout "${ATOMDYN_H200_READY_S:-300}" "$@") || rc=$?
  echo "$kind.run: exit $rc" | tee -a "$OUT/serve-$MODE.log"
  if [ -s "$OUT/$kind.rundir" ]; then
    dir=$(cat "$OUT/$kind.rundir")
    tar -C "$(dirname "$dir")" -czf "$OUT/$(basename "$dir").tar.gz" "$(basename "$dir")"
  fi
  return "$rc"
}

case $MODE in
  agg) run agg scripts/gpu/h200-vllm-agg.yaml ;;
  disagg) run disagg scripts/gpu/h200-vllm-1p1d.yaml ;;
  dry)
    run agg scripts/gpu/h200-vllm-agg.yaml --dry-run || true
    run disagg scripts/gpu/h200-vllm-1p1d.yaml --dry-run
    ;;
  *) echo "unknown mode $MODE (agg, disagg or dry)" >&2; exit 2 ;;
esac
