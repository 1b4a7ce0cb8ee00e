"""A file someone else named is read only if it is a regular file, up to a cap; JSON that evidence reads is
parsed strictly (issue 36, items 2 and 6)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from atomdyn_core.bounded import FileReadError, read_bytes, read_text
from atomdyn_core.jsonload import StrictJSONError, loads_strict
from atomdyn_core.lock import LockError, load_lock


@pytest.mark.parametrize(
    ("path", "kind"), [("/dev/zero", "a character device"), ("/dev/full", "a character device")]
)
def test_a_device_is_refused_at_once(path: str, kind: str) -> None:
    started = time.monotonic()
    with pytest.raises(FileReadError, match=f"is {kind}, not a regular file"):
        read_bytes(path, 1 << 20, "README")
    assert time.monotonic() - started < 1


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "cluster.env"
    os.mkfifo(fifo)
    with pytest.raises(FileReadError, match="is a FIFO"):
        read_text(fifo, 100, "cluster configuration")


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileReadError, match="is a directory"):
        read_bytes(tmp_path, 100)


def test_a_file_over_its_cap_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    big = tmp_path / "big"
    with open(big, "wb") as handle:
        handle.truncate(1 << 30)  # sparse: a gigabyte that costs nothing to make
    started = time.monotonic()
    with pytest.raises(FileReadError, match="larger than 1 MiB"):
        read_bytes(big, 1 << 20, "log")
    assert time.monotonic() - started < 1
    (tmp_path / "ok").write_bytes(b"x" * 100)
    assert read_bytes(tmp_path / "ok", 100) == b"x" * 100


def test_a_missing_file_and_bad_utf8_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileReadError, match="cannot read the lock"):
        read_text(tmp_path / "none", 10, "lock")
    (tmp_path / "bin").write_bytes(b"ab\xff")
    with pytest.raises(FileReadError, match=r"not UTF-8 text \(byte 0xff at offset 2\)"):
        read_text(tmp_path / "bin", 10)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"gpus": ["MI300X"], "gpus": ["MI355X"]}', "duplicate key 'gpus'"),
        ('{"latency_s": NaN}', "NaN is not a JSON number"),
        ('{"latency_s": Infinity}', "Infinity is not a JSON number"),
        ('{"latency_s": -Infinity}', "-Infinity is not a JSON number"),
        ('{"latency_s": 1e400}', "1e400 is out of a float's range"),
        ("[1, 2]", "the top level is list, not dict"),
    ],
)
def test_the_strict_loader_refuses(text: str, why: str) -> None:
    with pytest.raises(StrictJSONError, match=why.replace("(", r"\(")):
        loads_strict(text, expect=dict)


def test_the_strict_loader_reads_plain_json() -> None:
    assert loads_strict(b'{"a": [1, 2.5, null, true, "x"]}', expect=dict) == {"a": [1, 2.5, None, True, "x"]}


def test_a_device_as_the_lock_is_refused() -> None:
    with pytest.raises(LockError, match="is a character device"):
        load_lock(Path("/dev/zero"))
