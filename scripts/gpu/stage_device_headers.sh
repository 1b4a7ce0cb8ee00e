#!/usr/bin/env bash
# Stage the NIXL and UCX header trees that scripts/gpu/build_device_put.sh compiles against, from git
# repositories at given commits, into DEST (default .devapi, git-ignored; carry it to the GPU machine).
# Only headers (*.h, *.cuh, *.inl, *.hpp, *.h.in) are kept: a few MiB. Nothing here is committed.
# Usage: UCX_GIT=path/to/ucx NIXL_GIT=path/to/nixl [UCX_REF=…] [NIXL_REF=…] scripts/gpu/stage_device_headers.sh [DEST]
set -euo pipefail

: "${UCX_GIT:?set UCX_GIT to a clone of openucx/ucx}"
: "${NIXL_GIT:?set NIXL_GIT to a clone of ai-dynamo/nixl}"
# The commits the H200 device-path evidence was built from (UCX 1.23.0 development, NIXL after 1.5.1).
UCX_REF=${UCX_REF:-9466d104a3}
NIXL_REF=${NIXL_REF:-8770b655a}
DEST=${1:-.devapi}

tmp=$(mktemp -d "${DEST%/}.staging.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ucx" "$tmp/nixl"
git -C "$UCX_GIT" archive "$UCX_REF" src | tar -x -C "$tmp/ucx"
git -C "$NIXL_GIT" archive "$NIXL_REF" src/api | tar -x -C "$tmp/nixl"
find "$tmp" -type f ! -name '*.h' ! -name '*.cuh' ! -name '*.inl' ! -name '*.hpp' ! -name '*.h.in' -delete
printf 'ucx %s\nnixl %s\n' "$(git -C "$UCX_GIT" rev-parse "$UCX_REF")" "$(git -C "$NIXL_GIT" rev-parse "$NIXL_REF")" \
  >"$tmp/COMMITS"
rm -rf "$DEST"
mv "$tmp" "$DEST"
trap - EXIT
echo "staged $(du -sh "$DEST" | cut -f1) of headers in $DEST:"
cat "$DEST/COMMITS"
