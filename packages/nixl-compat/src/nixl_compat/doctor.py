"""`nixl-compat doctor`: which NIXL serves `rixl` here, which UCX, what it really used, known traps."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from pathlib import Path
from typing import Any

from nixl_compat._torch import import_torch
from nixl_compat.evidence import default_platform, evidence_labels
from nixl_compat.resolve import BackendResolutionError, distribution_of, probe_host, resolve_backend
from nixl_compat.selftest import run_selftest
from nixl_compat.ucxinfo import NETWORK_TLS, parse_proto_info

ROCM_TLS = ("rocm", "rocm_copy", "rocm_ipc")
NVIDIA_DRIVER = Path("/proc/driver/nvidia")  # the NVIDIA kernel driver's view: version, gpus/<bus id>/
VLLM_MIN_NIXL_ROCM = (1, 5, 0)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _gpu_count() -> int:
    if importlib.util.find_spec("torch") is None:
        return 0
    torch = import_torch()

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _gpu_device_api(module: str) -> bool | None:
    """Whether the backend's UCX has the device API (GPU-initiated transfers, the bench's device path)."""
    try:
        bindings = importlib.import_module(f"{module}._bindings")
    except ImportError:
        return None
    flag = getattr(bindings, "HAVE_UCX_GPU_DEVICE_API", None)
    return bool(flag) if flag is not None else None


def _backend_section() -> tuple[dict[str, Any], list[str]]:
    warnings: list[str] = []
    try:
        res = resolve_backend()
    except BackendResolutionError as exc:
        return {"error": str(exc)}, [f"no usable NIXL backend: {exc}"]
    section = {
        "module": res.module_name,
        "distribution": res.distribution,
        "version": res.version,
        "path": res.path,
        "forced": res.forced,
        "host": {"kind": res.host.kind, "reasons": list(res.host.reasons), "torch": res.host.torch_version},
        "candidates": [c.__dict__ for c in res.candidates],
        "nixl_meta_package_would_load": res.meta_choice,
        "gpu_device_api": _gpu_device_api(res.module_name),
    }
    if res.host.kind == "rocm" and res.module_name.startswith("nixl_cu"):
        warnings.append(
            f"CUDA backend {res.module_name} on a ROCm host (forced: {res.forced is not None}): "
            "its UCX has no ROCm transports, VRAM registration will fail or fall back to host copies"
        )
    if res.meta_choice and res.meta_choice != res.module_name:
        warnings.append(
            f"`import nixl` (the meta package) would load {res.meta_choice} here, not {res.module_name}: "
            "code that imports `nixl` directly (vLLM < 0.14 does) gets the wrong backend"
        )
    if res.module_name == "nixl_rocm" and res.version and _version_tuple(res.version) < VLLM_MIN_NIXL_ROCM:
        warnings.append(f"nixl_rocm {res.version} is older than 1.5.0: vLLM 0.33 refuses it")
    return section, warnings


def nvidia_warnings(host_kind: str, driver: Path = NVIDIA_DRIVER) -> list[str]:
    """A CUDA torch without the NVIDIA driver or its GPUs: the CUDA backend loads, VRAM cannot move."""
    if host_kind != "cuda":
        return []
    if not (driver / "version").is_file():
        return [
            f"torch is a CUDA build but no NVIDIA kernel driver is loaded ({driver / 'version'} is missing): "
            "only host memory can move here; VRAM registration and the CUDA self-test cannot run"
        ]
    gpus = driver / "gpus"
    if not gpus.is_dir() or not any(gpus.iterdir()):
        return [
            f"torch is a CUDA build and the NVIDIA driver is loaded, but it lists no GPU ({gpus} is empty): "
            "only host memory can move here"
        ]
    return []


def _shadow_warnings() -> list[str]:
    out = []
    try:
        importlib.metadata.distribution("rixl")
        out.append(
            "a distribution named `rixl` is installed: PyPI's `rixl` is an unrelated project; uninstall it"
        )
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("rixl")
    dist, _ = distribution_of("rixl")
    here = Path(__file__).resolve().parent.parent
    if spec is not None and spec.origin and not Path(spec.origin).resolve().is_relative_to(here):
        out.append(f"`rixl` resolves to {spec.origin} (distribution {dist}), not to nixl-compat's module")
    return out


def relevant(choices: list[dict[str, Any]], mem: str) -> list[dict[str, Any]]:
    """UCX prints tables for every memory-type pair it might meet; keep the pair the self-test moved."""
    other = "cuda" if mem == "DRAM" else "host"
    return [c for c in choices if c["scope"] != "self" and other not in c["operation"]]


def _ucx_warnings(choices: list[dict[str, Any]], expect: tuple[str, ...], host_kind: str | None) -> list[str]:
    out = []
    bulk = [
        c
        for c in choices
        if c["scope"] != "self" and ("ucp_put" in c["operation"] or "ucp_get" in c["operation"])
    ]
    tcp = sorted({t for c in bulk for t in c["transports"] if t.startswith("tcp/")})
    if tcp:
        out.append(
            f"bulk transfers (put/get) went over TCP ({', '.join(tcp)}): expect a fraction of the bandwidth"
        )
    used = sorted(
        {
            t.split("/", 1)[1]
            for c in choices
            if c["scope"] != "self"
            for t in c["transports"]
            if t.split("/", 1)[0] in NETWORK_TLS
        }
    )
    if expect:
        # UCX_NET_DEVICES names a device with its port (ionic_0:1) or without (eth0); UCX names it with one.
        odd = [d for d in used if d not in expect and d.split(":")[0] not in expect]
        if odd:
            out.append(f"UCX used network device(s) {', '.join(odd)}; expected only {', '.join(expect)}")
    elif used and not os.environ.get("UCX_NET_DEVICES"):
        out.append(
            f"UCX_NET_DEVICES is unset and UCX picked {', '.join(used)}: set it to the NIC the peer must use"
        )
    tls = os.environ.get("UCX_TLS", "")
    if host_kind == "rocm" and tls and not any(t in tls.split(",") for t in ROCM_TLS):
        out.append(f"UCX_TLS={tls} names no ROCm transport: VRAM will be 'detected as host' by UCX")
    return out


def _gpu_names(count: int) -> list[str]:
    if not count:
        return []
    torch = import_torch()

    return [str(torch.cuda.get_device_name(i)) for i in range(count)]


def run_doctor(
    device: str = "auto",
    expect_net_devices: tuple[str, ...] = (),
    timeout_s: float = 60.0,
    platform: str | None = None,
) -> dict[str, Any]:
    gpus = 0 if device == "cpu" else _gpu_count()
    if device == "cuda" and gpus == 0:
        raise RuntimeError("doctor --device cuda: torch sees no CUDA GPU")
    backend, warnings = _backend_section()
    warnings += nvidia_warnings(probe_host().kind)
    warnings += _shadow_warnings()
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(("UCX_", "NIXL_"))}
    report: dict[str, Any] = {
        "schema": "nixl-compat-doctor/1",
        **evidence_labels(platform or default_platform(_gpu_names(gpus))),
        "backend": backend,
        "environment": env,
        "selftest": {},
        "warnings": warnings,
    }
    if "error" in backend:
        report["selftest"] = {"skipped": "no backend"}
        return report
    devices = ["cpu"] + (["cuda"] if gpus else [])
    tests: dict[str, Any] = {}
    for dev in devices:
        # VRAM: GPU0 -> GPU1 when there are two, the path a P/D pair on one node takes.
        result = run_selftest(dev, 0, 1 if dev == "cuda" and gpus > 1 else 0, timeout_s=timeout_s)
        mem = "DRAM" if dev == "cpu" else "VRAM"
        choices = relevant([c.as_dict() for c in parse_proto_info(result.pop("proto_text", ""))], mem)
        result["protocols"] = choices
        tests[mem] = result
        warnings += [
            f"{mem} self-test: {w}"
            for w in _ucx_warnings(choices, expect_net_devices, backend["host"]["kind"])
        ]
        if not result.get("ok"):
            warnings.append(f"{dev} self-test failed: {result.get('error', 'content mismatch')}")
    first = next(iter(tests.values()))
    report["ucx"] = {
        "version": first.get("ucx_version"),
        "library": first.get("ucx_library"),
        "transport_modules": first.get("ucx_transport_modules", []),
        "nixl_plugins": first.get("plugins", []),
        "ucx_mem_types": first.get("ucx_mem_types", []),
    }
    if backend["host"]["kind"] == "rocm" and not any(
        m.startswith("rocm") for m in report["ucx"]["transport_modules"]
    ):
        warnings.append(
            "the UCX loaded here ships no ROCm transport module: AMD GPU memory cannot move over it"
        )
    report["selftest"] = {"ok": all(t.get("ok") for t in tests.values()), **tests}
    return report


def format_report(report: dict[str, Any]) -> str:
    b = report["backend"]
    lines = []
    if "error" in b:
        lines.append(f"backend: ERROR\n{b['error']}")
    else:
        lines.append(f"backend: {b['module']} {b['version']} ({b['distribution']}) at {b['path']}")
        lines.append(f"host: {b['host']['kind']} ({'; '.join(b['host']['reasons'])})")
        api = {True: "yes", False: "no", None: "unknown"}[b.get("gpu_device_api")]
        lines.append(f"GPU-initiated transfers (UCX device API): {api}")
        for c in b["candidates"]:
            lines.append(f"  {c['module']:<10} {c['status']:<9} {c['reason']}")
    ucx = report.get("ucx", {})
    if ucx:
        lines.append(
            f"UCX {ucx['version']} at {ucx['library']}; modules: {', '.join(ucx['transport_modules'])}"
        )
        lines.append(
            f"NIXL plugins: {', '.join(ucx['nixl_plugins'])}; "
            f"UCX memory types: {', '.join(ucx['ucx_mem_types'])}"
        )
    for mem, t in report["selftest"].items():
        if isinstance(t, dict):
            used = sorted({tr for p in t.get("protocols", []) for tr in p["transports"]})
            verdict = "ok" if t.get("ok") else f"FAILED {t.get('error', '')}"
            lines.append(f"self-test {mem}: {verdict}; transports used: {', '.join(used)}")
    lines.extend(f"WARNING: {w}" for w in report["warnings"])
    return "\n".join(lines)
