"""An image's digest and labels as its registry gives them, read with skopeo (`nox -s update_lock -- --resolve-base`).

`skopeo inspect docker://REPOSITORY:TAG` asks the registry for the tag's manifest and the image's config: its
``Digest`` is the digest of the manifest the registry serves for the tag (what ``FROM repository@digest`` pins), its
``Labels`` the config's labels. skopeo is Debian's package (requirements/apt.txt). TLS is verified: plain HTTP (or
an unverified certificate) is allowed only towards a registry on a loopback address that the caller names, such as
a test's own registry; never by default.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field

# ATOM's vLLM images (tags vllm-v<version>-nightly_<date>) name the vLLM commit they were built from in this label
# (ATOM's docker/Dockerfile, stage atom_oot); its plain tags come from the native target, without vLLM or the label.
VLLM_COMMIT_LABEL = "com.rocm.atom.vllm_commit"
SKOPEO_TIMEOUT_S = 300.0
# The nodes are x86_64 Linux: with a multi-platform tag, its labels are read from that platform's image.
PLATFORM = ("linux", "amd64")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REGISTRY = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?")


class RegistryError(RuntimeError):
    """The registry could not be asked, or its answer is not one to record; the message says which and why."""


@dataclass(frozen=True)
class Inspection:
    reference: str  # what was asked, without the transport: [REGISTRY/]REPOSITORY:TAG
    digest: str  # sha256:<hex> of the manifest the registry serves for the tag
    labels: dict[str, str] = field(default_factory=dict)


def is_loopback(registry: str) -> bool:
    """Whether ``registry`` (HOST[:PORT]) is a loopback IP address; a name is never taken for one."""
    match = _REGISTRY.fullmatch(registry)
    if match is None:
        return False
    try:
        return ipaddress.ip_address(match.group("host").strip("[]")).is_loopback
    except ValueError:
        return False


def image_reference(repository: str, tag: str, registry: str = "") -> str:
    """``REPOSITORY:TAG``, or ``REGISTRY/REPOSITORY:TAG`` when a registry (a mirror, a test's own) is named."""
    if registry and _REGISTRY.fullmatch(registry) is None:
        raise RegistryError(f"registry {registry!r} is not HOST[:PORT]")
    return f"{registry}/{repository}:{tag}" if registry else f"{repository}:{tag}"


def inspect_image(
    reference: str,
    *,
    insecure_loopback: bool = False,
    skopeo: str = "skopeo",
    timeout: float = SKOPEO_TIMEOUT_S,
) -> Inspection:
    """The tag's digest and labels from its registry. ``insecure_loopback`` turns TLS verification off, and is
    refused unless the reference names a loopback registry."""
    if insecure_loopback:
        first = reference.split("/", 1)[0] if "/" in reference else ""
        # As Docker reads a name: its first component is a registry only with a '.' or ':' in it, or localhost.
        registry = first if ("." in first or ":" in first or first == "localhost") else ""
        if not is_loopback(registry):
            raise RegistryError(
                f"TLS verification is turned off only towards a registry on a loopback address (a test's own); "
                f"{reference} names {registry or 'no registry'}"
            )
    executable = shutil.which(skopeo)
    if executable is None:
        raise RegistryError(
            f"{skopeo} is not installed (Debian: apt-get install skopeo; requirements/apt.txt)"
        )
    argv = [
        executable,
        "--override-os",
        PLATFORM[0],
        "--override-arch",
        PLATFORM[1],
        "inspect",
        "--no-tags",  # the digest and labels of one tag; a repository's tag list can be thousands long
        f"--tls-verify={'false' if insecure_loopback else 'true'}",
        f"docker://{reference}",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RegistryError(
            f"skopeo inspect docker://{reference} did not answer within {timeout:.0f} s"
        ) from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise RegistryError(
            f"skopeo inspect docker://{reference} failed (exit {done.returncode}): "
            + (lines[-1] if lines else "no message")
        )
    return parse_inspection(reference, done.stdout)


def parse_inspection(reference: str, output: str) -> Inspection:
    """skopeo inspect's JSON: ``Digest`` must be a full sha256 digest, ``Labels`` an object of strings or null."""
    try:
        answer = json.loads(output)
    except json.JSONDecodeError as exc:
        raise RegistryError(f"skopeo inspect docker://{reference} printed no JSON ({exc.msg})") from None
    if not isinstance(answer, dict):
        raise RegistryError(
            f"skopeo inspect docker://{reference} printed {type(answer).__name__}, not an object"
        )
    digest = answer.get("Digest")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise RegistryError(f"skopeo inspect docker://{reference} gave no sha256 digest (Digest: {digest!r})")
    labels = answer.get("Labels") or {}
    if not isinstance(labels, dict) or not all(
        isinstance(key, str) and key and isinstance(value, str) for key, value in labels.items()
    ):
        raise RegistryError(
            f"skopeo inspect docker://{reference} gave labels that are not strings: {labels!r}"
        )
    return Inspection(reference=reference, digest=digest, labels=dict(sorted(labels.items())))
