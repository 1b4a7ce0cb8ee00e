"""The whole-file fast path hides exactly what the line-by-line path hides, and whole files stream through it."""

from __future__ import annotations

import itertools
import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_sanitize import BENIGN, CORPUS
from test_sanitize_corpus import HIDE, KEEP

from atomdyn_core.sanitize import Sanitizer, sanitize_file, sanitize_file_to, scan, speculate
from atomdyn_core.sanitize.files import read_blocks
from atomdyn_core.sanitize.loggen import KNOWN, generate_text
from atomdyn_core.sanitize.scan import sanitize_block

Known = dict[str, list[str]]


def _state(s: Sanitizer) -> tuple[Any, ...]:
    return s._maps, s._hosts, s._bare


def _line_by_line(known: Known, text: str) -> tuple[str, tuple[Any, ...]]:
    s = Sanitizer(**known)  # type: ignore[arg-type]
    s.learn(text)
    return s.sanitize(text), _state(s)


def _fast(known: Known, text: str) -> tuple[str, tuple[Any, ...]]:
    s = Sanitizer(**known)  # type: ignore[arg-type]
    return sanitize_block(s, text), _state(s)


def _prepared_elsewhere(known: Known, text: str, fewer: bool = False) -> tuple[str, tuple[Any, ...]]:
    """As the workers do it: prepared with another sanitizer that knows the same names (names replaced,
    hit lines judged), finished with this one; ``fewer``: one that knew only the first host then (names
    learned since the block was sent out), numbered alike."""
    s = Sanitizer(**known)  # type: ignore[arg-type]
    if fewer:
        namer = Sanitizer(hosts=known.get("hosts", [])[:1], paths=known.get("paths", []))
    else:
        namer = Sanitizer(**known)  # type: ignore[arg-type]
    names, paths = tuple(namer.known_names()), tuple(namer._paths)
    prepared = scan.prepare_block(text, names, paths, namer, stages=True)
    return scan.finish_block(s, prepared), _state(s)


def _sanitized_ahead(known: Known, text: str, copy: Sanitizer) -> tuple[str, tuple[Any, ...]]:
    """As the workers do it from 3 on: the hit lines sanitized ahead by ``copy`` (what it knew and had
    numbered), checked and finished by a sanitizer that knows ``known``."""
    s = Sanitizer(**known)  # type: ignore[arg-type]
    names, paths = tuple(copy.known_names()), tuple(copy._paths)
    ahead = (copy.names_state(), copy.numbering_state())
    prepared = scan.prepare_block(text, names, paths, Sanitizer.naming(copy.names_state()), ahead=ahead)
    kept = prepared.text
    if prepared.output is not None:
        prepared.text = ""  # dropped, as a worker drops it: read again only where needed

    def read_again() -> str:
        return kept

    return scan.finish_prepared(s, prepared, read_again), _state(s)


def _copy_numbering_otherwise(known: Known) -> Sanitizer:
    """A copy that knows the same names but numbered other values first: each answer it gives on a value
    numbered differently must be caught, and that line sanitized again."""
    copy = Sanitizer(**known)  # type: ignore[arg-type]
    copy.learn("peer 10.1.2.3 and 10.42.0.7 at fe80::1234%ib0 and 02:42:ac:11:00:02 /scratch/x/y\n")
    assert copy.known_count() == Sanitizer(**known).known_count()  # type: ignore[arg-type]
    return copy


def _copy_from_before(known: Known) -> Sanitizer:
    """A copy as the finishing sanitizer stood before it learned its last names (the first known host only)
    and with other values numbered: its block must not stand where the names differ."""
    fewer = {**known, "hosts": known.get("hosts", [])[:1]}
    return _copy_numbering_otherwise(fewer)


def _assert_same(known: Known, text: str) -> None:
    slow, slow_state = _line_by_line(known, text)
    ways = (
        _fast(known, text),
        _prepared_elsewhere(known, text),
        _prepared_elsewhere(known, text, fewer=True),
        _sanitized_ahead(known, text, Sanitizer(**known)),  # type: ignore[arg-type]
        _sanitized_ahead(known, text, _copy_numbering_otherwise(known)),
        _sanitized_ahead(known, text, _copy_from_before(known)),
    )
    for fast, fast_state in ways:
        if fast != slow:
            for a, b in zip(fast.splitlines(), slow.splitlines(), strict=False):
                assert a == b, "fast path and line-by-line path differ"
        assert fast == slow
        assert fast_state == slow_state  # the same values learned and numbered in the same order


# Without private key blocks: a block holding one goes down the line-by-line path whole (tested on its own).
CORPUS_LINES = [
    line
    for line in [raw for raw, _, _ in CORPUS] + BENIGN + [c.raw for c in HIDE + KEEP]
    if "PRIVATE" not in line
]
KEY_LINES = [raw for raw, _, _ in CORPUS if "PRIVATE" in raw]


@pytest.mark.parametrize("case", HIDE + KEEP, ids=[c.where for c in HIDE + KEEP])
def test_each_corpus_case(case: Any) -> None:
    _assert_same(case.known, case.raw + "\n")


@pytest.mark.parametrize("known", [{}, KNOWN], ids=["nothing-known", "run-config"])
def test_the_whole_corpus_as_one_text(known: Known) -> None:
    _assert_same(known, "\n".join(CORPUS_LINES) + "\n")


def test_a_text_with_a_private_key_block() -> None:
    _assert_same({}, "\n".join(CORPUS_LINES[:10] + KEY_LINES + CORPUS_LINES[10:]) + "\n")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("known", [{}, KNOWN], ids=["nothing-known", "run-config"])
def test_generated_logs(seed: int, known: Known) -> None:
    _assert_same(known, generate_text(256 << 10, seed=seed))


def test_names_learned_since_a_block_was_sent_out_are_replaced_in_it() -> None:
    """The copy knew login-02 only; this process knows gpu-a17 too: on hit lines, on lines naming it alone,
    and in a block with no hit line at all."""
    known = {"hosts": ["login-02", "gpu-a17"], "users": ["jdoe"]}
    texts = (
        "peer 10.9.9.9 from gpu-a17 and jdoe at 10.1.2.3\nlater GPU-A17.acme.internal said hi\n",
        "password=hunter2hunter2 from gpu-a17 for jdoe on login-02\n",  # no value numbered on it
        "just gpu-a17 and jdoe here\n",  # no hit line
    )
    for text in texts:
        _assert_same(known, text)


def test_a_block_whose_check_teaches_a_name_is_left_to_the_ordinary_way() -> None:
    """A line run again here (an answer differs) that teaches a name: the name may stand on any line of the
    block, so its hit lines must all be run again; finish_ahead hands the block back."""
    line = "ssh ops1@gpu-q9 now\n"
    worker = speculate.Speculated(((speculate._USER, "zz", False, "user-7"),), line, 0, 0, len(line))
    here = Sanitizer()
    assert speculate.finish_ahead(here, [worker], line, here.known_count()) is None
    assert here.known_count() != (0, 0)  # it learned gpu-q9 and ops1 on the way


# Pieces that make a pattern match or nearly match, to be recombined at random.
_PIECES = [
    *(
        " ",
        "  ",
        "\t",
        "=",
        ":",
        "::",
        ":::",
        ".",
        "-",
        "--",
        "_",
        "/",
        "@",
        '"',
        "'",
        "[",
        "]",
        "%",
        "*** ",
        "#",
    ),
    *("\r\n", "\r", "\x0b", "\x85", "\u2028", "\x1b[32m", "\x1b[0m", "\x1b[", "\x1b[\x1b[0m1m"),
    *("\u212a", "\u0131", "\u0130", "\u017f", "é"),  # case-blind matching: Kelvin sign, dotless i, İ, long s
    *(
        "host",
        "Host",
        "HOST",
        "node",
        "nodes",
        "user",
        "USER",
        "owner",
        "token",
        "password",
        "api_key",
        "key",
    ),
    *("secret", "account", "partition", "qos", "cluster_name", "master_addr", "sig", "bearer", "basic"),
    *("hf_", "AKIA", "ghp_", "sk-", "xoxb-", "eyJ", "github_pat_", "nvapi-", "slurmstepd-", "#SBATCH -A "),
    *(
        "http://",
        "https://",
        "etcd://",
        "/home/",
        "/Users/",
        "/lustre/",
        "/scratch/",
        "-w ",
        "-x ",
        "--nodelist=",
    ),
    *("10", "127", "0", "255", "1", "192", "fe80", "ffff", "db8", "2001", "a", "f", "g", "00", "abcd"),
    *("com", "internal", "local", "cluster", "io", "log", "json", "gpu-a17", "login-02", "jdoe", "acme-ml"),
    *("std", "vector", "dynamo_llm", "version ", "A" * 16, "b" * 36, "Z9" * 18),
]


def _random_text(rng: random.Random, lines: int) -> str:
    out = []
    for _ in range(lines):
        if rng.random() < 0.3:
            line = rng.choice(CORPUS_LINES)
            if rng.random() < 0.5:
                line = "".join(c.upper() if rng.random() < 0.3 else c for c in line)
        else:
            line = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 14)))
        out.append(line)
    return "\n".join(out) + rng.choice(["", "\n"])


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize(
    "known",
    [{}, {"hosts": ["gpu-a17", "login-02.cluster.acme"], "users": ["jdoe"], "accounts": ["acme-ml"]}],
    ids=["nothing-known", "some-known"],
)
def test_random_recombinations(seed: int, known: Known) -> None:
    _assert_same(known, _random_text(random.Random(seed), 400))


@pytest.mark.parametrize("seed", range(12))
def test_random_recombinations_in_ascii(seed: int) -> None:
    """ASCII blocks go through the line shapes; the pieces repeat, so shapes recur with other hex digits."""
    rng = random.Random(1000 + seed)
    text = _random_text(rng, 600).encode("ascii", "ignore").decode("ascii")
    _assert_same({"hosts": ["gpu-a17"], "users": ["jdoe"]}, text)


_HEX_DIGITS = "0123456789abcdef"


def _twin(line: str, rng: random.Random) -> str:
    """The line with its hex digits (any case) replaced at random: the same shape, other values."""
    return "".join(
        (rng.choice(_HEX_DIGITS).upper() if c.isupper() else rng.choice(_HEX_DIGITS))
        if c.lower() in _HEX_DIGITS
        else c
        for c in line
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("known", [{}, KNOWN], ids=["nothing-known", "run-config"])
def test_lines_of_one_shape_with_other_digits(seed: int, known: Known) -> None:
    """A shape judged on one line must not hide another line of the same shape: 127.0.0.1 and 100.0.0.1,
    nobe= and node=, hf_ tokens and their look-alikes."""
    rng = random.Random(seed)
    ascii_lines = [line for line in CORPUS_LINES if line.isascii()]
    lines = [
        *ascii_lines,
        "peer 127.0.0.1 up",
        "peer 100.0.0.1 up",
        "nobe=x1",
        "node=x1",
        "cafe::1 ok",
        "at 10.1.2.3.cafe",
    ]
    text = [twin for line in lines for twin in (line, _twin(line, rng), _twin(line, rng))]
    rng.shuffle(text)
    _assert_same(known, "\n".join(text) + "\n")


def test_the_shape_verdicts_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from atomdyn_core.sanitize import scan

    monkeypatch.setattr(scan, "_MAX_SHAPES", 50)
    monkeypatch.setattr(scan, "_SHAPE_VERDICTS", {})
    for seed in range(3):
        text = generate_text(64 << 10, seed=seed, colour=False)
        _assert_same(KNOWN, text)
        # Cleared before a block's new shapes would go past the bound: at most the bound and one block's.
        assert len(scan._SHAPE_VERDICTS) <= 50 + len(set(text.splitlines()))


def test_a_name_learned_late_in_a_block_is_replaced_above_it() -> None:
    text = "started by jdoe on gpu-a17\nfiller\nHOME=/home/jdoe node=gpu-a17\n"
    _assert_same({}, text)
    assert _fast({}, text)[0] == "started by user-1 on host-1\nfiller\nHOME=/home/user-1 node=host-1\n"


# --- whole files -------------------------------------------------------------------------------------------


def _file_reference(text: str, known: Known) -> str:
    return _line_by_line(known, text)[0]


def _known_sanitizer(known: Known) -> Sanitizer:
    return Sanitizer(**known)  # type: ignore[arg-type]


@pytest.mark.parametrize("block_bytes", [64, 4096, 1 << 20])
def test_a_file_in_blocks_equals_the_whole_text(tmp_path: Path, block_bytes: int) -> None:
    text = generate_text(200_000, seed=7).replace("\n", "\r\n", 50)
    src = tmp_path / "raw.log"
    src.write_bytes(text.encode())
    dest = tmp_path / "out" / "clean.log"
    sanitize_file_to(src, dest, _known_sanitizer(KNOWN), block_bytes=block_bytes)
    assert dest.read_bytes().decode() == _file_reference(text, KNOWN)
    assert [p.name for p in dest.parent.iterdir()] == ["clean.log"]  # no temporary file left


def test_a_name_learned_in_a_later_block_is_replaced_in_earlier_ones(tmp_path: Path) -> None:
    text = "job by jdoe ran on gpu-b7\n" + "plain line\n" * 500 + "HOME=/home/jdoe\nnode=gpu-b7\n"
    src = tmp_path / "raw.log"
    src.write_text(text)
    dest = tmp_path / "clean.log"
    sanitize_file_to(src, dest, block_bytes=256)
    out = dest.read_text()
    assert out == _file_reference(text, {})
    assert out.startswith("job by user-1 ran on host-1\n") and "jdoe" not in out and "gpu-b7" not in out


def test_a_private_key_cut_by_a_block_boundary_is_redacted_whole(tmp_path: Path) -> None:
    body = "".join(f"MIIEowIBAAKCAQEAq8Lw2y7c3zV0xA9bX8s1kQline{i:04d}\n" for i in range(400))
    key = f"-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\n"
    text = "x" * 100 + "\n" + ("filler line\n" * (((1 << 20) - 5000) // 12)) + key + "after the key\n"
    src = tmp_path / "raw.log"
    src.write_text(text)
    for block_bytes in (1 << 20, 4096):  # the first: the block size of the former reader, which leaked
        dest = tmp_path / f"clean-{block_bytes}.log"
        sanitize_file_to(src, dest, block_bytes=block_bytes)
        out = dest.read_text()
        assert "MIIEowIBAAKCAQEA" not in out
        assert out.endswith("<redacted:private-key>\nafter the key\n")


def test_a_private_key_without_end_is_redacted_to_the_end_in_bounded_blocks(tmp_path: Path) -> None:
    text = "before\n-----BEGIN PRIVATE KEY-----\n" + "QUJDRA==\n" * 5000
    src = tmp_path / "raw.log"
    src.write_text(text)
    blocks = list(read_blocks(src, block_bytes=1024))
    assert max(map(len, blocks)) < 4 * 1024  # the body is dropped as it is read
    dest = tmp_path / "clean.log"
    sanitize_file_to(src, dest, block_bytes=1024)
    assert dest.read_text() == "before\n<redacted:private-key>"


def test_characters_of_several_bytes_and_cr_line_ends_across_blocks(tmp_path: Path) -> None:
    lines = [f"é{i} node=gpu-ä{i % 7} peer fe80::{i:x}%eth0 ✓ /home/jdöe" for i in range(300)]
    text = "\r\n".join(lines[:100]) + "\r" + "\r".join(lines[100:200]) + "\n" + "\n".join(lines[200:]) + "\n"
    src = tmp_path / "raw.log"
    src.write_bytes(text.encode() + b"\xff\xfe broken\n")
    for block_bytes in (7, 64, 1000):
        dest = tmp_path / f"clean-{block_bytes}.log"
        sanitize_file_to(src, dest, block_bytes=block_bytes)
        assert dest.read_bytes().decode() == _file_reference(text + "\ufffd\ufffd broken\n", {})


def test_a_line_longer_than_the_limit_is_cut_between_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atomdyn_core.sanitize import lines

    monkeypatch.setattr(lines, "LINE_LIMIT_BYTES", 1001)
    src = tmp_path / "raw.log"
    src.write_bytes(("é" * 3000 + "\n").encode())  # two bytes each: 1001 falls inside a character
    blocks = list(read_blocks(src, block_bytes=100))
    assert "".join(blocks) == "é" * 3000 + "\n"
    assert "\ufffd" not in "".join(blocks) and max(map(len, blocks)) <= 600


def test_blocks_are_bounded_whole_lines(tmp_path: Path) -> None:
    src = tmp_path / "raw.log"
    src.write_text(generate_text(300_000, seed=3))
    blocks = list(read_blocks(src, block_bytes=10_000))
    assert len(blocks) > 20
    assert all(b.endswith("\n") for b in blocks)
    assert max(map(len, blocks)) < 10_000 + 2_000  # a block and the rest of its last line


def test_sanitize_file_to_a_stream(tmp_path: Path) -> None:
    import io

    src = tmp_path / "raw.log"
    src.write_bytes(b"HOME=/home/jdoe\n\xff\xfe garbage\n")
    out = io.StringIO()
    sanitize_file(src, out)
    assert out.getvalue() == "HOME=/home/user-1\n\ufffd\ufffd garbage\n"


def test_a_failed_run_leaves_the_destination_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "clean.log"
    dest.write_text("previous\n")
    with pytest.raises(FileNotFoundError, match=r"absent\.log is not a file"):
        sanitize_file_to(tmp_path / "absent.log", dest)
    src = tmp_path / "raw.log"
    src.write_text("line\n" * 10_000)
    from atomdyn_core.sanitize import files

    calls = []

    def fail_on_the_third_block(
        sanitizer: Sanitizer, block: str
    ) -> str:  # a disk or decoding fault, injected
        calls.append(block)
        if len(calls) == 3:
            raise OSError("injected fault")
        return sanitize_block(sanitizer, block)

    monkeypatch.setattr(files, "sanitize_block", fail_on_the_third_block)
    with pytest.raises(OSError, match="injected fault"):
        sanitize_file_to(src, dest, block_bytes=1000)
    assert dest.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean.log", "raw.log"]


# --- the command -------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atomdyn_core.sanitize", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_file_writes_the_sanitized_copy(tmp_path: Path) -> None:
    src = tmp_path / "raw.log"
    src.write_text("peer fe80::1%eth0 at login-02.cluster.example.internal\n")
    assert _cli("file", str(src), str(tmp_path / "clean.log")).returncode == 0
    assert (tmp_path / "clean.log").read_text() == "peer 2001:db8::1 at host-1\n"
    shown = _cli("file", str(src))
    assert shown.returncode == 0 and shown.stdout == "peer 2001:db8::1 at host-1\n"
    missing = _cli("file", str(tmp_path / "absent.log"))
    assert missing.returncode == 2 and "absent.log is not a file" in missing.stderr


def _cli_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with its standard output a pipe whose reader is gone already (``| head -0``)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "atomdyn_core.sanitize", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)


def _cli_with_stdout_closed(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with its standard output closed (``>&-``)."""
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "atomdyn_core.sanitize", *args])
    return subprocess.run(["sh", "-c", f"exec {command} >&-"], capture_output=True, text=True, timeout=120)


def _no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_cli_whose_reader_goes_away_ends_quietly(tmp_path: Path) -> None:
    src = tmp_path / "raw.log"
    src.write_text("peer fe80::1%eth0 at login-02.cluster.example.internal\n" * 20_000)
    helped = _cli_into_closed_pipe("--help")  # argparse may drop the help it could not write: 0 then
    _no_traceback(helped)
    assert helped.returncode in (0, 1)
    for args in (["file", str(src)], ["bench", "--size-mb", "1", "--slow-sample-mb", "0"]):
        done = _cli_into_closed_pipe(*args)
        _no_traceback(done)
        assert done.returncode == 1, (args, done.stderr)


def test_cli_with_standard_output_closed(tmp_path: Path) -> None:
    src = tmp_path / "raw.log"
    src.write_text("peer fe80::1%eth0\n")
    shown = _cli_with_stdout_closed("--help")
    _no_traceback(shown)
    assert shown.returncode == 0 and "usage:" in shown.stderr  # argparse shows it on standard error then
    for args in (["file", str(src)], ["bench", "--size-mb", "1"]):
        done = _cli_with_stdout_closed(*args)
        _no_traceback(done)
        assert done.returncode == 1 and "standard output is closed" in done.stderr, (args, done.stderr)
    dest = tmp_path / "clean.log"
    assert _cli_with_stdout_closed("file", str(src), str(dest)).returncode == 0  # DEST needs no stdout
    assert dest.read_text() == "peer 2001:db8::1\n"


def test_cli_file_that_cannot_be_read_is_a_clean_error_and_writes_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "new" / "dir" / "clean.log"
    for path in ("/proc/self/mem", "/proc/x", str(tmp_path)):  # a read error (EIO), none, a directory
        for out in ([], [str(dest)]):
            done = _cli("file", path, *out)
            _no_traceback(done)
            assert done.returncode == 2 and f"sanitize: {path}" in done.stderr, done.stderr
            assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no DEST, no directory for it, no temporary file


def test_cli_file_not_permitted_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from atomdyn_core.sanitize import __main__ as command
    from atomdyn_core.sanitize import files

    src = tmp_path / "secret.log"
    src.write_text("line\n")

    def refused(path: Path, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(path))  # as open() says it where root is not

    monkeypatch.setattr(files, "read_blocks", refused)
    for out in ([], [str(tmp_path / "out" / "clean.log")]):
        assert command.main(["file", str(src), *out]) == 2
        assert capsys.readouterr().err == f"sanitize: {src}: Permission denied\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.log"]


def test_cli_bench_prints_its_figures() -> None:
    done = _cli("bench", "--size-mb", "1", "--slow-sample-mb", "1")
    assert done.returncode == 0, done.stderr
    assert "parse rate" in done.stdout and "whole-file sanitize" in done.stdout and "MB/s" in done.stdout


# Lines that one scanner alone selects (in the corpus, another scanner selects each line these could).
_ONE_SCANNER_LINES = [
    "mail alice@buildbox now",
    "run -w node17 now",
    "*** JOB 42 ON node07 CANCELLED",
    "#SBATCH -A projx",
    "push with ghp_" + "a1B2" * 9,
    # no run of 16 letters and digits with a digit and a letter past f: the high-entropy scanner passes them by
    "hub hf_" + "abcdefghijklmnopqrstuvwxyzabcd",
    "proxy sent Bearer abcdefgh1234",
    "proxy sent Basic abcdefABCDEF12 too",
    "key AKIAABCDEFGHIJKLMNOP here",
    "google AIza" + "abcdefghij_" * 3 + "ab",
    "jwt eyJhbGciOiJI.eyJzdWIiOiIx.abcdefghijk",
    "default login anonymous",  # .netrc
    "nats SUABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJKLMNOPQRSTUVWXYZABCD",  # an nkey seed
    "upload with Zq8vN2xT4pL9wR7mK3bY6cH1dF5gJ0sA done",  # high entropy
    "login failed for svc with password 'Xy7pw42' today",  # a password in prose
    "argv ['run', '--db-password', 'Xy7pw42', '--rounds']",  # an option and its value, listed
    "db.internal:5432:metrics:app:Xy7pw42",  # a .pgpass line
]


def test_lines_one_scanner_selects() -> None:
    _assert_same({}, "\n".join(_ONE_SCANNER_LINES) + "\n")


def _differs_somewhere() -> bool:
    """Whether the fast path's output differs from the line-by-line path's on the corpus (through the shapes
    and, with its lines of other scripts, through the whole-block scan), on generated logs or on lines that
    one scanner alone selects."""
    ascii_lines = [line for line in CORPUS_LINES if line.isascii()]
    texts = [
        "\n".join(CORPUS_LINES) + "\n",
        "\n".join(ascii_lines) + "\n",
        generate_text(64 << 10, seed=0),
        "\n".join(_ONE_SCANNER_LINES) + "\n",
    ]
    return any(
        _fast(known, text)[0] != _line_by_line(known, text)[0] for text in texts for known in ({}, KNOWN)
    )


_NEVER = re.compile(r"(?!)")


@pytest.fixture(scope="module")
def paths_that_agree() -> None:
    """Unbroken, the two paths agree on every text of the comparisons (checked once: the same for every test
    below, each of which then breaks one piece)."""
    assert not _differs_somewhere()


@pytest.mark.usefixtures("paths_that_agree")
@pytest.mark.parametrize("twin", [False, True], ids=["scanner", "shape-twin"])
@pytest.mark.parametrize("index", range(len(scan._SCANNERS)))
def test_the_comparisons_catch_a_pre_filter_that_misses_lines(
    index: int, twin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each scanner (and each twin that judges shapes for it) is needed: with it made blind, the fast path
    misses lines and the comparisons above see it. A pre-filter that misses lines cannot pass them."""
    name = "_SHAPE_SCANNERS" if twin else "_SCANNERS"
    broken = tuple(_NEVER if k == index else p for k, p in enumerate(getattr(scan, name)))
    monkeypatch.setattr(scan, name, broken)
    monkeypatch.setattr(scan, "_SHAPE_VERDICTS", {})
    assert _differs_somewhere()


@pytest.mark.usefixtures("paths_that_agree")
def test_the_comparisons_catch_known_names_left_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "_replace_names", lambda *args: None)
    assert _differs_somewhere()


# --- several processes -------------------------------------------------------------------------------------


def _parallel_and_sequential(
    tmp_path: Path, text: str | bytes, known: Known, block_bytes: int, jobs: int = 2
) -> tuple[bytes, bytes]:
    src = tmp_path / "raw.log"
    src.write_bytes(text.encode() if isinstance(text, str) else text)
    one, many = tmp_path / "one.log", tmp_path / "many.log"
    sanitize_file_to(src, one, _known_sanitizer(known), block_bytes=block_bytes, jobs=1)
    sanitize_file_to(src, many, _known_sanitizer(known), block_bytes=block_bytes, jobs=jobs)
    return one.read_bytes(), many.read_bytes()


@pytest.fixture
def parallel_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    from atomdyn_core.sanitize import files

    monkeypatch.setattr(files, "PARALLEL_MIN_BYTES", 0)


def _learned_across_blocks() -> str:
    """Names and values learned on one line and met again far below (in other blocks), with colours; a name
    first seen alone before the line that teaches it (the second pass), values numbered in file order."""
    rng = random.Random(5)
    lines = ["started by jdoe on gpu-b7 and login-9x.acme.internal"]
    for i in range(3000):
        roll = rng.random()
        if roll < 0.02:
            lines.append(f"HOME=/home/u{rng.randint(0, 40)} node=gpu-b{rng.randint(0, 30)}")
        elif roll < 0.05:
            lines.append(
                f"peer 10.1.{rng.randint(0, 3)}.{rng.randint(1, 200)} up fe80::{rng.randint(1, 999):x}:1%ib0"
            )
        elif roll < 0.10:
            lines.append(f"\x1b[2mnow\x1b[0m gpu-b{rng.randint(0, 30)} and u{rng.randint(0, 40)} say {i}")
        else:
            lines.append(f"plain line {i} with nothing in it at all")
    lines.append("HOME=/home/jdoe node=gpu-b7 ran as owner=zed99")
    return "\n".join(lines) + "\n"


@pytest.mark.usefixtures("parallel_small_files")
@pytest.mark.parametrize("block_bytes", [512, 4096])
def test_several_processes_give_the_same_bytes(tmp_path: Path, block_bytes: int) -> None:
    """Small blocks force many ranges: what one range learns is replaced in others, sent out before."""
    text = _learned_across_blocks()
    one, many = _parallel_and_sequential(tmp_path, text, {}, block_bytes)
    assert many == one
    assert _parallel_and_sequential(tmp_path, text, {}, block_bytes, jobs=3)[1] == one  # hit lines judged
    assert one.decode() == _file_reference(text, {})
    assert "zed99" not in one.decode() and "gpu-b7" not in one.decode()


@pytest.mark.usefixtures("parallel_small_files")
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("known", [{}, KNOWN], ids=["nothing-known", "run-config"])
def test_several_processes_on_generated_logs(tmp_path: Path, seed: int, known: Known) -> None:
    text = generate_text(300_000, seed=seed, colour=seed == 0)
    one, many = _parallel_and_sequential(tmp_path, text, known, block_bytes=8192, jobs=3)
    assert many == one
    assert one.decode() == _file_reference(text, known)


@pytest.mark.usefixtures("parallel_small_files")
def test_several_processes_on_odd_files(tmp_path: Path) -> None:
    """Characters of several bytes, CR line ends, undecodable bytes, random recombinations, a private key
    block across ranges (the rest goes through one process), and a file whose lines are too long for ranges."""
    rng = random.Random(11)
    recombined = _random_text(rng, 3000)
    body = "".join(f"MIIEowIBAAKCAQEAq8Lw2y7c3zV0xA9bX8s1kQline{i:04d}\n" for i in range(200))
    key = f"-----BEGIN RSA PRIVATE KEY-----\n{body}-----END RSA PRIVATE KEY-----\n"
    lines = [f"é{i} node=gpu-ä{i % 7} peer fe80::{i:x}%eth0 ✓ /home/jdöe\r\n" for i in range(300)]
    texts: list[str | bytes] = [
        recombined,
        "".join(lines) + "\xff\xfe broken\n",
        recombined[:20_000] + "\n" + key + recombined[20_000:],
        (recombined[:9000].encode() + b"\xff\n" + "é✓".encode() * 3000 + b"\n" + recombined[9000:].encode()),
    ]
    for text in texts:
        one, many = _parallel_and_sequential(tmp_path, text, {"hosts": ["gpu-a17"]}, block_bytes=1024, jobs=3)
        assert many == one


def test_ranges_are_whole_lines_and_stop_at_long_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from atomdyn_core.sanitize import lines as line_rules
    from atomdyn_core.sanitize import parallel

    src = tmp_path / "raw.log"
    src.write_bytes(b"".join(b"line %d\n" % i for i in range(2000)))
    ranges = list(parallel._ranges(src, 1000))
    assert ranges[0][0] == 0 and ranges[-1][1] == src.stat().st_size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    data = src.read_bytes()
    assert all(data[end - 1 : end] == b"\n" for _, end in ranges)
    monkeypatch.setattr(line_rules, "LINE_LIMIT_BYTES", 3000)
    src.write_bytes(b"short\n" * 1000 + b"x" * 5000 + b"\n" + b"short\n" * 1000)
    ranges = list(parallel._ranges(src, 1000))
    assert ranges[-1][1] is None  # from there on, the one-process reader (it cuts such lines)
    assert max(end - start for start, end in ranges[:-1] if end is not None) <= 3000


@pytest.mark.usefixtures("parallel_small_files")
def test_several_processes_stop_on_a_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault while finishing a block: no destination written, no temporary file, no worker left."""
    import multiprocessing
    import tempfile

    from atomdyn_core.sanitize import files

    spools = tmp_path / "tmp"
    spools.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spools))
    src = tmp_path / "raw.log"
    src.write_text(generate_text(200_000, seed=2))
    dest = tmp_path / "clean.log"
    dest.write_text("previous\n")
    calls = []

    def fail_on_the_third_block(sanitizer: Sanitizer, prepared: scan.Prepared, text: Any) -> str:
        calls.append(prepared)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as Ctrl-C would, in the middle of the run
        return scan.finish_prepared(sanitizer, prepared, text)

    monkeypatch.setattr(files, "finish_prepared", fail_on_the_third_block)
    with pytest.raises(KeyboardInterrupt):
        sanitize_file_to(src, dest, block_bytes=4096, jobs=2)
    assert dest.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clean.log", "raw.log", "tmp"]
    assert multiprocessing.active_children() == []
    assert list(spools.iterdir()) == []  # the workers' spool directory is gone too


def test_cli_file_with_jobs(tmp_path: Path) -> None:
    src = tmp_path / "raw.log"
    src.write_text("peer fe80::1%eth0 at login-02.cluster.example.internal\n")
    assert _cli("file", "--jobs", "2", str(src), str(tmp_path / "clean.log")).returncode == 0
    assert (tmp_path / "clean.log").read_text() == "peer 2001:db8::1 at host-1\n"
    assert _cli("file", "--jobs", "0", str(src)).returncode == 2
