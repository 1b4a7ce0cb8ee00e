#!/usr/bin/env bash
# Issue 9, item 3, on an NVIDIA GPU machine without an RDMA NIC: the CUDA dma-buf export path of dmabuf-shim and
# mori-repro against the real driver. Everything goes under $OUT. Usage (repository root):
#   python -m pip wheel --no-deps -w .gpuwhl packages/core packages/mori-repro   # here, where pip works
#   OUT=/some/dir scripts/gpu/dmabuf_export_h200.sh                               # there, carrying .gpuwhl
set -euo pipefail

: "${OUT:?set OUT to the directory that receives the evidence}"
WHEELS=${WHEELS:-.gpuwhl}
SITE=$(mktemp -d /tmp/mori-site.XXXXXX)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
loopback="$SITE/mori_repro/bin/mori-repro-loopback"

python3 -m atomdyn_core.fingerprint >"$OUT/fingerprint.json" 2>>"$OUT/mori.log" || true

# dmabuf-shim: driver facts its CUDA backend relies on, 10 000 registrations through the shim, passthrough cost.
bash packages/dmabuf-shim/tools/gpu_check.sh "$(mktemp -d)" >"$OUT/dmabuf-shim-gpu-check.txt" 2>&1 || echo "gpu_check rc=$?" >>"$OUT/dmabuf-shim-gpu-check.txt"

# mori-repro: the interior sub-allocation exported as the whole allocation (pool semantics), as the page range
# (what the CUDA driver exports for an interior pointer), and at an unaligned offset. No RDMA device here, so
# each run stops before registration with exit 20 naming only what is missing.
runs=$(mktemp -d)
run() {
  local name=$1
  shift
  set +e
  "$loopback" --backend cuda "$@" --json >"$runs/$name.json" 2>>"$OUT/mori.log"
  echo "mori-repro-loopback --backend cuda $* --json -> exit $?" >>"$OUT/mori.log"
  set -e
}
run allocation --cuda-export allocation
run range --cuda-export range
run range-unaligned --cuda-export range --sub-offset 33554688
python3 - "$runs" >"$OUT/mori-exports.json" <<'PY'
import json, sys
from pathlib import Path
runs = {}
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    try:
        runs[path.stem] = json.loads(path.read_text())
    except ValueError:
        runs[path.stem] = {"unparsable_output": path.read_text()[:2000]}
print(json.dumps(runs, indent=2))
PY
mkdir -p "$OUT/report"
python3 -m mori_repro.cli report --backend cuda --out "$OUT/report" >>"$OUT/mori.log" 2>&1 || echo "report rc=$?" >>"$OUT/mori.log"
