#!/usr/bin/env bash
# The SGLang parser's environment, .venv-sglang: SGLang 0.5.14 and Dynamo 1.3.0.post1's dynamo.sglang on CPU
# torch, every file hash-verified, for the test that parses the sglang engine's command lines with the pinned
# parsers (packages/launchers/tests/run/test_sglang_parser.py). It serves nothing: SGLang has no CPU kernels on
# PyPI. Run by scripts/bootstrap.sh after .venv exists. Idempotent: a stamp records what was installed; a changed
# input reinstalls.
#
# CPU torch is not on the default package index: pip must see PyTorch's CPU wheel index (an extra index or
# find-links in pip's configuration). Set ATOMDYN_SKIP_SGLANG=1 to leave this environment out (the parser test
# then skips, except under CI=true, where it fails).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv="${ATOMDYN_SGLANG_VENV:-$root/.venv-sglang}"
project_venv="$root/.venv"
requirements=(requirements/sglang.txt requirements/sglang-wheel.txt)
hook=scripts/atomdyn_torchvision_schemas.py
stamp="$venv/.atomdyn-installed"

log() { printf 'install_sglang_parser: %s\n' "$*" >&2; }

if [[ "${ATOMDYN_SKIP_SGLANG:-}" == 1 ]]; then
  log "skipped (ATOMDYN_SKIP_SGLANG=1): the SGLang parser test will skip"
  exit 0
fi
if [[ ! -x "$project_venv/bin/python" ]]; then
  log "$project_venv does not exist: run scripts/bootstrap.sh first"
  exit 1
fi

python=$("$project_venv/bin/python" -c 'import sys; print(sys.executable)')
# sglang-wheel.txt pins SGLang's CPython 3.11 wheel; another Python needs its own hash line there. Without it the
# environment is left out, as with ATOMDYN_SKIP_SGLANG=1, rather than failing the whole bootstrap.
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  log "NOT installed: $python is not CPython 3.11, the Python of the wheel requirements/sglang-wheel.txt pins"
  log "  the SGLang parser test will skip (and fail under CI=true)"
  exit 0
fi
inputs=$(cat "${requirements[@]}" "$hook" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$inputs" ]]; then
  log "up to date: $venv"
  exit 0
fi

start=$(date +%s)
rm -f "$stamp"
if [[ ! -x "$venv/bin/python" ]]; then
  log "creating $venv"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes)

# Every dependency is in the files, with hashes; --no-deps keeps out SGLang's CUDA stack.
log "installing SGLang's and Dynamo's parsers on CPU torch from ${requirements[*]}"
"${pip[@]}" -r requirements/sglang.txt
"${pip[@]}" -r requirements/sglang-wheel.txt

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
install -m 0644 "$hook" "$site/atomdyn_torchvision_schemas.py"
printf 'import atomdyn_torchvision_schemas; atomdyn_torchvision_schemas.install()\n' \
  >"$site/atomdyn_torchvision_schemas.pth"

log "checking that SGLang's argument parser builds and dynamo.sglang's parser imports"
"$venv/bin/python" - <<'EOF'
import argparse

import dynamo.sglang.args  # noqa: F401
import torch
from sglang.srt.server_args import ServerArgs

assert torch.version.cuda is None, f"torch is a CUDA build ({torch.__version__})"
ServerArgs.add_cli_args(argparse.ArgumentParser())
EOF

printf '%s\n' "$inputs" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "ready: $venv ($(($(date +%s) - start)) s)"
