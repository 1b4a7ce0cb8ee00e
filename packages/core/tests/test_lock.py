from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from atomdyn_core.lock import LockError, UnrecordedHashError, load_lock, parse_lock, require_recorded

REPO = Path(__file__).resolve().parents[3]
LOCK_PATH = REPO / "release-lock.json"


def committed() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(LOCK_PATH.read_text())
    return raw


def run_verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atomdyn_core.cli", "--lock", str(path), "verify"],
        capture_output=True,
        text=True,
    )


def test_committed_lock_loads_and_digest_is_canonical() -> None:
    lock = load_lock(LOCK_PATH)
    assert lock.digest.startswith("sha256:") and len(lock.digest) == 71
    # Reformatting the file does not change the digest; changing a pin does.
    reformatted = parse_lock(json.dumps(committed(), indent=7, sort_keys=False))
    assert reformatted.digest == lock.digest
    changed = committed()
    changed["sources"]["nixl"]["commit"] = "0" * 40
    assert parse_lock(json.dumps(changed)).digest != lock.digest


def test_committed_lock_pins_the_stack() -> None:
    lock = load_lock(LOCK_PATH)
    assert lock.sources["dynamo"].commit == "8ce9e22f11576402102ea9d8b8e46233f5430a0d"
    assert lock.sources["atom"].commit == "f9017b58b8369a55d14e153b51cadd81ab2ba65a"
    assert lock.sources["ucx"].commit == "b56982d8076ac54eb9a0d4a7dbea7852ede75508"
    assert lock.sources["nixl"].commit == "53be1d43a415ff3a14b8bc942ca7242307adb70d"
    assert lock.wheels["ai-dynamo"].requirement == "ai-dynamo==1.3.0.post1"
    assert lock.wheels["ai-dynamo"].recorded and lock.wheels["nixl-cu13-cp311"].recorded
    # What could not be obtained here is explicitly unrecorded, never invented.
    assert lock.images["atom_base"].digest is None
    assert not lock.wheels["atom-rocm7.2"].recorded


def test_committed_lock_pins_etcd_by_its_debian_package() -> None:
    deb = next(d for d in load_lock(LOCK_PATH).debs.values() if "etcd" in d.roles)
    assert (deb.package, deb.architecture) == ("etcd-server", "amd64")
    assert (
        deb.apt_spec == f"etcd-server={deb.version}"
        and deb.filename == f"etcd-server_{deb.version}_amd64.deb"
    )
    assert deb.sha256 is not None and deb.size is not None


def test_verify_cli_prints_digest() -> None:
    result = run_verify(LOCK_PATH)
    assert result.returncode == 0, result.stderr
    assert f"digest: {load_lock(LOCK_PATH).digest}" in result.stdout


def _mutate(path: list[str], value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(committed())
    target = raw
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return raw


_DELETE = object()

BAD_INPUTS = [
    pytest.param(["wheels", "ai-dynamo", "sha256"], "abc123", "$.wheels.ai-dynamo.sha256", id="short-sha256"),
    pytest.param(
        ["wheels", "ai-dynamo", "sha256"], "z" * 64, "$.wheels.ai-dynamo.sha256", id="non-hex-sha256"
    ),
    pytest.param(
        ["images", "atom_base", "digest"], "f" * 64, "$.images.atom_base.digest", id="digest-without-prefix"
    ),
    pytest.param(["sources", "nixl", "commit"], "53be1d43", "$.sources.nixl.commit", id="short-commit"),
    pytest.param(["sources", "ucx", "surprise"], 1, "$.sources.ucx.surprise", id="unknown-key"),
    pytest.param(["wheels", "nixl", "filename"], _DELETE, "$.wheels.nixl.filename", id="missing-field"),
    pytest.param(["wheels", "nixl", "size"], -1, "$.wheels.nixl.size", id="negative-size"),
    pytest.param(["wheels", "nixl", "size"], 10**30, "$.wheels.nixl.size", id="implausible-size"),
    pytest.param(["wheels", "nixl", "roles"], ["nonsense"], "$.wheels.nixl.roles[0]", id="unknown-role"),
    pytest.param(["schema_version"], 99, "$.schema_version", id="future-schema"),
    pytest.param(
        ["debs", "etcd-server", "filename"], "etcd.deb", "$.debs.etcd-server.filename", id="deb-filename"
    ),
    pytest.param(["debs", "etcd-server", "sha256"], "abc", "$.debs.etcd-server.sha256", id="deb-sha256"),
    pytest.param(["debs", "etcd-server", "arch"], "x", "$.debs.etcd-server.arch", id="deb-unknown-key"),
    # Labels are what the registry gave with a recorded digest: never beside an unrecorded one.
    pytest.param(
        ["images", "atom_base", "labels"], {"a": "b"}, "$.images.atom_base.labels", id="labels-no-digest"
    ),
    pytest.param(
        ["images", "atom_base", "labels"], ["a"], "$.images.atom_base.labels", id="labels-not-object"
    ),
]


@pytest.mark.parametrize(("path", "value", "json_path"), BAD_INPUTS)
def test_malformed_lock_names_the_json_path(
    tmp_path: Path, path: list[str], value: Any, json_path: str
) -> None:
    bad = tmp_path / "release-lock.json"
    bad.write_text(json.dumps(_mutate(path, value)))
    with pytest.raises(LockError) as caught:
        load_lock(bad)
    assert caught.value.json_path == json_path
    result = run_verify(bad)
    assert result.returncode != 0
    assert json_path in result.stderr


def test_an_image_s_labels_are_recorded_with_its_digest(tmp_path: Path) -> None:
    raw = committed()
    entry = raw["images"]["atom_base"]
    entry["digest"] = "sha256:" + "ab" * 32
    entry["labels"] = {"com.rocm.atom.vllm_commit": raw["sources"]["vllm"]["commit"], "empty": ""}
    image = parse_lock(json.dumps(raw)).images["atom_base"]
    assert image.labels == entry["labels"] and image.reference == "rocm/atom-dev@sha256:" + "ab" * 32
    entry["labels"] = {"com.rocm.atom.vllm_commit": 1}
    with pytest.raises(LockError) as caught:
        parse_lock(json.dumps(raw))
    assert caught.value.json_path == "$.images.atom_base.labels.com.rocm.atom.vllm_commit"
    assert load_lock(LOCK_PATH).images["atom_base"].labels == {}  # the committed lock: digest not yet read


def test_not_json_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "release-lock.json"
    bad.write_text('{"schema_version": 1,')
    result = run_verify(bad)
    assert result.returncode == 2
    assert "$: not valid JSON" in result.stderr


def test_unrecorded_is_refused_without_override() -> None:
    lock = load_lock(LOCK_PATH)
    used: list[str] = []
    with pytest.raises(UnrecordedHashError, match="not yet recorded"):
        require_recorded(
            "wheel atom-rocm7.2", lock.wheels["atom-rocm7.2"].sha256, override=False, overrides_used=used
        )
    require_recorded(
        "wheel atom-rocm7.2", lock.wheels["atom-rocm7.2"].sha256, override=True, overrides_used=used
    )
    assert used == ["allow-unrecorded:wheel atom-rocm7.2"]
    with pytest.raises(UnrecordedHashError, match="no recorded digest"):
        _ = lock.images["atom_base"].reference


def test_binary_lock_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "release-lock.json"
    bad.write_bytes(b'{"schema_version": 1, "release": "\xff\xfe\x00\x80"}')
    with pytest.raises(LockError) as caught:
        load_lock(bad)
    assert caught.value.json_path == "$"
    result = run_verify(bad)
    assert result.returncode == 2
    assert f"error: $: {bad} is not UTF-8 text (byte 0xff at offset 34)" in result.stderr
    assert "Traceback" not in result.stderr


def _duplicate_in_nixl_wheel(text: str) -> str:
    head, marker, tail = text.partition('"nixl": {\n      "filename"')
    assert marker, "the committed lock has no nixl wheel entry"
    return head + marker + tail.replace('"sha256": ', '"sha256": "' + "0" * 64 + '", "sha256": ', 1)


DUPLICATES = [
    pytest.param("$.wheels.nixl.sha256", _duplicate_in_nixl_wheel, id="wheel-field"),
    pytest.param(
        "$.schema_version",
        lambda t: t.replace('"schema_version": 1', '"schema_version": 1, "schema_version": 1'),
        id="top-level",
    ),
    pytest.param(
        "$.sources.nixl", lambda t: t.replace('"sources": {', '"sources": {"nixl": {}, ', 1), id="entry"
    ),
]


@pytest.mark.parametrize(("json_path", "edit"), DUPLICATES)
def test_duplicate_keys_are_refused_naming_the_json_path(
    tmp_path: Path, json_path: str, edit: Callable[[str], str]
) -> None:
    bad = tmp_path / "release-lock.json"
    bad.write_text(edit(json.dumps(committed(), indent=2)))
    with pytest.raises(LockError) as caught:
        load_lock(bad)
    assert caught.value.json_path == json_path
    assert "duplicate key" in caught.value.message
    result = run_verify(bad)
    assert result.returncode == 2 and f"{json_path}: duplicate key" in result.stderr


# issue 25, item 13: names that become file names are plain base names; nesting is bounded.
PATH_NAMES = [
    pytest.param(
        ["debs", "etcd-server"],
        {"package": "../../../../tmp/EVIL", "filename": "../../../../tmp/EVIL_3.4.23-4+b4_amd64.deb"},
        "$.debs.etcd-server.package",
        id="deb-package-escapes-the-cache",
    ),
    pytest.param(
        ["debs", "etcd-server"],
        {"version": "3.4/../../x", "filename": "etcd-server_3.4/../../x_amd64.deb"},
        "$.debs.etcd-server.version",
        id="deb-version-with-a-slash",
    ),
    pytest.param(
        ["debs", "etcd-server"],
        {"architecture": "amd64\n", "filename": "etcd-server_3.4.23-4+b4_amd64\n.deb"},
        "$.debs.etcd-server.architecture",
        id="deb-architecture-with-a-newline",
    ),
    pytest.param(
        ["wheels", "nixl"],
        {"filename": "nixl\x00-1.5.1-py3-none-any.whl"},
        "$.wheels.nixl.filename",
        id="wheel-filename-with-nul",
    ),
    pytest.param(
        ["wheels", "nixl"],
        {"filename": "nixl-1.5.1-py3-none-any\n.whl"},
        "$.wheels.nixl.filename",
        id="wheel-filename-with-newline",
    ),
    pytest.param(["wheels", "nixl"], {"filename": "..whl"}, "$.wheels.nixl.filename", id="wheel-dots"),
    pytest.param(
        ["wheels", "nixl"], {"filename": "nixl.whl"}, "$.wheels.nixl.filename", id="wheel-without-tags"
    ),
]


@pytest.mark.parametrize(("path", "changes", "json_path"), PATH_NAMES)
def test_names_that_become_file_names_are_plain(
    tmp_path: Path, path: list[str], changes: dict[str, str], json_path: str
) -> None:
    raw = copy.deepcopy(committed())
    target = raw
    for key in path:
        target = target[key]
    target.update(changes)
    bad = tmp_path / "release-lock.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(LockError) as caught:
        load_lock(bad)
    assert caught.value.json_path == json_path
    result = run_verify(bad)
    assert result.returncode == 2 and f"error: {json_path}: " in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("section", ["sources", "wheels", "debs", "images"])
def test_entry_names_are_plain(tmp_path: Path, section: str) -> None:
    raw = copy.deepcopy(committed())
    entries = raw[section]
    name = next(iter(entries))
    entries["../../x\n"] = entries.pop(name)
    bad = tmp_path / "release-lock.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(LockError) as caught:
        load_lock(bad)
    assert caught.value.json_path == f"$.{section}.../../x\n"
    assert "plain name" in caught.value.message


@pytest.mark.parametrize(("depth", "where"), [(100_000, "document"), (100_000, "note")], ids=lambda v: str(v))
def test_deeply_nested_json_is_a_clean_error_naming_the_file(tmp_path: Path, depth: int, where: str) -> None:
    raw = committed()
    raw["images"]["atom_base"]["note"] = "@@nested@@"
    nested = "[" * depth + "]" * depth
    text = nested if where == "document" else json.dumps(raw).replace('"@@nested@@"', nested)
    bad = tmp_path / "release-lock.json"
    bad.write_text(text)
    with pytest.raises(LockError) as caught:
        load_lock(bad)
    assert caught.value.json_path == "$"
    assert str(bad) in caught.value.message and "nested" in caught.value.message
    result = run_verify(bad)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    assert f"error: $: {bad}: JSON nested more than" in result.stderr


def test_an_integer_too_long_to_read_is_a_clean_error(tmp_path: Path) -> None:
    bad = tmp_path / "release-lock.json"
    bad.write_text(json.dumps(committed()).replace('"schema_version": 1', '"schema_version": 1' + "0" * 5000))
    with pytest.raises(LockError) as caught:
        load_lock(bad)
    assert caught.value.json_path == "$" and "not valid JSON" in caught.value.message
    result = run_verify(bad)
    assert result.returncode == 2 and "error: $: not valid JSON: " in result.stderr
    assert "Traceback" not in result.stderr
