"""The streaming log scanner and the Prometheus reader on realistic and hostile input."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from evidence_helpers import (
    HOST_VRAM_REGIONS,
    MOCKER_RUN,
    RC_TABLES,
    REGISTRATIONS,
    UCX_CMA,
    UCX_RC,
    UCX_TCP,
    atom_logs,
    rc_tables,
    ucx_table,
)

from atomdyn_launchers.evidence import logscan, prom
from atomdyn_launchers.evidence.bench import generate


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_classifies_each_signal_line(tmp_path: Path) -> None:
    lines = [
        *atom_logs("decode"),
        "E1129 23:15:44.1 ucx_backend.cpp:912] postXfer failed: NIXL_ERR_BACKEND",
        "dmabuf-shim: reg fail backend=hsa path=dmabuf size=4096 offset=123 fd_closed=1 addr=0x7f3a42000000 "
        "iova=0x7f3a42000000 access=0xf errno=22",
        "dmabuf-shim: reg fail backend=cuda path=plain size=4096 offset=-1 fd_closed=0 addr=0x7f3a42000000 "
        "iova=0x7f3a42000000 access=0xf errno=95 detail=export_status:0x1",
        "dmabuf-shim: reg ok backend=none path=plain size=65536 offset=-1 fd_closed=0 addr=0x55d0 iova=0x55d0 access=0xf",
        "dmabuf-shim: config bad DMABUF_SHIM_LOG='loud' (want off, gpu or all); using gpu",
        "NIXL_PLUGIN_DIR=/opt/nixl/lib/plugins",  # a NIXL_ mention that is neither an error nor the warning
        "Traceback (most recent call last):",
    ]
    scan = logscan.scan_file(_write(tmp_path / "decode.worker.log", lines))
    assert scan.counts == {
        "host_vram": HOST_VRAM_REGIONS,
        "dmabuf_ok": REGISTRATIONS,
        "kv_transfer": 1,
        "nixl_err": 1,
        "dmabuf_fail": 2,
        "dmabuf_init": 1,
        "dmabuf_plain": 1,
        "dmabuf_config": 1,
        "traceback": 1,
        "engine_probe": 2,  # ATOM's platform plugin and vLLM's engine config line
    }
    assert scan.engine.platforms == {"rocm", "gpu"} and len(scan.engine.models) == 1
    assert scan.dmabuf_errnos == {
        "EINVAL": 1,
        errno.errorcode[95]: 1,
    }  # errno=95: the name is the C library's
    assert [(p.transfers, p.mean_mb, p.mean_ms) for p in scan.kv_points] == [(5, 0.312, 341.755)]
    assert scan.excerpts["nixl_err"] == [f"decode.worker.log:{len(atom_logs('decode')) + 1}: {lines[-7]}"]
    assert scan.lines == len(lines)


@pytest.mark.parametrize("block", [1000, 4096, 65536])  # each longer than any line of the log
def test_block_size_changes_nothing(block: int) -> None:
    log = MOCKER_RUN / "logs" / "decode.frontend.log"
    whole = logscan.scan_file(log)
    small = logscan.scan_file(log, block=block)
    assert whole.counts["http_response"] > 5
    assert small.counts == whole.counts and small.excerpts == whole.excerpts and small.lines == whole.lines


def test_ansi_colours_are_stripped_from_excerpts() -> None:
    scan = logscan.scan_file(MOCKER_RUN / "logs" / "decode.frontend.log")
    first = scan.excerpts["http_response"][0]
    assert "\x1b" not in first and "http response sent status=404" in first


def test_garbage_overlong_lines_and_truncation(tmp_path: Path) -> None:
    log = tmp_path / "prefill.worker.log"
    blob = os.urandom(300_000).replace(b"\n", b" ")  # no newline at all: one huge "line"
    log.write_bytes(
        b"start\n" + blob + b"\nNIXL_ERR_NOT_FOUND \xff\xfe in garbage\ndmabuf-shim: reg ok backend=hsa siz"
    )
    scan = logscan.scan_file(log, block=65536)
    assert scan.cut_lines >= 3  # the garbage line was cut into blocks, never held whole
    assert scan.bytes_read == log.stat().st_size
    assert scan.count("nixl_err") == 1 and scan.undecodable
    assert scan.count("dmabuf_ok") == 1  # the truncated last line still counts


def test_kv_series_stays_bounded(tmp_path: Path) -> None:
    line = atom_logs("decode")[-1]  # vLLM's real "KV Transfer metrics" line
    log = _write(tmp_path / "decode.worker.log", [line] * 5000)
    scan = logscan.scan_file(log, max_points=100)
    assert scan.count("kv_transfer") == 5000 and len(scan.kv_points) <= 101


def test_bench_generator_writes_the_signals_it_claims(tmp_path: Path) -> None:
    size = generate(tmp_path / "bench.log", 2)
    assert size >= 2 << 20
    scan = logscan.scan_file(tmp_path / "bench.log")
    assert scan.bytes_read == size
    assert {"http_response", "dmabuf_ok", "kv_transfer", "nixl_err"} <= set(scan.counts)


def test_prometheus_lines() -> None:
    sample = prom.parse_line(
        'dynamo_frontend_requests_total{endpoint="chat",model="a \\"b\\", c",status="success"} 7 1764461554000'
    )
    assert sample is not None
    assert sample.name == "dynamo_frontend_requests_total" and sample.value == 7.0
    assert sample.labels == {"endpoint": "chat", "model": 'a "b", c', "status": "success"}  # unescaped
    assert prom.parse_line("vllm:nixl_bytes_transferred_sum 3.538944e+07").value == 35389440.0  # type: ignore[union-attr]
    for bad in ("# HELP x y", "", 'x{a="1"}', "x NaN", "x notanumber", "\x00\xff"):
        assert prom.parse_line(bad) is None


def test_prometheus_file_from_a_real_frontend() -> None:
    path = MOCKER_RUN / "metrics" / "decode.frontend.prom"
    samples = list(prom.read_samples(path, frozenset({"dynamo_frontend_requests_total"})))
    assert [s.labels["status"] for s in samples] == ["success"]
    assert samples[0].value == 7.0


def test_dmabuf_shim_documented_lines(tmp_path: Path) -> None:
    """The contract with dmabuf-shim: the example lines of its README's "Log lines" section."""
    readme = Path(__file__).parents[3] / "dmabuf-shim" / "README.md"
    text = readme.read_text()
    block = text[text.index("## Log lines") :].split("```")[1]
    lines = [line for line in block.splitlines() if line.startswith("dmabuf-shim: ")]
    assert lines, "no example lines in dmabuf-shim's README"
    scan = logscan.scan_file(_write(tmp_path / "decode.decode.log", lines))
    assert scan.count("dmabuf_init") == 1 and scan.count("dmabuf_ok") == 1 and scan.count("dmabuf_fail") == 2
    assert scan.dmabuf_errnos == {"EINVAL": 2}


def test_ucx_proto_info_tables_name_the_kv_transport() -> None:
    """Real UCX_PROTO_INFO output of NIXL transfers between two processes: the put/get rows between them
    name the transport that carried the data; the tables of a process talking to itself do not count."""
    tcp = logscan.scan_file(UCX_TCP)
    assert tcp.kv_transports == {"tcp/ad2708h": 4} and tcp.count("ucx_kv_row") == 4
    assert "software emulation | tcp/ad2708h" in tcp.excerpts["ucx_kv_row"][2]
    assert logscan.scan_file(UCX_CMA).kv_transports == {"cma/memory": 4}


def _captured_tables(path: Path) -> list[tuple[str, list[str]]]:
    """(prefix, table lines) of each UCX table in a captured log: a frame, two titles, a frame, the header, a
    frame, the rows, a frame."""
    tables: list[tuple[str, list[str]]] = []
    current: list[str] = []
    for line in path.read_text().splitlines():
        cut = line.find("]   ") + 4
        if cut < 4 or line[cut : cut + 1] not in ("+", "|"):
            continue
        current.append(line[cut:])
        if sum(1 for row in current if row.startswith("+")) == 4:
            tables.append((line[:cut], current))
            current = []
    return tables


def test_the_rendered_rc_tables_are_in_ucxs_own_format() -> None:
    """The renderer of the rc fixtures draws every table of the real TCP capture byte for byte, and the rc
    fixtures are what it draws from their cells."""
    captured = _captured_tables(UCX_TCP)
    assert len(captured) > 20
    for prefix, lines in captured:
        cells = [tuple(cell.strip() for cell in row.strip("|").split("|")) for row in lines[6:-1]]
        rows = [(r[0], r[1], r[2]) for r in cells]
        endpoint, operation = lines[1][2:-2].strip(), lines[2][2:-2].strip()
        assert ucx_table(prefix, endpoint, operation, rows) == [prefix + line for line in lines]
    for name, path in UCX_RC.items():
        assert path.read_text().splitlines() == rc_tables(name), f"{path.name} differs from {name!r}'s cells"


def test_ucx_rows_keep_their_method_and_size_range() -> None:
    """Each KV row keeps its operation, size range, method and config: what the zero-copy gate judges."""
    scan = logscan.scan_file(UCX_RC["zero-copy"])
    rows = list(scan.kv_rows)
    assert [(r.sizes, r.method, r.config) for r in rows] == [
        (sizes, method, config) for operation, table in RC_TABLES["zero-copy"] if "ucp_am" not in operation
        for sizes, method, config in table
    ]  # fmt: skip
    assert {r.scope for r in rows} == {"inter-node"}
    assert rows[0].operation == "remote memory read by ucp_get*(multi) into host memory from host"
    assert rows[1].sizes == "1K..inf"  # a range starting at a multiple of 1024: UCX prints it with its unit
    assert [r.largest for r in rows] == [1023, float("inf"), 60, 2048, float("inf")]
    assert [r.zero_copy for r in rows] == [False, True, False, False, True]
    assert [r.carries_kv for r in rows] == [False, True, False, False, True]
    assert scan.kv_rows[rows[0]].startswith("rc-zero-copy.log:7: [1796131512.204118] ")
    tcp = logscan.scan_file(UCX_TCP)
    assert {(r.method, r.config) for r in tcp.kv_rows} == {("zero-copy", "tcp/ad2708h"),
                                                             ("software emulation", "tcp/ad2708h")}  # fmt: skip


@pytest.mark.parametrize(
    ("method", "zero_copy"),
    [
        ("zero-copy", True),
        ("sgl", True),
        ("(?) rndv using zero-copy read from remote", True),
        ("(?) rndv using zero-copy flushed write to remote", True),
        ("copy-in", False),
        ("copy-out", False),
        ("short", False),
        ("software emulation", False),
        ("(?) rndv using read from remote, rc_verbs/ionic_0:1, frag host", False),
    ],
)
def test_which_methods_are_zero_copy(method: str, zero_copy: bool) -> None:
    row = logscan.UcxRow("inter-node", "remote memory read by ucp_get* into host memory from host", "0..inf",
                         method, "rc_verbs/ionic_0:1")  # fmt: skip
    assert row.zero_copy is zero_copy


def test_matching_lines_are_what_a_scan_reads(tmp_path: Path) -> None:
    log = tmp_path / "decode.worker.log"
    log.write_bytes(b"noise\n" * 1000 + UCX_TCP.read_bytes() + b"noise\n" + b"no newline NIXL_ERR")
    kept = tmp_path / "kept.log"
    kept.write_bytes(b"".join(logscan.matching_lines(log, block=4096)))
    assert b"noise" not in kept.read_bytes() and kept.read_bytes().endswith(b"no newline NIXL_ERR")
    full, reduced = logscan.scan_file(log, block=4096), logscan.scan_file(kept)
    assert (full.counts, full.kv_transports) == (reduced.counts, reduced.kv_transports)
