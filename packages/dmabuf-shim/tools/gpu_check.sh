#!/usr/bin/env bash
# Builds the shim from source with the system compiler and runs cuda_check against the real CUDA
# driver: the driver facts the CUDA backend relies on, 10 000 registrations through the shim, and
# the passthrough cost in a CUDA process. Usage: tools/gpu_check.sh [WORKDIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="${1:-$(mktemp -d)}"
mkdir -p "$work"
g++ -std=c++17 -O2 -shared -fPIC -fvisibility=hidden -fno-exceptions -fno-rtti -Wall -Wextra \
    -DDMABUF_SHIM_VERSION='"gpu-check"' -o "$work/libdmabuf_shim.so" "$here/../src/native/shim.cpp" -ldl -pthread
cc -O2 -shared -fPIC -fvisibility=hidden -Wl,-soname,libverbs_recorder.so -o "$work/libverbs_recorder.so" "$here/verbs_recorder.c"
cc -O2 -o "$work/cuda_check" "$here/cuda_check.c" -ldl
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$work/cuda_check" facts
preload="$work/libdmabuf_shim.so:$work/libverbs_recorder.so"
for classify in on-failure always; do
    RECORDER_REFUSE_DEVICE=1 DMABUF_SHIM_CLASSIFY="$classify" LD_PRELOAD="$preload" \
        "$work/cuda_check" shim 10000 2> "$work/shim.log"
    grep -m1 '^recorder:' "$work/shim.log"
    grep -m1 '^dmabuf-shim: init' "$work/shim.log"
    grep -m1 '^dmabuf-shim: reg' "$work/shim.log"
    echo "log lines: $(grep -c '^dmabuf-shim: reg ok' "$work/shim.log") ok, $(grep -c '^dmabuf-shim: reg fail' "$work/shim.log") fail"
done
for backend in none hsa cuda auto; do
    for classify in on-failure always; do
        printf 'backend=%s classify=%s ' "$backend" "$classify"
        DMABUF_SHIM_LOG=off DMABUF_SHIM_BACKEND="$backend" DMABUF_SHIM_CLASSIFY="$classify" \
            LD_PRELOAD="$preload" "$work/cuda_check" bench 1000000
    done
done
