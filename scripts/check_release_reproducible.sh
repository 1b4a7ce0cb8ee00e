#!/usr/bin/env bash
# Two `nox -s release` runs from the same commit must give byte-identical artifacts and simple index
# (SHA256SUMS lists every file, simple/ included). They run side by side, each with its own isolated build
# environments and CMake build directories, so neither reuses anything the other built; the first writes dist/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
second=$(mktemp -d)
trap 'rm -rf "$second"' EXIT
.venv/bin/nox -s release >"$second.log" 2>&1 &
first_pid=$!
status=0
.venv/bin/nox -s release -- --out "$second/dist" || status=$?
wait "$first_pid" || status=$?
echo "== the release into dist/:"
cat "$second.log"
rm -f "$second.log"
if ((status)); then
  echo "a release build failed (its output is above)" >&2
  exit "$status"
fi
if ! diff -u dist/SHA256SUMS "$second/dist/SHA256SUMS"; then
  echo "release is not reproducible: SHA256SUMS differ between two independent builds" >&2
  exit 1
fi
echo "release reproducible: $(wc -l <dist/SHA256SUMS) files (artifacts and index), identical SHA256SUMS"
