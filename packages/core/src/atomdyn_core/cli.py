"""`atomdyn-lock`: validate the lock, print its digest and pinned-stack table, fetch the wheels it names."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from atomdyn_core import __version__
from atomdyn_core.console import quiet_broken_pipe
from atomdyn_core.fetch import FetchError, fetch_wheel, print_progress
from atomdyn_core.lock import WHEEL_ROLES, Lock, LockError, UnrecordedHashError, load_lock

DEFAULT_CACHE = Path(".atomdyn/wheels")


def pinned_stack_table(lock: Lock) -> str:
    """The README's pinned-stack table, generated from the lock (a test keeps the README in agreement)."""
    rows = ["| component | pin |", "|---|---|"]
    for source in lock.sources.values():
        label = " ".join(part for part in (source.tag or source.version, source.commit) if part)
        rows.append(f"| {source.name} | {label} |")
    for image in lock.images.values():
        hint = f" (PoC: {image.digest_hint})" if image.digest_hint else ""
        digest = image.digest or f"digest not yet recorded{hint}"
        rows.append(f"| {image.name} image | {image.repository}:{image.tag}, {digest} |")
    for wheel in lock.wheels.values():
        sha = f"sha256 {wheel.sha256[:12]}…" if wheel.sha256 else "sha256 not yet recorded"
        rows.append(f"| {wheel.name} wheel | {wheel.filename}, {sha} |")
    for deb in lock.debs.values():
        sha = f"sha256 {deb.sha256[:12]}…" if deb.sha256 else "sha256 not yet recorded"
        rows.append(f"| {deb.name} Debian package | {deb.filename}, {sha} |")
    return "\n".join(rows) + "\n"


def _verify(args: argparse.Namespace) -> int:
    lock = load_lock(args.lock)
    unrecorded = [w.name for w in lock.wheels.values() if not w.recorded]
    unrecorded += [f"deb {d.name}" for d in lock.debs.values() if d.sha256 is None or d.size is None]
    unrecorded += [f"image {i.name}" for i in lock.images.values() if i.digest is None]
    unrecorded += [
        f"source {s.name} archive" for s in lock.sources.values() if s.archive and s.archive.sha256 is None
    ]
    print(f"lock: {lock.path} (schema {lock.schema_version}, {lock.release_name} {lock.release_version})")
    print(
        f"images {len(lock.images)}, sources {len(lock.sources)}, wheels {len(lock.wheels)}, debs {len(lock.debs)}"
    )
    if unrecorded:
        print(f"not yet recorded (refused unless overridden): {', '.join(unrecorded)}")
    print(f"digest: {lock.digest}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    lock = load_lock(args.lock)
    wheels = list(lock.wheels.values())
    if args.only:
        unknown = sorted(set(args.only) - set(lock.wheels))
        if unknown:
            raise LockError("$.wheels", f"no such wheel(s) in the lock: {', '.join(unknown)}")
        wheels = [lock.wheels[name] for name in args.only]
    if args.role:
        wheels = [w for w in wheels if args.role in w.roles]
    allow = set(args.allow_unrecorded or [])
    failures = 0
    for wheel in wheels:
        try:
            result = fetch_wheel(
                wheel,
                args.cache,
                mirror=args.mirror,
                allow_unrecorded="all" in allow or wheel.name in allow,
                progress=None if args.quiet else print_progress,
            )
        except (FetchError, UnrecordedHashError) as exc:
            failures += 1
            print(f"FAIL {wheel.name}: {exc}", file=sys.stderr)
            continue
        note = f" OVERRIDE {', '.join(result.overrides)}" if result.overrides else ""
        if result.replaced:
            note += f" (replaced: {result.replaced})"
        state = "cached" if result.cached else "fetched"
        print(f"ok   {wheel.name}: {state} {result.path} sha256 {result.sha256}{note}")
    if failures:
        print(f"{failures} of {len(wheels)} wheel(s) failed", file=sys.stderr)
    return 1 if failures else 0


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="atomdyn-lock", description=__doc__)
    parser.add_argument("--version", action="version", version=f"atomdyn-lock {__version__}")
    parser.add_argument(
        "--lock", type=Path, default=None, help="path of release-lock.json (default: found upward)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("verify", help="validate the lock and print its digest")
    sub.add_parser("table", help="print the pinned-stack table (Markdown)")
    fetch = sub.add_parser("fetch", help="download and verify the wheels the lock names")
    fetch.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    fetch.add_argument("--mirror", help="local mirror directory (path or file://) instead of the network")
    fetch.add_argument("--only", nargs="+", metavar="NAME", help="only these lock entries")
    fetch.add_argument(
        "--role", choices=sorted(WHEEL_ROLES), help="only wheels with this role (default: every role)"
    )
    fetch.add_argument(
        "--allow-unrecorded",
        action="append",
        metavar="NAME",
        help="accept an entry with no recorded hash ('all' for every one)",
    )
    fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        if args.command == "verify":
            return _verify(args)
        if args.command == "table":
            sys.stdout.write(pinned_stack_table(load_lock(args.lock)))
            return 0
        return _fetch(args)
    except (LockError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # our reader went away: quiet_broken_pipe ends the command
    except OSError as exc:  # a --cache or --lock path that cannot be used (a file, no permission)
        print(f"error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
