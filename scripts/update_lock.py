"""Refresh the lock's wheel, Debian package and source-archive sizes and sha256 from where this runs
(`nox -s update_lock`).

Only entries that can be fetched here change; what cannot be fetched keeps its current value ("unrecorded"
stays unrecorded: a hash is never invented). The file is rewritten atomically and the new digest printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

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
from atomdyn_core.lock import find_lock_path, load_lock, parse_lock


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lock", type=Path, default=None)
    parser.add_argument("--only", nargs="+", metavar="NAME")
    parser.add_argument(
        "--mirror", help="take the files from this directory (e.g. release assets copied by hand)"
    )
    args = parser.parse_args()
    path = args.lock or find_lock_path()
    lock = load_lock(path)
    raw = json.loads(path.read_text())
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


if __name__ == "__main__":
    raise SystemExit(main())
