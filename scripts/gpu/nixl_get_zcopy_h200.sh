#!/usr/bin/env bash
# Which UCX transport carries a NIXL READ (vLLM's NixlConnector pulls KV) between two processes on one GPU, with
# UCX's default and with UCX_CUDA_IPC_ENABLE_GET_ZCOPY=on: `nixl-compat doctor --json` twice (its self-test is
# two processes, WRITE then READ, 1 MiB of VRAM each), the put/get rows of each printed and kept under $OUT.
# Usage there: OUT=/some/dir scripts/gpu/nixl_get_zcopy_h200.sh WHEEL_DIR   (nixl-cu13 and nixl wheels of the lock)
set -euo pipefail

: "${OUT:?set OUT to the directory that receives the reports}"
WHEELS=${1:?the folder holding the nixl-cu13 and nixl wheels}
SITE=$(mktemp -d /tmp/nixl-get-site.XXXXXX)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl
# The project's packages read their versions from their metadata, as an install would give it.
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
export PYTHONPATH="$SITE:$PWD/packages/nixl-compat/src:$PWD/packages/core/src"

for mode in default get-zcopy-on; do
  if [ "$mode" = get-zcopy-on ]; then export UCX_CUDA_IPC_ENABLE_GET_ZCOPY=on; fi
  python3 -m nixl_compat.cli doctor --json >"$OUT/doctor-$mode.json" 2>"$OUT/doctor-$mode.log" || echo "doctor ($mode): rc=$?"
  python3 - "$OUT/doctor-$mode.json" "$mode" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
vram = report.get("selftest", {}).get("VRAM", {})
print(f"{sys.argv[2]}: VRAM self-test ok={vram.get('ok')} write {vram.get('write_cold_us')} us, read {vram.get('read_cold_us')} us")
for row in vram.get("protocols", []):
    if "cuda" in row["operation"]:
        print(f"  {row['operation']} | {row['size_range']} | {row['method']} | {' '.join(row['transports'])}")
PY
done
