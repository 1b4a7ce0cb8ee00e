"""Stage verified build contexts, build the base and overlay images, tag only on success, write the record."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from atomdyn_core.fetch import FetchError, FetchResult, fetch_wheel
from atomdyn_core.lock import Lock
from atomdyn_images import patching, render, sources, subprojects
from atomdyn_images.engine import BuildResult, Docker, DockerError
from atomdyn_images.validator import same_commit
from atomdyn_images.wheelfile import write_wheel

VALIDATOR_SOURCE = Path(__file__).with_name("validator.py")
VALIDATOR_WRAPPER = '#!/bin/sh\nexec python3 /opt/atomdyn/validator.py "$@"\n'
WHEEL_TAGS_SOURCE = Path(__file__).with_name("wheeltags.py")
NIXL_COMPAT, DMABUF_SHIM = "nixl_compat", "dmabuf_shim"
# ATOM's vLLM images (tags vllm-v<version>-nightly_<date>) name the vLLM commit they were built from in this label;
# its plain tags come from the native target, without vLLM and without the label. Built FROM it, the base
# inherits the label, so the built image's labels show it.
VLLM_COMMIT_LABEL = "com.rocm.atom.vllm_commit"
# What the dmabuf-shim build in the image needs from its source directory (not build outputs or tests).
_SHIM_SOURCE_IGNORE = shutil.ignore_patterns("build", "dist", "tests", "__pycache__", "*.egg-info", ".*")


class BuildError(RuntimeError):
    """Bad build input (missing wheel, unusable option); nothing was tagged."""


@dataclass(frozen=True)
class BuildOptions:
    workdir: Path
    atom_variant: str = ""
    base: str = ""  # override of the lock's ATOM base image
    mirror: str = ""  # override of the wheel source: a local directory
    source_mirror: str = ""  # directory holding <name>-<commit>.tar.gz source archives
    patches: Path = Path("patches")
    compat_wheels: Path | None = None  # directory with the nixl-compat and dmabuf-shim wheels (overlay)
    allow_unrecorded: bool = False
    native: str = "source"
    network: str = "none"
    targets: tuple[str, ...] = ("base", "overlay")
    rehearsal: bool = False  # stand-in base and inputs (atomdyn_images.rehearsal): labeled and tagged as such
    shim_source: Path | None = None  # packages/dmabuf-shim, built in the overlay (default: beside the lock)
    subprojects: Path | None = None  # NIXL's meson subproject archives, for a source build without network

    def overrides(self, target: str = "overlay") -> list[str]:
        found = []
        if self.base:
            found.append(f"base={self.base}")
        if self.mirror:
            found.append(f"wheel-source=mirror:{self.mirror}")
        if self.native != "source" and target == "overlay":
            found.append(f"native-stage={self.native}")
        if self.allow_unrecorded:
            found.append("allow-unrecorded")
        if self.network != "none":
            found.append(f"build-network={self.network}")
        if self.rehearsal:
            found.append("rehearsal")
        return found

    def render_options(self, target: str) -> render.RenderOptions:
        overrides = tuple(self.overrides(target))
        return render.RenderOptions(
            self.atom_variant,
            self.base,
            self.native,
            overrides,
            self.allow_unrecorded,
            self.rehearsal,
            self.network,
        )


@dataclass
class Input:
    kind: str
    name: str
    sha256: str
    origin: str
    detail: str = ""


@dataclass
class ImageRecord:
    target: str
    image_id: str
    tags: list[str]
    dockerfile_sha256: str
    seconds: float
    steps: dict[str, str]
    all_cached: bool


@dataclass
class BuildRecord:
    lock_digest: str
    lock_path: str
    created: str
    docker_server: str
    overrides: list[str]
    inputs: list[Input] = field(default_factory=list)
    images: list[ImageRecord] = field(default_factory=list)
    error: str = ""  # set when the build failed: what is recorded is what happened before the failure
    rehearsal: bool = False  # true: stand-in base and inputs, the images prove the flow, not the product
    # The ATOM base's VLLM_COMMIT_LABEL as the built base image shows it ("" when it has none or was not built)
    base_vllm_commit: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_if_changed(path: Path, text: str) -> None:
    """Keep mtimes stable for unchanged files (the context transfer is then near-instant)."""
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        atomic_write_text(path, text)


def _sync_dir(directory: Path, keep: set[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for entry in directory.iterdir():
        if entry.name not in keep:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()


def _place(result_path: Path, directory: Path) -> None:
    target = directory / result_path.name
    same_size = target.is_file() and target.stat().st_size == result_path.stat().st_size
    if same_size and _sha256_bytes(target.read_bytes()) == _sha256_bytes(result_path.read_bytes()):
        return
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(result_path, tmp)
    tmp.replace(target)


def stage_base(lock: Lock, options: BuildOptions, record: BuildRecord) -> Path:
    """The base context: verified wheels, their hashed requirements, the validator; returns the Dockerfile."""
    context = options.workdir / "base"
    wheels_dir = context / "wheels"
    ropts = options.render_options("base")
    wheels = render.base_wheels(lock, ropts)
    dockerfile_text = render.render_base(lock, ropts)
    cache = options.workdir / "cache" / "wheels"
    entries = []
    for wheel in wheels:
        try:
            fetched: FetchResult = fetch_wheel(
                wheel, cache, mirror=options.mirror or None, allow_unrecorded=options.allow_unrecorded
            )
        except FetchError as exc:
            raise BuildError(f"wheel {wheel.name}: {exc}") from exc
        record.overrides.extend(o for o in fetched.overrides if o not in record.overrides)
        entries.append((fetched.path, fetched.sha256))
        record.inputs.append(
            Input("wheel", wheel.filename, fetched.sha256, fetched.origin, wheel.requirement)
        )
    _sync_dir(wheels_dir, {path.name for path, _ in entries})
    for path, _ in entries:
        _place(path, wheels_dir)
    requirements = render.requirements_text([(p.name, sha) for p, sha in entries], "/tmp/atomdyn/wheels")
    _write_if_changed(context / "requirements-base.txt", requirements)
    _stage_wheel_tags(context)
    validator = context / "validator"
    validator.mkdir(parents=True, exist_ok=True)
    _write_if_changed(validator / "validator.py", VALIDATOR_SOURCE.read_text(encoding="utf-8"))
    _write_if_changed(validator / "expected.json", render.expected_versions(lock, ropts))
    wrapper = validator / "atomdyn-validate"
    if not wrapper.is_file() or wrapper.read_text() != VALIDATOR_WRAPPER:
        atomic_write_text(wrapper, VALIDATOR_WRAPPER, mode=0o755)
    dockerfile = context / "Dockerfile"
    _write_if_changed(dockerfile, dockerfile_text)
    return dockerfile


def _stage_wheel_tags(context: Path) -> None:
    tools = context / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    _write_if_changed(tools / "wheeltags.py", WHEEL_TAGS_SOURCE.read_text(encoding="utf-8"))


def _compat_wheel(options: BuildOptions, project: str) -> Path:
    if options.compat_wheels is None:
        raise BuildError(
            f"the overlay needs --compat-wheels DIR holding the {project.replace('_', '-')} wheel"
        )
    matches = sorted(options.compat_wheels.glob(f"{project}-*.whl"))
    if len(matches) != 1:
        raise BuildError(
            f"expected exactly one {project}-*.whl in {options.compat_wheels}, found {len(matches)} "
            f"(build it with `pip wheel --no-deps packages/{project.replace('_', '-')} -w DIR`)"
        )
    return matches[0]


def _stand_in_native(context: Path, nixl_version: str, shim_wheel: Path) -> None:
    stand_in = context / "stand-in"
    (stand_in / "ucx" / "lib").mkdir(parents=True, exist_ok=True)
    _write_if_changed(stand_in / "ucx" / "lib" / "STAND_IN", "UCX was not compiled: stand-in native stage\n")
    wheels = stand_in / "nixl-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    files = {
        "nixl_rocm/__init__.py": "STAND_IN = True  # the real package is built from the patched source\n"
    }
    path = write_wheel(wheels, "nixl-rocm", nixl_version, files)
    _sync_dir(wheels, {path.name})
    compat = stand_in / "compat-wheels"
    _sync_dir(compat, {shim_wheel.name})
    _place(shim_wheel, compat)


def _stage_build_tools(lock: Lock, options: BuildOptions, context: Path, record: BuildRecord) -> None:
    """The native stage's build tools: the lock's wheels with the build-tools role, verified, with hashes."""
    tools = lock.wheels_with_role(render.BUILD_TOOLS_ROLE)
    if not tools:
        raise BuildError(
            f"release-lock.json names no build tools for the overlay (wheels with role {render.BUILD_TOOLS_ROLE!r})"
        )
    entries = []
    for wheel in tools:
        try:
            fetched = fetch_wheel(
                wheel,
                options.workdir / "cache" / "wheels",
                mirror=options.mirror or None,
                allow_unrecorded=options.allow_unrecorded,
            )
        except FetchError as exc:
            raise BuildError(f"build tool {wheel.name}: {exc}") from exc
        record.overrides.extend(o for o in fetched.overrides if o not in record.overrides)
        entries.append((fetched.path, fetched.sha256))
        record.inputs.append(
            Input("build-tool", wheel.filename, fetched.sha256, fetched.origin, wheel.requirement)
        )
    directory = context / "build-tools"
    _sync_dir(directory, {path.name for path, _ in entries})
    for path, _ in entries:
        _place(path, directory)
    requirements = render.requirements_text([(p.name, sha) for p, sha in entries], "/tmp/atomdyn/build-tools")
    _write_if_changed(context / "requirements-build.txt", requirements)


def _shim_source(lock: Lock, options: BuildOptions) -> Path:
    if options.shim_source is not None:
        source = options.shim_source
    elif lock.path is not None:
        source = lock.path.parent / "packages" / "dmabuf-shim"
    else:
        raise BuildError("no dmabuf-shim source: pass --shim-source DIR (packages/dmabuf-shim)")
    if not (source / "pyproject.toml").is_file():
        raise BuildError(
            f"{source} is not the dmabuf-shim source (no pyproject.toml): pass --shim-source DIR"
        )
    return source


def _stage_shim_source(source: Path, context: Path, record: BuildRecord) -> None:
    """A copy of the dmabuf-shim source; copy2 keeps mtimes, so an unchanged source stays cached."""
    target = context / "sources" / "dmabuf-shim"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=_SHIM_SOURCE_IGNORE, copy_function=shutil.copy2)
    digest = hashlib.sha256()
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(target)}\0".encode() + path.read_bytes())
    record.inputs.append(
        Input("source", "dmabuf-shim", digest.hexdigest(), f"local:{source}", "built in the image")
    )


def _stage_source(
    lock: Lock,
    name: str,
    options: BuildOptions,
    record: BuildRecord,
    patches: list[patching.Patch],
    extract: bool = True,
) -> None:
    source = lock.sources.get(name)
    if source is None:
        raise BuildError(f"release-lock.json has no source {name!r}")
    try:
        archive = sources.fetch_source(
            source,
            options.workdir / "cache" / "sources",
            mirror=options.source_mirror,
            allow_unrecorded=options.allow_unrecorded,
        )
    except FetchError as exc:
        raise BuildError(str(exc)) from exc
    record.overrides.extend(o for o in archive.overrides if o not in record.overrides)
    record.inputs.append(Input("source", name, archive.sha256, archive.origin, source.commit))
    if not extract:
        return  # verified and recorded; the stand-in native stage does not compile it
    tree = options.workdir / "overlay" / "sources" / name
    stamp = options.workdir / "overlay" / "sources" / f".{name}.stamp"
    wanted = f"{archive.sha256} {patching.series_digest(patches)}\n"
    if tree.is_dir() and stamp.is_file() and stamp.read_text() == wanted:
        return  # unchanged archive and series: keep the tree (and the build cache) as it is
    tree.parent.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    patching.extract_archive(archive.path, tree)
    patching.apply_series(tree, patches)
    atomic_write_text(stamp, wanted)


def _stage_subprojects(options: BuildOptions, tree: Path, record: BuildRecord) -> None:
    if options.network != "none":
        return  # meson downloads them (checking its wrap hashes); the network is in the labels and record
    if options.subprojects is None:
        raise BuildError(
            "the overlay's native stage builds without network, so NIXL's meson subprojects must come from "
            "--subprojects DIR (fill it with `atomdyn-images subprojects SRC --out DIR`); "
            "or let meson download them with --network host (an override, recorded)"
        )
    try:
        staged = subprojects.stage_packagecache(tree, options.subprojects)
    except subprojects.SubprojectError as exc:
        raise BuildError(str(exc)) from exc
    for archive in staged:
        origin = f"local:{options.subprojects / archive.filename}"
        record.inputs.append(
            Input("subproject", archive.filename, archive.sha256, origin, archive.subproject)
        )


def stage_overlay(lock: Lock, options: BuildOptions, record: BuildRecord) -> Path:
    context = options.workdir / "overlay"
    patches = patching.read_series(options.patches)
    for patch in patches:
        record.inputs.append(Input("patch", patch.name, patch.sha256, str(patch.path)))
    ropts = options.render_options("overlay")
    dockerfile_text = render.render_overlay(lock, ropts, [p.name for p in patches])
    nixl_compat = _compat_wheel(options, NIXL_COMPAT)
    _stage_wheel_tags(context)
    _stage_source(lock, "nixl", options, record, patches)
    _stage_source(lock, "ucx", options, record, [], extract=options.native == "source")
    if options.native == "source":
        _stage_build_tools(lock, options, context, record)
        _stage_shim_source(_shim_source(lock, options), context, record)
        _stage_subprojects(options, context / "sources" / "nixl", record)
    else:
        shim = _compat_wheel(options, DMABUF_SHIM)
        sha = _sha256_bytes(shim.read_bytes())
        record.inputs.append(Input("wheel", shim.name, sha, f"local:{shim}", "built on the host (stand-in)"))
        _stand_in_native(context, lock.sources["nixl"].version or "0.0.0", shim)
    wheels_dir = context / "wheels-overlay"
    _sync_dir(wheels_dir, {nixl_compat.name})
    _place(nixl_compat, wheels_dir)
    sha = _sha256_bytes(nixl_compat.read_bytes())
    record.inputs.append(
        Input("wheel", nixl_compat.name, sha, f"local:{nixl_compat}", "built from packages/")
    )
    _write_if_changed(
        context / "requirements-overlay.txt",
        render.requirements_text([(nixl_compat.name, sha)], "/tmp/atomdyn/wheels"),
    )
    dockerfile = context / "Dockerfile"
    _write_if_changed(dockerfile, dockerfile_text)
    return dockerfile


def build_staged(
    docker: Docker,
    dockerfile: Path,
    target: str,
    tag: str,
    lock: Lock,
    network: str,
    check_labels: Callable[[str, dict[str, str]], None] | None = None,
) -> ImageRecord:
    """Build, check the labels carry this lock (and pass ``check_labels(image_id, labels)``), then tag; a failure
    leaves no tag behind."""
    result: BuildResult = docker.build(dockerfile.parent, dockerfile, network=network)
    labels = docker.labels(result.image_id)
    if labels.get("io.atomdyn.lock.digest") != lock.digest:
        raise DockerError(f"{target} image {result.image_id} lacks the lock digest label; not tagging it")
    if check_labels is not None:
        check_labels(result.image_id, labels)
    docker.tag(result.image_id, tag)
    return ImageRecord(
        target=target,
        image_id=result.image_id,
        tags=[tag],
        dockerfile_sha256=_sha256_bytes(dockerfile.read_bytes()),
        seconds=round(result.seconds, 3),
        steps=result.steps,
        all_cached=result.all_cached,
    )


def build(lock: Lock, options: BuildOptions, docker: Docker) -> BuildRecord:
    unknown = set(options.targets) - {"base", "overlay"}
    if unknown or not options.targets:
        raise BuildError(f"targets must be base and/or overlay (got {', '.join(options.targets) or 'none'})")
    server = docker.ping()
    record = BuildRecord(
        lock_digest=lock.digest,
        lock_path=str(lock.path or ""),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        docker_server=server,
        overrides=sorted({o for target in options.targets for o in options.overrides(target)}),
        rehearsal=options.rehearsal,
    )
    record_path = options.workdir / "build-record.json"
    try:
        _build_targets(lock, options, docker, record)
    except Exception as exc:
        # A failed build replaces the previous record, so no stale success is left to be read.
        record.error = f"{type(exc).__name__}: {exc}"
        atomic_write_json(record_path, record.to_json())
        raise
    atomic_write_json(record_path, record.to_json())
    return record


def check_base_vllm(
    lock: Lock, options: BuildOptions, record: BuildRecord, image_id: str, labels: dict[str, str]
) -> None:
    """The ATOM base must be a vLLM image of the lock's vLLM commit, by its VLLM_COMMIT_LABEL.

    A label naming another commit is refused. No label (a native ATOM tag, without vLLM) is refused too, unless
    the base is an override (--base, recorded) or the build a rehearsal. What was found goes into the record.
    """
    found = labels.get(VLLM_COMMIT_LABEL, "").strip().lower()
    record.base_vllm_commit = found
    base = render.base_reference(lock, options.render_options("base"))
    source = lock.sources.get("vllm")
    if found:
        if source is not None and not same_commit(found, source.commit):
            raise DockerError(
                f"base image {base} carries vLLM {found} ({VLLM_COMMIT_LABEL}), but the lock's sources.vllm is "
                f"{source.commit}; not tagging {image_id}"
            )
        return
    if not options.base and not options.rehearsal:
        raise DockerError(
            f"base image {base} carries no {VLLM_COMMIT_LABEL} label (a native ATOM tag, built without vLLM?): "
            "build on one of ATOM's vllm-v<version>-nightly_<date> images, or record an override with --base IMAGE; "
            f"not tagging {image_id}"
        )


def _build_targets(lock: Lock, options: BuildOptions, docker: Docker, record: BuildRecord) -> None:
    base_tag = render.release_tag(lock, rehearsal=options.rehearsal)
    if "base" in options.targets:
        dockerfile = stage_base(lock, options, record)

        def check(image_id: str, labels: dict[str, str]) -> None:
            check_base_vllm(lock, options, record, image_id, labels)

        record.images.append(
            build_staged(docker, dockerfile, "base", base_tag, lock, options.network, check_labels=check)
        )
    if "overlay" in options.targets:
        if docker.image_id(base_tag) is None:
            raise BuildError(f"the overlay builds on {base_tag}, which does not exist: build the base first")
        dockerfile = stage_overlay(lock, options, record)
        tag = render.release_tag(lock, render.OVERLAY_SUFFIX, rehearsal=options.rehearsal)
        record.images.append(build_staged(docker, dockerfile, "overlay", tag, lock, options.network))


def write_rendered(lock: Lock, options: BuildOptions, out_dir: Path) -> list[Path]:
    """Render the Dockerfiles (no fetching, no daemon) for review and linting.

    Without --atom-variant and with several ATOM wheels in the lock, one base Dockerfile per variant.
    """
    patches = [p.name for p in patching.read_series(options.patches)]
    variants = [options.atom_variant]
    if not options.atom_variant:
        variants = sorted(w.variant or w.name for w in lock.wheels.values() if w.project == "atom") or [""]
    rendered = []
    for variant in variants:
        base_options = dataclasses.replace(options, atom_variant=variant).render_options("base")
        name = "Dockerfile.base" if len(variants) == 1 else f"Dockerfile.base-{variant}"
        rendered.append((name, render.render_base(lock, base_options)))
    rendered.append(
        ("Dockerfile.overlay", render.render_overlay(lock, options.render_options("overlay"), patches))
    )
    written = []
    for name, text in rendered:
        path = out_dir / name
        atomic_write_bytes(path, text.encode("utf-8"))
        written.append(path)
    return written
