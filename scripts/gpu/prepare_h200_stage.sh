#!/usr/bin/env bash
# Here, where pip and apt work: everything the vllm engine's H200 run needs, cut into pieces one device call
# can carry each (the device tool carries 64 MiB a call, the working tree included).
#
#   scripts/gpu/prepare_h200_stage.sh            # into .gpu-stage/ (add /.gpu-stage/ to .git/info/exclude)
#
# Writes .gpu-stage/files/ (wheels of scripts/gpu/h200-stack.txt, the lock's etcd-server deb, the tiny Qwen3
# built by the project), files.sha256 (every file), payload.tar cut into parts/part-NN, and one folder per
# device call, .gpu-stage/call-NN/ (its part, hard-linked, and both manifests): carry .gpu-stage/call-NN in
# call NN and run `scripts/gpu/stage_h200.sh .gpu-stage/call-NN` there. Wheels the lock names (ai-dynamo,
# ai-dynamo-runtime, nixl-cu13 cp312, nixl) and the etcd deb are checked against release-lock.json here and
# every file against files.sha256 there. Then, one call each: `scripts/gpu/serve_h200.sh agg` and `... disagg`
# carrying .gpu-stage/src (the launchers' snapshot of HEAD, below); docs/nixl-h200.md (the vllm engine's job scripts) says the order.
set -euo pipefail

STAGE=${STAGE:-.gpu-stage}
PIECE=${PIECE:-52M}
PY=${PY:-.venv/bin/python}
mkdir -p "$STAGE/files/whl" "$STAGE/files/deb" "$STAGE/files/models"

grep -v '^#' scripts/gpu/h200-stack.txt | grep . >"$STAGE/stack.txt"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 \
  -d "$STAGE/files/whl" -r "$STAGE/stack.txt"
if [ "$(find "$STAGE/files/whl" -name '*.whl' | wc -l)" != "$(wc -l <"$STAGE/stack.txt")" ]; then
  echo "files/whl holds other wheels than scripts/gpu/h200-stack.txt names: empty it and run again" >&2
  exit 1
fi
(cd "$STAGE/files/deb" && apt-get download etcd-server 2>/dev/null)

"$PY" - "$STAGE/files" <<'PY'
import hashlib, sys
from pathlib import Path
from atomdyn_core.lock import load_lock
lock = load_lock(Path("release-lock.json"))
files = Path(sys.argv[1])
entries = [(files / "whl" / w.filename, w.sha256) for w in lock.wheels.values()]
entries += [(files / "deb" / d.filename, d.sha256) for d in lock.debs.values()]
for path, sha in entries:
    if path.exists():
        found = hashlib.sha256(path.read_bytes()).hexdigest()
        if found != sha:
            sys.exit(f"{path.name}: sha256 {found}, the lock records {sha}")
        print(f"{path.name}: sha256 matches release-lock.json")
PY
DIGEST=$("$PY" -c 'from atomdyn_launchers.profiles.models import get_model; print(get_model("tiny-qwen3-bf16").build_digest)')
"$PY" -m atomdyn_launchers.profiles.tinymodel "$STAGE/files/models/tiny-qwen3-bf16" --expect "$DIGEST"

(cd "$STAGE" && find files -type f | sort | xargs sha256sum >files.sha256)
rm -rf "$STAGE/parts" "$STAGE"/call-*
mkdir -p "$STAGE/parts"
tar -C "$STAGE" -cf - files | split -b "$PIECE" -d -a 2 - "$STAGE/parts/part-"
(cd "$STAGE/parts" && sha256sum part-* >../parts.sha256)
for part in "$STAGE"/parts/part-*; do
  n=${part##*-}
  mkdir -p "$STAGE/call-$n"
  ln "$part" "$STAGE/call-$n/"
  cp "$STAGE/files.sha256" "$STAGE/parts.sha256" "$STAGE/call-$n/"
done
# The launchers as committed (the checkout that travels is shared with work in progress): serve_h200.sh runs the
# snapshot it finds here. Carry .gpu-stage/src in the run calls.
rm -rf "$STAGE/src" && mkdir -p "$STAGE/src"
git archive --format=tar.gz -o "$STAGE/src/launchers-$(git rev-parse --short=12 HEAD).tar.gz" HEAD -- \
  packages tasks.py release-lock.json recipes config
ls -l "$STAGE"/parts "$STAGE"/src
echo "$(find "$STAGE/parts" -type f | wc -l) calls: carry .gpu-stage/call-NN and run scripts/gpu/stage_h200.sh .gpu-stage/call-NN"
