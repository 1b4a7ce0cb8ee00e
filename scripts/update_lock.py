"""Refresh the lock's wheel, Debian package and source-archive sizes and sha256 from where this runs
(`nox -s update_lock`); with --resolve-base, record the ATOM base image's digest and labels instead.

Only entries that can be fetched here change; what cannot be fetched keeps its current value ("unrecorded"
stays unrecorded: a hash is never invented). The file is rewritten atomically and the new digest printed.

--resolve-base asks the image's registry with skopeo (`skopeo inspect docker://REPOSITORY:TAG`) for the tag's
digest and labels, refuses the ATOM base (atom_base) when its com.rocm.atom.vllm_commit label is not the lock's
sources.vllm commit (or it has no such label: ATOM's native tags carry no vLLM), refuses a tag that now points
elsewhere than a digest already recorded, and writes digest and labels into $.images.<image> in one atomic write.
Another image of the lock (`--image sglang_base`: SGLang's ROCm image for MI35x, the sglang engine's) is recorded
by its digest and labels alone: what it must carry (MORI at sources.mori) is checked inside the image by
atomdyn-validate, since no label of SGLang's images names a MORI commit.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_core.fetch import (
    Artifact,
    FetchError,
    deb_artifact,
    obtain,
    sha256_file,
    source_artifact,
    wheel_artifact,
)
from atomdyn_core.lock import UNRECORDED, Lock, LockError, find_lock_path, load_lock, parse_lock
from atomdyn_core.registry import (
    VLLM_COMMIT_LABEL,
    Inspection,
    RegistryError,
    image_reference,
    inspect_image,
)

BASE_IMAGE = "atom_base"  # the image-builder's base (atomdyn_images.render.BASE_IMAGE_KEY)
RESOLVE_COMMAND = "nox -s update_lock -- --resolve-base"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lock", type=Path, default=None)
    parser.add_argument("--only", nargs="+", metavar="NAME")
    parser.add_argument(
        "--mirror", help="take the files from this directory (e.g. release assets copied by hand)"
    )
    parser.add_argument(
        "--resolve-base",
        action="store_true",
        help="record the base image's digest and labels from its registry (skopeo), checking its vLLM commit label",
    )
    parser.add_argument(
        "--image", default=BASE_IMAGE, help=f"with --resolve-base: the lock's image (default {BASE_IMAGE})"
    )
    parser.add_argument(
        "--registry",
        default="",
        metavar="HOST[:PORT]",
        help="with --resolve-base: ask this registry (a mirror of the repository) instead of the repository's own",
    )
    parser.add_argument(
        "--insecure-loopback",
        action="store_true",
        help="with --registry on a loopback address only: skopeo --tls-verify=false (plain HTTP; a test's registry)",
    )
    args = parser.parse_args()
    path = args.lock or find_lock_path()
    lock = load_lock(path)
    raw = json.loads(path.read_text())
    if args.resolve_base:
        try:
            return resolve_base(path, lock, raw, args.image, args.registry, args.insecure_loopback)
        except (RegistryError, LockError) as exc:
            print(f"refused: {exc}; the lock is unchanged", file=sys.stderr)
            return 1
    if args.registry or args.insecure_loopback or args.image != BASE_IMAGE:
        parser.error("--image, --registry and --insecure-loopback go with --resolve-base")
    targets: list[tuple[str, Artifact, dict[str, object]]] = [
        (wheel.name, wheel_artifact(wheel), raw["wheels"][wheel.name]) for wheel in lock.wheels.values()
    ]
    for deb in lock.debs.values():
        targets.append((f"deb:{deb.name}", deb_artifact(deb), raw["debs"][deb.name]))
    for source in lock.sources.values():
        if source.archive is not None:
            targets.append(
                (f"source:{source.name}", source_artifact(source), raw["sources"][source.name]["archive"])
            )
    changed = 0
    for name, artifact, entry in targets:
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            dest = Path(tmp) / artifact.filename
            try:
                obtain(artifact, dest, args.mirror)
            except FetchError as exc:
                print(f"kept   {name}: {exc}", file=sys.stderr)
                continue
            new = {"size": dest.stat().st_size, "sha256": sha256_file(dest)}
            if (entry["size"], entry["sha256"]) != (new["size"], new["sha256"]):
                print(f"update {name}: {entry['sha256']} -> {new['sha256']}")
                entry.update(new)
                changed += 1
            else:
                print(f"same   {name}")
    text = json.dumps(raw, indent=2) + "\n"
    digest = parse_lock(text).digest  # validate before writing anything
    if changed:
        atomic_write_text(path, text)
    print(f"{changed} entr{'y' if changed == 1 else 'ies'} updated; digest {digest}")
    return 0


def resolve_base(
    path: Path, lock: Lock, raw: dict[str, Any], name: str, registry: str, insecure_loopback: bool
) -> int:
    """Record the image's digest and labels as its registry gives them; the ATOM base only if it is ATOM's image of
    sources.vllm."""
    image = lock.images.get(name)
    if image is None:
        raise LockError(
            f"$.images.{name}", f"no such image in the lock (have: {', '.join(sorted(lock.images))})"
        )
    shown = f"{image.repository}:{image.tag}"
    found = inspect_image(
        image_reference(image.repository, image.tag, registry), insecure_loopback=insecure_loopback
    )
    checked = _vllm_label(lock, shown, found) if name == BASE_IMAGE else "no label checked"
    if image.digest is not None and image.digest != found.digest:
        raise RegistryError(
            f"{shown} now points at {found.digest}, but the lock records {image.digest} for it (a dated tag "
            f"should not move): check what changed, then set $.images.{name}.digest to {UNRECORDED!r} and run "
            f"`{RESOLVE_COMMAND}` again to take the new image"
        )
    entry = raw["images"][name]
    if entry.get("digest") == found.digest and entry.get("labels") == found.labels:
        print(f"same   image {name}: {shown} {found.digest}; digest {lock.digest}")
        return 0
    entry["digest"] = found.digest
    entry["labels"] = found.labels
    entry.pop("digest_hint", None)  # the hint stood in for an unrecorded digest
    text = json.dumps(raw, indent=2) + "\n"
    digest = parse_lock(text).digest  # validate before writing anything
    atomic_write_text(path, text)
    print(
        f"record image {name}: {shown} {found.digest}, {len(found.labels)} labels, {checked}; digest {digest}"
    )
    return 0


def _vllm_label(lock: Lock, shown: str, found: Inspection) -> str:
    """The ATOM base's vLLM label, which must name the lock's sources.vllm; what was checked, as printed."""
    vllm = lock.sources.get("vllm")
    if vllm is None:
        raise LockError(
            "$.sources.vllm", f"the lock has no vLLM source to check {shown}'s {VLLM_COMMIT_LABEL} against"
        )
    label = found.labels.get(VLLM_COMMIT_LABEL, "")
    if not label:
        raise RegistryError(
            f"{shown} ({found.digest}) carries no {VLLM_COMMIT_LABEL} label (a native ATOM tag, built without vLLM?); "
            f"pin ATOM's vllm-v<version>-nightly_<date> image built from sources.vllm {vllm.commit}"
        )
    if label != vllm.commit:
        raise RegistryError(
            f"{shown} ({found.digest}) carries {VLLM_COMMIT_LABEL}={label}, but the lock's sources.vllm is "
            f"{vllm.commit} ({vllm.repository}); pin the vllm-v<version>-nightly_<date> tag ATOM built from "
            f"{vllm.commit}, or change sources.vllm deliberately"
        )
    return f"{VLLM_COMMIT_LABEL}={label} (sources.vllm)"


if __name__ == "__main__":
    raise SystemExit(main())
