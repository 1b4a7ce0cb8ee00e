#!/usr/bin/env bash
# Two `nox -s release` runs from the same commit must give byte-identical artifacts and simple index
# (SHA256SUMS lists every file under dist/, dist/simple included).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
first=$(mktemp -d)
trap 'rm -rf "$first"' EXIT
.venv/bin/nox -s release
cp dist/SHA256SUMS "$first/SHA256SUMS"
.venv/bin/nox -s release
if ! diff -u "$first/SHA256SUMS" dist/SHA256SUMS; then
  echo "release is not reproducible: SHA256SUMS differ between two runs" >&2
  exit 1
fi
echo "release reproducible: $(wc -l <dist/SHA256SUMS) files (artifacts and index), identical SHA256SUMS"
