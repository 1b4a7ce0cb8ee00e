#!/usr/bin/env bash
# The cross-node NIXL probe's VRAM path on an NVIDIA GPU machine (the ladder's rung 4 without Slurm): target
# and initiator as two processes on GPU 0, KV buffers in VRAM in Qwen3-8B's layout, everything under $OUT.
# Usage (repository root, wheels of nixl-cu13 and nixl for cp312 in $WHEELS, default .whl):
#   OUT=/some/dir scripts/gpu/crossnode_h200.sh
# The machine has no etcd: a stand-in answers the two JSON-gateway calls the probe makes (/v3/kv/put and
# /v3/kv/range of one key), on loopback. Both sides run on one GPU: UCX moves the bytes within the device, so
# the figures say nothing about a network; what this shows is the probe's VRAM registration, READ and checksum
# path under the real NIXL.
set -euo pipefail

: "${OUT:?set OUT to the directory that receives the evidence}"
WHEELS=${WHEELS:-.whl}
SITE=$(mktemp -d /tmp/nixl-probe-site.XXXXXX)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 NIXL_LOG_LEVEL=WARN UCX_PROTO_INFO=y

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE:$PWD/packages/nixl-compat/src:$PWD/packages/core/src"
sha256sum "$WHEELS"/*.whl >"$OUT/wheels.sha256"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv >"$OUT/gpu.csv" || true

port_file=$(mktemp)
python3 - "$port_file" <<'PY' &
import base64, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
store: dict[str, str] = {}
class Gateway(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # the two calls of etcd's v3 JSON gateway the probe makes
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/v3/kv/put":
            store[body["key"]] = body["value"]
            answer: dict = {}
        elif self.path == "/v3/kv/range":
            value = store.get(body["key"])
            answer = {"kvs": [{"key": body["key"], "value": value}]} if value is not None else {}
        else:
            self.send_error(404)
            return
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args: object) -> None:
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
open(sys.argv[1], "w").write(str(server.server_address[1]))
server.serve_forever()
PY
gateway=$!
trap 'kill "$gateway" 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$port_file" ] && break; sleep 0.1; done
ETCD_ENDPOINTS="http://127.0.0.1:$(cat "$port_file")"
export ETCD_ENDPOINTS

shape=(--layers 36 --kv-heads 8 --head-dim 128 --block-tokens 16 --dtype-bytes 2)
per_read="1,4,16,64"  # blocks per READ
common=("${shape[@]}" --blocks 64 --transfer-blocks "$per_read" --iterations 50 --large-mib 1024 --device cuda --timeout 120)
for tls in default "cuda_copy,cuda_ipc,tcp,self"; do
  if [ "$tls" = default ]; then unset UCX_TLS; else export UCX_TLS=$tls; fi
  name=${tls//,/_}
  python3 -m nixl_compat.crossnode --role target --key-prefix "h200/$name/" "${common[@]}" \
    --json "$OUT/$name-target.json" >"$OUT/$name-target.log" 2>&1 &
  target=$!
  status=0
  python3 -m nixl_compat.crossnode --role initiator --key-prefix "h200/$name/" "${common[@]}" \
    --json "$OUT/$name-initiator.json" >"$OUT/$name-initiator.log" 2>&1 || status=$?
  wait "$target" || status=$?
  echo "UCX_TLS=$tls: exit $status"
  python3 - "$OUT/$name-initiator.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"  ok={d['ok']} stage={d['stage']} error={d['error']}")
for s in d["series"]:
    print(f"  {s['blocks']:>3} block(s) {s['bytes'] / 2**20:8.2f} MiB: p50 {s['p50_us']} us, {s['p50_us_per_block']} us/block, "
          f"{s['gbps_p50']} GB/s, verified {s['verified']}")
if d["large"]:
    print(f"  large {d['large']['bytes'] >> 20} MiB: p50 {d['large']['p50_us']} us, {d['large']['gbps_p50']} GB/s, "
          f"verified {d['large']['verified']}")
PY
  grep -h "  | " "$OUT/$name-initiator.log" | head -20 || true
done
