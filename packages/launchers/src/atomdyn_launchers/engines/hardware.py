"""The hardware platform a node's fingerprint shows, only where its independent probes agree (issue 36, item 2).

A fingerprint (``atomdyn_core.fingerprint``) holds what several probes reported on the node. A hardware label
needs all of them to say the same, each name matched exactly (no substring, no case folding) against a table
of known products:

- AMD: the management tool's GPU names (``amd-smi static`` or ``rocm-smi``), the ROCm runtime's GPU agents
  (``rocminfo``: marketing name and gfx target), and the amdgpu kernel module; every GPU the same product, the
  runtime's gfx target the product's, and any gfx target a management tool gave the same.
- NVIDIA: ``nvidia-smi``'s GPU names with its driver version, and ``nvidia-smi``'s banner (the CUDA version).

A probe that is absent, failed, or gave a value of the wrong type, a name not in the table, or two probes that
disagree give ``unknown (<why>), not MI355X``, never a product: the provenance gate fails such a run. The
words of a label are the table's, never a string the node supplied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MI355X = "MI355X"
NOT_MI355X = "not MI355X"

# Exact names as the tools print them -> (short name, gfx target). rocm-smi's "Card Series" adds the form
# factor (OAM) where amd-smi's market_name and rocminfo's "Marketing Name" do not.
AMD_PRODUCTS: dict[str, tuple[str, str]] = {
    f"AMD Instinct {model}{suffix}": (model, gfx)
    for model, gfx in (
        ("MI355X", "gfx950"),
        ("MI350X", "gfx950"),
        ("MI325X", "gfx942"),
        ("MI300X", "gfx942"),
        ("MI300A", "gfx942"),
        ("MI250X", "gfx90a"),
        ("MI210", "gfx90a"),
    )
    for suffix in ("", " OAM")
}
NVIDIA_PRODUCTS: dict[str, str] = {
    "NVIDIA H200": "H200",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA H100 80GB HBM3": "H100",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA GH200 480GB": "GH200",
    "NVIDIA B200": "B200",
    "NVIDIA A100-SXM4-80GB": "A100",
    "NVIDIA A100-SXM4-40GB": "A100",
    "NVIDIA A100 80GB PCIe": "A100",
    "NVIDIA L40S": "L40S",
}


class _Unknown(Exception):
    """Why the probes do not name one product."""


def _ok(probes: Mapping[str, Any], name: str) -> bool:
    return probes.get(name) == "ok"


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise _Unknown(f"{what} is not a list of names")
    return list(value)


def _one(found: set[str], what: str) -> str:
    if len(found) != 1:
        raise _Unknown(f"{what} name {len(found)} products")
    return next(iter(found))


def _amd(fingerprint: Mapping[str, Any], probes: Mapping[str, Any]) -> str:
    amd = fingerprint.get("amd")
    if not isinstance(amd, Mapping):
        raise _Unknown("no AMD probe data")
    if not (_ok(probes, "amd-smi static") or _ok(probes, "rocm-smi")):
        raise _Unknown("neither amd-smi nor rocm-smi answered")
    names = _strings(amd.get("gpus"), "the GPU list")
    unknown = sorted({n for n in names if n not in AMD_PRODUCTS})
    if unknown:
        raise _Unknown(f"{len(unknown)} GPU name(s) not a known product")
    model = _one({AMD_PRODUCTS[n][0] for n in names}, "the GPUs")
    gfx = next(g for m, g in AMD_PRODUCTS.values() if m == model)
    if (
        not _ok(probes, "amdgpu_module")
        or not isinstance(amd.get("amdgpu_driver"), str)
        or not amd["amdgpu_driver"]
    ):
        raise _Unknown("the amdgpu driver was not seen")
    if "gfx" in amd and _strings(amd["gfx"], "the gfx targets") != [gfx]:
        raise _Unknown(f"the management tool's gfx targets are not {model}'s {gfx}")
    runtime = amd.get("runtime")
    if not _ok(probes, "rocminfo") or not isinstance(runtime, Mapping):
        raise _Unknown("the ROCm runtime (rocminfo) was not probed")
    marketing = _strings(runtime.get("marketing_names"), "the runtime's GPU list")
    if {AMD_PRODUCTS.get(n, ("?", ""))[0] for n in marketing} != {model}:
        raise _Unknown(f"the ROCm runtime's GPUs are not all {model}")
    if _strings(runtime.get("gfx"), "the runtime's gfx targets") != [gfx]:
        raise _Unknown(f"the ROCm runtime's gfx targets are not {model}'s {gfx}")
    return MI355X if model == MI355X else f"{model} (AMD), {NOT_MI355X}"


def _nvidia(fingerprint: Mapping[str, Any], probes: Mapping[str, Any]) -> str:
    nvidia = fingerprint.get("nvidia")
    if not isinstance(nvidia, Mapping) or not _ok(probes, "nvidia-smi"):
        raise _Unknown("nvidia-smi did not answer")
    gpus = nvidia.get("gpus")
    if not isinstance(gpus, list) or not gpus or not all(isinstance(g, Mapping) for g in gpus):
        raise _Unknown("the GPU list is not a list of GPUs")
    names = _strings([g.get("name") for g in gpus], "the GPU list")
    unknown = sorted({n for n in names if n not in NVIDIA_PRODUCTS})
    if unknown:
        raise _Unknown(f"{len(unknown)} GPU name(s) not a known product")
    model = _one({NVIDIA_PRODUCTS[n] for n in names}, "the GPUs")
    if not isinstance(nvidia.get("driver"), str) or not nvidia["driver"]:
        raise _Unknown("nvidia-smi gave no driver version")
    if not _ok(probes, "nvidia-smi banner") or not isinstance(nvidia.get("cuda_version"), str):
        raise _Unknown("nvidia-smi's banner (the CUDA version) was not seen")
    return f"{model} (NVIDIA), {NOT_MI355X}"


def hardware_label(fingerprint: Mapping[str, Any] | None) -> str:
    """``MI355X`` only where every probe of the node agrees on an MI355X; another known product where they
    agree on it; ``CPU (no GPU seen)`` where no probe saw a GPU; else ``unknown (<why>), not MI355X``."""
    if not fingerprint:
        return f"unknown (no fingerprint), {NOT_MI355X}"
    if not isinstance(fingerprint, Mapping):
        return f"unknown (the fingerprint is not an object), {NOT_MI355X}"
    probes = fingerprint.get("probes")
    if "error" in fingerprint or not isinstance(probes, Mapping):  # unreadable, or no record of its probes
        return f"unknown (the fingerprint records no probes), {NOT_MI355X}"
    accelerator = fingerprint.get("accelerator")
    amd, nvidia = fingerprint.get("amd"), fingerprint.get("nvidia")
    saw_amd = isinstance(amd, Mapping) and bool(amd.get("gpus"))
    saw_nvidia = isinstance(nvidia, Mapping) and bool(nvidia.get("gpus"))
    try:
        if saw_amd and saw_nvidia:
            raise _Unknown("both AMD and NVIDIA GPUs were reported")
        if accelerator == "amd" and saw_amd:
            return _amd(fingerprint, probes)
        if accelerator == "nvidia" and saw_nvidia:
            return _nvidia(fingerprint, probes)
        if accelerator is None and not saw_amd and not saw_nvidia:
            return f"CPU (no GPU seen), {NOT_MI355X}"
        raise _Unknown(f"the accelerator {accelerator!r} is not what the GPU probes reported")
    except _Unknown as why:
        return f"unknown ({why}), {NOT_MI355X}"


def is_unknown(label: str) -> bool:
    return label.startswith("unknown")
