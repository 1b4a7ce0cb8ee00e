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

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_launchers.diagnose.lines import numbered_lines
from atomdyn_launchers.profiles.models import ProfileError, get_model

MI355X = "MI355X"
NOT_MI355X = "not MI355X"
MI355X_PLATFORM = "rocm"  # the vLLM platform an MI355X runs (ATOM's is a ROCm platform)
CPU_LABEL = "CPU (no GPU seen)"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # Dynamo colours its log even into files

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
            return f"{CPU_LABEL}, {NOT_MI355X}"
        raise _Unknown(f"the accelerator {accelerator!r} is not what the GPU probes reported")
    except _Unknown as why:
        return f"unknown ({why}), {NOT_MI355X}"


def is_unknown(label: str) -> bool:
    return label.startswith("unknown")


# What a worker logged about the platform vLLM chose and the model it loaded (issue 36, item 2): each line as
# vLLM or ATOM prints it at INFO, the level the workers log at.
# - vllm/v1/engine/core.py: "Initializing a V1 LLM engine (v%s) with config: %s", the config being VllmConfig's
#   __str__ ("model=%r, ... device_config=<torch device type>, ... served_model_name=<name>, ..."). The device
#   type is "cpu" on vLLM's CPU platform and "cuda" on its CUDA and ROCm platforms alike (RocmPlatform's
#   device_type is "cuda"): it tells a CPU from a GPU, not CUDA from ROCm.
# - vllm/platforms/__init__.py: "Platform plugin %s is activated" where an out-of-tree platform took over; ATOM
#   registers one named "atom" (its pyproject's vllm.platform_plugins entry point at the pinned f9017b58) whose
#   class, atom.plugin.vllm.platform.ATOMPlatform, is a RocmPlatform.
# - vllm/platforms/cuda.py: "Using %s attention backend out of potential backends: %s" (CudaPlatform choosing
#   the attention backend; ROCm's says "Using %s backend out of potential backends", without "attention").
# vLLM's "Automatically detected platform %s." is DEBUG at the pin (the H200 runs' worker logs hold none).
ENGINE_CONFIG_LINE = "Initializing a V1 LLM engine"
PLATFORM_PLUGIN_LINE = "Platform plugin "
CUDA_ATTENTION_LINE = "attention backend out of potential backends"
PROBE_NEEDLES = (ENGINE_CONFIG_LINE, PLATFORM_PLUGIN_LINE, CUDA_ATTENTION_LINE)
# The out-of-tree platforms whose class is a vLLM platform of a known kind.
PLATFORM_PLUGINS = {"atom": "rocm"}
# The vLLM platform a hardware label's GPUs need: what the workers must have logged.
_LABEL_PLATFORM = (("(NVIDIA), " + NOT_MI355X, "cuda"), ("(AMD), " + NOT_MI355X, "rocm"))

_CONFIG_MODEL = re.compile(r" with config: model='((?:[^'\\]|\\.)*)', ")
_CONFIG_DEVICE = re.compile(r", device_config=([a-z]+), ")
_CONFIG_SERVED = re.compile(r", served_model_name=([^,\s]+), ")
_PLUGIN = re.compile(r"\] Platform plugin (\S+) is activated$")
# The word before the backend is left free: bundles collected before the sanitizer's fix (6d4b3d2) read Dynamo's
# "ensure_side_channel_host: Using existing ..." as a host name and say "host-N" for every "Using" of a log.
_CUDA_ATTENTION = re.compile(r"\[cuda\.py:\d+\] \S+ \S+ attention backend out of potential backends: ")


@dataclass
class WorkerProbe:
    """What one role's worker logs said: the vLLM platforms its lines show ("cuda", "rocm", "cpu", or
    "gpu" for a device type shared by CUDA and ROCm) and the models its engine loaded (path, served name)."""

    platforms: set[str] = field(default_factory=set)
    models: set[tuple[str, str]] = field(default_factory=set)
    lines: int = 0

    def add_line(self, line: str) -> None:
        """Take one log line (colour codes removed); lines that say nothing of the platform are ignored."""
        line = line.rstrip("\r\n")
        if ENGINE_CONFIG_LINE in line:
            model, device = _CONFIG_MODEL.search(line), _CONFIG_DEVICE.search(line)
            served = _CONFIG_SERVED.search(line)
            if model and device and served:
                self.lines += 1
                self.platforms.add({"cpu": "cpu", "cuda": "gpu"}.get(device.group(1), device.group(1)))
                self.models.add((model.group(1), served.group(1)))
        elif PLATFORM_PLUGIN_LINE in line and (found := _PLUGIN.search(line)):
            self.lines += 1
            self.platforms.add(PLATFORM_PLUGINS.get(found.group(1), f"plugin {found.group(1)}"))
        elif CUDA_ATTENTION_LINE in line and _CUDA_ATTENTION.search(line):
            self.lines += 1
            self.platforms.add("cuda")

    @property
    def empty(self) -> bool:
        """Nothing of the platform or the model was logged."""
        return not (self.platforms or self.models)

    def platform(self) -> str:
        """The one vLLM platform the lines show, or raise :class:`_Unknown` naming what is absent or differs."""
        if not self.platforms:
            raise _Unknown("no vLLM platform logged")
        named = self.platforms - {"gpu"}
        if "gpu" in self.platforms and not named:
            raise _Unknown("vLLM logged a GPU device but neither CUDA's nor ROCm's platform")
        if len(named) != 1 or ("gpu" in self.platforms and named == {"cpu"}):
            raise _Unknown(f"vLLM logged the platforms {', '.join(sorted(self.platforms))}")
        return next(iter(named))

    def to_json(self) -> dict[str, Any]:
        return {"platforms": sorted(self.platforms), "models": sorted(list(m) for m in self.models)}

    @classmethod
    def from_json(cls, raw: object) -> WorkerProbe:
        probe = cls()
        if isinstance(raw, Mapping):
            platforms, models = raw.get("platforms"), raw.get("models")
            if isinstance(platforms, list):
                probe.platforms = {p for p in platforms if isinstance(p, str)}
            if isinstance(models, list):
                probe.models = {
                    (m[0], m[1])
                    for m in models
                    if isinstance(m, list) and len(m) == 2 and all(isinstance(v, str) for v in m)
                }
        return probe


def read_worker_probes(logs: Path, roles: Iterable[str]) -> dict[str, WorkerProbe]:
    """Each role's probe from its logs (``logs/<role>.<process>.log``), read bounded (diagnose/lines.py)."""
    needles = [needle.encode() for needle in PROBE_NEEDLES]
    probes: dict[str, WorkerProbe] = {}
    for role in sorted(set(roles)):
        probe = probes[role] = WorkerProbe()
        for path in sorted(logs.glob(f"{role}.*")):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                for _, raw in numbered_lines(path, needles):
                    probe.add_line(_ANSI.sub("", raw.decode("utf-8", errors="replace")))
            except OSError:
                continue
    return probes


@dataclass(frozen=True)
class ModelClaim:
    """The model a run's workers must have loaded: its profile's name, hub id and served name, whether the
    project built it (then its directory is named after the profile), and the MODEL_PATH the run recorded."""

    profile: str
    hf_id: str
    served_model_name: str
    built: bool
    model_path: str | None


def model_claim(profile: object, model_path: object) -> ModelClaim | None:
    """The claim of the run's model profile (run.json's ``model_profile``) and MODEL_PATH, None for a profile
    nobody knows."""
    if not isinstance(profile, str):
        return None
    try:
        found = get_model(profile)
    except ProfileError:
        return None
    path = model_path if isinstance(model_path, str) and model_path else None
    return ModelClaim(found.name, found.hf_id, found.served_model_name, found.build_digest is not None, path)


def _model_problem(role: str, probe: WorkerProbe, model: ModelClaim | None) -> str | None:
    if model is None:
        return f"the run's model profile is not known, so the {role} worker's model cannot be compared"
    if not probe.models:
        return f"the {role} worker logged no model loaded (vLLM's engine config line)"
    if len(probe.models) != 1:
        return f"the {role} worker logged {len(probe.models)} different models"
    path, served = next(iter(probe.models))
    if served != model.served_model_name:
        return f"the {role} worker served {served!r}, not the profile's {model.served_model_name!r}"
    if model.built:
        ok = path.rstrip("/").rsplit("/", 1)[-1] == model.profile
    else:
        ok = path in (model.hf_id, model.model_path)
    if not ok:
        return f"the {role} worker loaded {path!r}, not model profile {model.profile}'s"
    return None


def corroborate(
    label: str,
    role: str,
    logged_platform: str | None,
    probe: WorkerProbe | None,
    model: ModelClaim | None,
    hardware: bool,
) -> str:
    """One role's ``label`` (its fingerprint's) where its worker's log agrees with it, else ``unknown (<why>),
    not MI355X`` naming the probe. ``logged_platform``: the vLLM platform the engine's workers log ("cuda",
    "rocm", "cpu"), None where they log none; ``probe``: what the role's logs said, None where they were not
    read. A ``hardware`` label needs every probe: the worker's vLLM platform the one the label's GPUs take (ROCm
    for AMD, CUDA for NVIDIA, CPU for no GPU) and the engine's, and the model it loaded the run's profile. A
    rehearsal label claims no hardware: its worker's lines must not contradict it, but a rehearsal whose logs
    hold none of them (evidence collected before data/ kept them: it holds only what logscan keeps) stays
    labeled."""
    if is_unknown(label):
        return label
    try:
        if hardware:
            wanted = MI355X_PLATFORM if label == MI355X else None
            for suffix, platform in _LABEL_PLATFORM:
                wanted = platform if label.endswith(suffix) else wanted
            if label.startswith(CPU_LABEL):
                wanted = "cpu"
            if wanted is None:
                raise _Unknown("the label names no vLLM platform to compare")
            if logged_platform is None:
                raise _Unknown("the engine's workers log no vLLM platform to corroborate the hardware")
            if logged_platform != wanted:
                raise _Unknown(f"the engine runs vLLM's {logged_platform} platform, not {wanted}")
            if probe is None:
                raise _Unknown(f"the {role} worker's log was not read for its vLLM platform")
        if logged_platform is None or probe is None or (not hardware and probe.empty):
            return label
        try:
            platform = probe.platform()
        except _Unknown as why:
            raise _Unknown(f"the {role} worker's log: {why}") from None
        if platform != logged_platform:
            raise _Unknown(f"the {role} worker's vLLM platform is {platform}, not {logged_platform}")
        problem = _model_problem(role, probe, model)
        if problem:
            raise _Unknown(problem)
        return label
    except _Unknown as why:
        return f"unknown ({why}), {NOT_MI355X}"
