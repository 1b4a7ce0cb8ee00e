"""Deterministic Dockerfile rendering from the release lock: same lock and options, same bytes.

Nothing time- or host-dependent goes into a Dockerfile (build times and image ids live in the build record), so
the renderer's output can be committed, diffed and hadolint-checked, and an unchanged tree rebuilds from cache.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from atomdyn_core.lock import Lock, Source, UnrecordedHashError, Wheel
from atomdyn_images.validator import VLLM_COMMIT_KEY

BASE_IMAGE_KEY = "atom_base"
BASE_WHEELS = ("ai-dynamo", "ai-dynamo-runtime")
NATIVE_MODES = ("source", "stand-in")
NETWORKS = ("none", "host", "default")
# The overlay's native stage installs its build tools (meson, ninja, pybind11, cmake, scikit-build-core ...)
# from lock entries with this role, by hash, into their own directory: nothing in that stage reaches the image.
BUILD_TOOLS_ROLE = "image-overlay"
BUILD_TOOLS_DIR = "/opt/atomdyn-build"
# Every wheel is checked against the image's own Python before pip sees it (atomdyn_images.wheeltags).
WHEEL_TAGS = "python3 /tmp/atomdyn/wheeltags.py"
WHEEL_TAGS_MOUNT = "--mount=type=bind,source=tools/wheeltags.py,target=/tmp/atomdyn/wheeltags.py"
UCX_PREFIX = "/opt/ucx"
_REFERENCE = re.compile(r"[a-z0-9][a-z0-9._/:-]*(@sha256:[0-9a-f]{64})?")


class RenderError(ValueError):
    """The lock or the options cannot produce a Dockerfile; the message names the problem."""


@dataclass(frozen=True)
class RenderOptions:
    atom_variant: str = ""
    base_override: str = ""  # an image reference that replaces the lock's ATOM base (a stand-in, a mirror)
    native: str = "source"  # "stand-in" replaces the UCX/NIXL compile: tests only, shown in labels and record
    overrides: tuple[str, ...] = field(default_factory=tuple)  # every override in force, for the labels
    allow_unrecorded: bool = False  # an unrecorded base digest: FROM repository:tag instead of by digest
    rehearsal: bool = False  # stand-in inputs: a rehearsal label, and tags that cannot be taken for a release
    # The build's network. "none" (the default): NIXL's meson subprojects must be in the tree's packagecache
    # (meson runs with --wrap-mode=nodownload); anything else lets meson download them, and is an override.
    network: str = "none"


OVERLAY_SUFFIX = "-nixl-rocm"  # the overlay's repository is the base's with this suffix
REHEARSAL_LABEL = "io.atomdyn.rehearsal"
REHEARSAL_NOTE = "REHEARSAL: built from stand-in base and inputs; not for GPU nodes"


def release_tag(lock: Lock, suffix: str = "", rehearsal: bool = False) -> str:
    return f"{lock.release_name}{suffix}:{lock.release_version}{'-rehearsal' if rehearsal else ''}"


def base_reference(lock: Lock, options: RenderOptions) -> str:
    if options.base_override:
        if not _REFERENCE.fullmatch(options.base_override):
            raise RenderError(f"base override {options.base_override!r} is not an image reference")
        return options.base_override
    image = lock.images.get(BASE_IMAGE_KEY)
    if image is None:
        raise RenderError(f"release-lock.json has no image {BASE_IMAGE_KEY!r} ($.images.{BASE_IMAGE_KEY})")
    try:
        return image.reference
    except UnrecordedHashError as exc:
        if options.allow_unrecorded:
            return f"{image.repository}:{image.tag}"  # by tag: the override is in the labels and the record
        raise RenderError(
            f"{exc}; record its digest and labels with `nox -s update_lock -- --resolve-base` where the registry "
            "is reachable (it refuses an image whose com.rocm.atom.vllm_commit is not the lock's sources.vllm), "
            "or build on another base with an explicit --base override (or accept the tag with --allow-unrecorded)"
        ) from exc


def atom_wheel(lock: Lock, variant: str) -> Wheel:
    candidates = {w.variant or w.name: w for w in lock.wheels.values() if w.project == "atom"}
    if not candidates:
        raise RenderError("release-lock.json names no ATOM wheel (project 'atom')")
    if not variant:
        if len(candidates) == 1:
            return next(iter(candidates.values()))
        raise RenderError(
            f"the lock has several ATOM wheels ({', '.join(sorted(candidates))}): "
            "choose the one matching the base image's ROCm with --atom-variant"
        )
    if variant not in candidates:
        raise RenderError(
            f"no ATOM wheel variant {variant!r} in the lock (have: {', '.join(sorted(candidates))})"
        )
    return candidates[variant]


def base_wheels(lock: Lock, options: RenderOptions) -> list[Wheel]:
    missing = [name for name in BASE_WHEELS if name not in lock.wheels]
    if missing:
        raise RenderError(f"release-lock.json lacks wheels {', '.join(missing)} ($.wheels)")
    return [lock.wheels[name] for name in BASE_WHEELS] + [atom_wheel(lock, options.atom_variant)]


def expected_versions(lock: Lock, options: RenderOptions) -> str:
    """The validator's expectations, baked into the image (labels are not visible from inside a container)."""
    versions = {w.project: w.version for w in base_wheels(lock, options)}
    body: dict[str, object] = {
        "lock_digest": lock.digest,
        "release": lock.release_version,
        "versions": versions,
    }
    vllm = lock.sources.get("vllm")
    if vllm is not None:
        body[VLLM_COMMIT_KEY] = vllm.commit  # the validator's vllm-commit check compares the image's vLLM
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def _label_block(labels: dict[str, str]) -> str:
    lines = [f'      {key}="{value}"' for key, value in sorted(labels.items())]
    return "LABEL " + " \\\n".join(lines).lstrip() + "\n"


def _common_labels(lock: Lock, options: RenderOptions, title: str) -> dict[str, str]:
    labels = {
        "org.opencontainers.image.title": title,
        "org.opencontainers.image.version": lock.release_version,
        "org.opencontainers.image.base.name": base_reference(lock, options),
        "io.atomdyn.lock.digest": lock.digest,
        "io.atomdyn.overrides": ",".join(options.overrides) or "none",
        "io.atomdyn.build-network": options.network,
    }
    if options.rehearsal:
        labels[REHEARSAL_LABEL] = REHEARSAL_NOTE
    for name in ("dynamo", "atom", "vllm"):
        source = lock.sources.get(name)
        if source is not None:
            labels[f"io.atomdyn.{name}.commit"] = source.commit
            if source.version:
                labels[f"io.atomdyn.{name}.version"] = source.version
    return labels


def render_base(lock: Lock, options: RenderOptions) -> str:
    wheels = base_wheels(lock, options)
    labels = _common_labels(lock, options, lock.release_name)
    labels["org.opencontainers.image.description"] = (
        "ATOM base with the pinned Dynamo and ATOM wheels (--no-deps)"
    )
    for wheel in wheels:
        labels[f"io.atomdyn.wheel.{wheel.project}"] = (
            f"{wheel.filename} sha256:{wheel.sha256 or 'unrecorded'}"
        )
    return (
        f"# Rendered by atomdyn-images from release-lock.json ({lock.digest}); do not edit.\n"
        f"FROM {base_reference(lock, options)}\n"
        'SHELL ["/bin/sh", "-eu", "-c"]\n'
        "# Hashes are checked again here (pip --require-hashes) so the image never trusts the build context.\n"
        "# --no-deps keeps the ATOM image's ROCm, AITER, Triton and vLLM stack as it is.\n"
        "# Every wheel's tags are checked against this image's Python first (a wheel is never trusted).\n"
        f"RUN {WHEEL_TAGS_MOUNT} \\\n"
        "    --mount=type=bind,source=wheels,target=/tmp/atomdyn/wheels \\\n"
        "    --mount=type=bind,source=requirements-base.txt,target=/tmp/atomdyn/requirements.txt \\\n"
        f"    {WHEEL_TAGS} /tmp/atomdyn/wheels/*.whl \\\n"
        "    && python3 -m pip install --no-deps --no-index --no-cache-dir --require-hashes \\\n"
        "        -r /tmp/atomdyn/requirements.txt\n"
        "COPY validator/ /opt/atomdyn/\n"
        "COPY validator/atomdyn-validate /usr/local/bin/atomdyn-validate\n"
        f"{_label_block(labels)}"
    )


def _source(lock: Lock, name: str) -> Source:
    source = lock.sources.get(name)
    if source is None:
        raise RenderError(f"release-lock.json has no source {name!r} ($.sources.{name})")
    return source


def _native_from_source(options: RenderOptions) -> str:
    """UCX, the NIXL wheel and the dmabuf-shim wheel, compiled in the image for the image's own Python."""
    # No network: meson may only use subprojects already in the tree's packagecache, each checked by meson
    # against the hash in its wrap file (the tree itself is checked against the lock).
    wrap_mode = (
        "        --config-settings=setup-args=--wrap-mode=nodownload \\\n"
        if options.network == "none"
        else ""
    )
    return (
        "FROM base AS build-tools\n"
        "# Build tools from the lock (hash-checked, tags checked against this Python), in a directory of their\n"
        "# own: NIXL's build isolation would pull a CUDA torch, and nothing of these stages reaches the image.\n"
        f"RUN {WHEEL_TAGS_MOUNT} \\\n"
        "    --mount=type=bind,source=build-tools,target=/tmp/atomdyn/build-tools \\\n"
        "    --mount=type=bind,source=requirements-build.txt,target=/tmp/atomdyn/requirements.txt \\\n"
        f"    {WHEEL_TAGS} /tmp/atomdyn/build-tools/*.whl \\\n"
        "    && python3 -m pip install --no-deps --no-index --no-cache-dir --require-hashes \\\n"
        f"        --target {BUILD_TOOLS_DIR} -r /tmp/atomdyn/requirements.txt\n"
        "# From here on `python3 -m pip` is the lock's pip too (PYTHONPATH first), whatever the image's is.\n"
        f"ENV PATH={BUILD_TOOLS_DIR}/bin:$PATH PYTHONPATH={BUILD_TOOLS_DIR}\n"
        "\n"
        "# The dma-buf helper's wheel from this repository's source, for this image's Python; a stage of its own\n"
        "# (`--target shim` builds it alone, on any base with a C++ compiler).\n"
        "FROM build-tools AS shim\n"
        "COPY sources/dmabuf-shim /src/dmabuf-shim\n"
        "RUN python3 -m pip wheel --no-deps --no-build-isolation --no-index --wheel-dir /opt/compat-wheels \\\n"
        f"        --config-settings=cmake.define.pybind11_DIR={BUILD_TOOLS_DIR}/pybind11/share/cmake/pybind11 \\\n"
        "        /src/dmabuf-shim\n"
        "\n"
        "FROM build-tools AS native\n"
        "COPY sources/ucx /src/ucx\n"
        "WORKDIR /src/ucx\n"
        "RUN ./autogen.sh \\\n"
        f"    && ./contrib/configure-release --prefix={UCX_PREFIX} --with-rocm=/opt/rocm --with-verbs --enable-mt \\\n"
        '    && make -j"$(nproc)" \\\n'
        "    && make install\n"
        "# The series in patches/ was applied to this tree on the host (atomdyn-images patch), in order.\n"
        "COPY sources/nixl /src/nixl\n"
        "WORKDIR /src/nixl\n"
        "RUN python3 contrib/tomlutil.py --wheel-name nixl-rocm pyproject.toml \\\n"
        "    && python3 -m pip wheel --no-deps --no-build-isolation --no-index --wheel-dir /opt/nixl-wheels \\\n"
        "        --config-settings=setup-args=-Dwheel_variant=rocm \\\n"
        f"        --config-settings=setup-args=-Ducx_path={UCX_PREFIX} \\\n"
        "        --config-settings=setup-args=-Dbuild_tests=false \\\n"
        "        --config-settings=setup-args=-Dbuild_examples=false \\\n"
        f"{wrap_mode}"
        "        .\n"
        "COPY --from=shim /opt/compat-wheels /opt/compat-wheels\n"
    )


def _native_stand_in() -> str:
    return (
        "# STAND-IN native stage (tests only): the UCX/NIXL compile is replaced by prebuilt stand-in outputs.\n"
        "FROM base AS native\n"
        "COPY sources/nixl /src/nixl\n"
        f"COPY stand-in/ucx {UCX_PREFIX}\n"
        "COPY stand-in/nixl-wheels /opt/nixl-wheels\n"
        "# The dmabuf-shim wheel was built on the host (its tags are still checked against this image's Python).\n"
        "COPY stand-in/compat-wheels /opt/compat-wheels\n"
    )


def render_overlay(lock: Lock, options: RenderOptions, patches: list[str]) -> str:
    if options.native not in NATIVE_MODES:
        raise RenderError(f"native stage must be one of {', '.join(NATIVE_MODES)} (got {options.native!r})")
    if options.network not in NETWORKS:
        raise RenderError(f"build network must be one of {', '.join(NETWORKS)} (got {options.network!r})")
    ucx, nixl = _source(lock, "ucx"), _source(lock, "nixl")
    labels = _common_labels(lock, options, f"{lock.release_name}-nixl-rocm")
    labels["org.opencontainers.image.description"] = (
        "NIXL (nixl_rocm) on ROCm UCX over the ATOM + Dynamo base"
    )
    labels["io.atomdyn.ucx.commit"] = ucx.commit
    labels["io.atomdyn.nixl.commit"] = nixl.commit
    labels["io.atomdyn.patches"] = ",".join(patches) or "none"
    labels["io.atomdyn.native-stage"] = options.native
    native = _native_from_source(options) if options.native == "source" else _native_stand_in()
    return (
        f"# Rendered by atomdyn-images from release-lock.json ({lock.digest}); do not edit.\n"
        f"FROM {release_tag(lock, rehearsal=options.rehearsal)} AS base\n"
        'SHELL ["/bin/sh", "-eu", "-c"]\n'
        "\n"
        f"{native}"
        "\n"
        "FROM base\n"
        'SHELL ["/bin/sh", "-eu", "-c"]\n'
        f"COPY --from=native {UCX_PREFIX} {UCX_PREFIX}\n"
        "# nixl_rocm and dmabuf-shim from the native stage, then nixl-compat: every wheel's tags checked\n"
        "# against this image's Python, the context's wheels installed by hash.\n"
        f"RUN {WHEEL_TAGS_MOUNT} \\\n"
        "    --mount=type=bind,from=native,source=/opt/nixl-wheels,target=/tmp/atomdyn/nixl-wheels \\\n"
        "    --mount=type=bind,from=native,source=/opt/compat-wheels,target=/tmp/atomdyn/compat-wheels \\\n"
        "    --mount=type=bind,source=wheels-overlay,target=/tmp/atomdyn/wheels \\\n"
        "    --mount=type=bind,source=requirements-overlay.txt,target=/tmp/atomdyn/requirements.txt \\\n"
        f"    {WHEEL_TAGS} /tmp/atomdyn/nixl-wheels/*.whl /tmp/atomdyn/compat-wheels/*.whl /tmp/atomdyn/wheels/*.whl \\\n"
        "    && python3 -m pip install --no-deps --no-index --no-cache-dir \\\n"
        "        /tmp/atomdyn/nixl-wheels/*.whl /tmp/atomdyn/compat-wheels/*.whl \\\n"
        "    && python3 -m pip install --no-deps --no-index --no-cache-dir --require-hashes \\\n"
        "        -r /tmp/atomdyn/requirements.txt\n"
        f"ENV LD_LIBRARY_PATH={UCX_PREFIX}/lib${{LD_LIBRARY_PATH:+:${{LD_LIBRARY_PATH}}}}\n"
        f"{_label_block(labels)}"
    )


def requirements_text(entries: list[tuple[str, str]], directory: str) -> str:
    """pip requirements naming local wheel files with their sha256 (pip refuses any file that differs)."""
    lines = [f"{directory}/{filename} --hash=sha256:{sha256}" for filename, sha256 in sorted(entries)]
    return "\n".join(lines) + "\n"
