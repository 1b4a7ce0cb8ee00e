"""The pure parts of reading an image from its registry; tests/test_resolve_base.py asks a real registry."""

from __future__ import annotations

import json

import pytest

from atomdyn_core.registry import RegistryError, image_reference, inspect_image, is_loopback, parse_inspection

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("registry", "loopback"),
    [("127.0.0.1:5000", True), ("127.3.2.1", True), ("[::1]:5000", True), ("localhost:5000", False),
     ("10.0.0.1:5000", False), ("", False), ("127.0.0.1:5000/x", False)],
)  # fmt: skip
def test_only_a_loopback_address_is_loopback(registry: str, loopback: bool) -> None:
    assert is_loopback(registry) is loopback


def test_references() -> None:
    assert image_reference("rocm/atom-dev", "t") == "rocm/atom-dev:t"
    assert image_reference("rocm/atom-dev", "t", "127.0.0.1:5000") == "127.0.0.1:5000/rocm/atom-dev:t"
    with pytest.raises(RegistryError, match="is not HOST"):
        image_reference("rocm/atom-dev", "t", "a b")


def test_skopeo_s_answer_is_checked() -> None:
    found = parse_inspection("r:t", json.dumps({"Digest": DIGEST, "Labels": None}))
    assert (found.digest, found.labels) == (DIGEST, {})
    with pytest.raises(RegistryError, match="gave no sha256 digest"):
        parse_inspection("r:t", json.dumps({"Digest": "sha256:abc", "Labels": {}}))
    with pytest.raises(RegistryError, match="labels that are not strings"):
        parse_inspection("r:t", json.dumps({"Digest": DIGEST, "Labels": {"a": 1}}))
    with pytest.raises(RegistryError, match="printed no JSON"):
        parse_inspection("r:t", "level=fatal")


def test_tls_verification_is_off_only_towards_a_named_loopback_registry() -> None:
    with pytest.raises(RegistryError, match="names no registry"):
        inspect_image("rocm/atom-dev:t", insecure_loopback=True)
    with pytest.raises(RegistryError, match="names localhost:5000"):
        inspect_image("localhost:5000/rocm/atom-dev:t", insecure_loopback=True)
