#!/usr/bin/env bash
# Build libkv_device_put.so: the GPU-initiated NIXL WRITE (scripts/gpu/kv_device_put.cu) for the bench's
# "device" path. Needs nvcc and the header trees of the NIXL and UCX sources the installed NIXL was built from
# (NIXL 1.5.1's wheel ships no headers): UCX_SRC and NIXL_SRC are checkouts (their src/ directories).
# Usage: UCX_SRC=… NIXL_SRC=… OUT_DIR=… scripts/gpu/build_device_put.sh   (prints the library's path)
set -euo pipefail

: "${UCX_SRC:?set UCX_SRC to a UCX source tree}"
: "${NIXL_SRC:?set NIXL_SRC to a NIXL source tree}"
OUT_DIR=${OUT_DIR:-build/device-put}
NVCC=${NVCC:-nvcc}
ARCH=${CUDA_ARCH:-sm_90}
UCX_VERSION=${UCX_VERSION:-1.23.0}  # the bundled UCX of nixl-cu13 1.5.1 (nixl-compat doctor prints it)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
gen="$OUT_DIR/generated"
mkdir -p "$gen/uct/api" "$gen/ucp/api"
IFS=. read -r major minor patch <<<"$UCX_VERSION"
for pair in "uct/api/version.h" "ucp/api/ucp_version.h"; do
  sed -e "s/@MAJOR_VERSION@/$major/g; s/@MINOR_VERSION@/$minor/g; s/@PATCH_VERSION@/$patch/g" \
      -e "s/@EXTRA_VERSION@//g; s/@VERSION@/$UCX_VERSION/g; s/@SCM_VERSION@/unknown/g; s/@SCM_BRANCH@/unknown/g" \
      "$UCX_SRC/src/$pair.in" >"$gen/$pair.tmp"
  mv "$gen/$pair.tmp" "$gen/$pair"
done
lib="$OUT_DIR/libkv_device_put.so"
read -r -a extra <<<"${NVCC_EXTRA_FLAGS:-}"
# HAVE_CONFIG_H and HAVE_CUDA: the cuda_ipc device transport only (no GDA, no ROCm headers needed).
"$NVCC" -std=c++17 -O2 -arch="$ARCH" -shared -Xcompiler -fPIC \
  -DHAVE_CONFIG_H -DHAVE_CUDA -I"$gen" -I"$NIXL_SRC/src/api/cpp" -I"$NIXL_SRC/src/api/gpu/ucx" -I"$UCX_SRC/src" \
  "${extra[@]}" "$here/kv_device_put.cu" -o "$lib.tmp"
mv "$lib.tmp" "$lib"
echo "$lib"
