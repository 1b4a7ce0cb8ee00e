"""Streaming scan of run logs for the lines that prove or disprove a gate, in constant memory.

Logs are read in fixed-size blocks cut at a line boundary. Signals that only need a count are counted by
``bytes.count`` (C speed, no per-line Python); only rare lines (NIXL records, dma-buf helper lines,
KV-transfer summaries) are decoded and parsed one by one. A line longer than a block is cut, never
buffered whole, so memory does not depend on the log: a crashed process that wrote megabytes of garbage
without a newline costs one block.
"""

from __future__ import annotations

import errno
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# The bounded reader, shared with the diagnosis (diagnose/lines.py).
from atomdyn_launchers.diagnose.lines import BLOCK as BLOCK  # evidence/bench.py reads it here
from atomdyn_launchers.diagnose.lines import blocks as _blocks
from atomdyn_launchers.engines.hardware import PROBE_NEEDLES, WorkerProbe

EXCERPT_LINES = 4  # matching lines kept per marker and file, for the excerpts
MAX_LINE = 2000  # characters kept of one excerpt line

# The exact line the NIXL compatibility patch (patches/) writes when UCX classifies VRAM as host memory.
HOST_VRAM_LINE = "NIXL_COMPAT_HOST_VRAM: VRAM classified as HOST by UCX; registering as host memory"


@dataclass(frozen=True)
class Marker:
    """A fixed byte string to look for. A ``count`` marker is counted in C; every line holding a ``parse``
    marker is handed to :func:`_classify`, which decides what it is."""

    name: str
    needle: bytes
    parse: bool = False


MARKERS: tuple[Marker, ...] = (
    Marker("nixl", b"NIXL_", parse=True),
    Marker("dmabuf", b"dmabuf-shim: ", parse=True),
    Marker("kv_transfer", b"Transfer metrics", parse=True),
    Marker("ucx_table", b"  | ", parse=True),  # UCX_PROTO_INFO=y tables: which transport moved the KV
    Marker("http_response", b"http response sent"),
    Marker("traceback", b"Traceback (most recent call last)"),
    # What the worker logged of vLLM's platform and the model loaded (engines/hardware.py reads them).
    *(Marker("engine_probe", needle.encode(), parse=True) for needle in PROBE_NEEDLES),
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # Dynamo colours its log even into files
_ERRNO = re.compile(r"\berrno=(\w+)")
_KV_FIELDS = re.compile(r"(Num successful transfers|Avg xfer time \(ms\)|Avg MB per transfer)=([0-9.eE+-]+)")
# UCX_PROTO_INFO=y prints, per endpoint configuration, a table: "| <agent> <scope> cfg#N |", then the
# operation ("| remote memory read by ucp_get*(multi) into host memory from host |"), then rows
# "| <size range> | <method> | <transport>/<device>[, ...] |". Put and get carry NIXL's KV reads and writes.
# A size is a number, with K, M, G, ... when a multiple of 1024, or inf (ucs_memunits_range_str, UCX's
# src/ucs/sys/string.c): "0", "0..92", "1K..inf".
_UCX_SCOPE = re.compile(r"^\|\s*\S+\s+(self|intra-node|inter-node)\s+cfg#\d+\s*\|$")
_UCX_TITLE = re.compile(r"^\|\s*(.+? by ucp_\w+\*.*?)\s*\|$")
_UCX_SIZE = r"\d+[KMGTPE]?"
_UCX_ROW = re.compile(
    rf"^\|\s*({_UCX_SIZE}(?:\.\.(?:{_UCX_SIZE}|inf))?)\s*\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|$"
)
_UCX_TLDEV = re.compile(r"([a-z][a-z0-9_]*)/([A-Za-z0-9_:.\-]+)")
_UNITS: dict[str, int] = {unit: 1 << (10 * i) for i, unit in enumerate(("", "K", "M", "G", "T", "P", "E"))}

# The methods of UCX's put and get protocols that move the data between the registered buffers, without
# bounce buffers or an emulation over active messages. At UCX b56982d8 (src/ucp/rma/): put/offload/zcopy and
# get/zcopy print "zero-copy" (put_offload.c, get_offload.c, whether one lane or several: the config column
# then shows "50% on A and 50% on B"); put/sgl/offload "sgl" (put_offload.c, uct_ep_put_sgl_zcopy); put/rndv
# and get/rndv, estimated ("(?) "), "rndv using " the remote side's protocol (rma_rndv.c), of which the
# zero-copy ones are src/ucp/rndv/rndv_get.c's and rndv_put.c's. Not zero-copy: "short" and "copy-in"
# (put/offload/short, put/offload/bcopy), "copy-out" (get/bcopy), "software emulation" (put/am/bcopy,
# get/am/bcopy: rma.h), and a staged rendezvous ("rndv using read from remote, <tl>, frag <memory>").
ZERO_COPY_METHODS = frozenset({
    "zero-copy",
    "sgl",
    "(?) rndv using zero-copy read from remote",
    "(?) rndv using zero-copy write to remote",
    "(?) rndv using zero-copy flushed write to remote",
    "(?) rndv using zero-copy fenced write to remote",
})  # fmt: skip
# The smallest message that can be a KV block when the run's model profile gives no KV shape (the gates take
# the profile's own, evidence/gates.py kv_message_min): a row whose sizes all lie below it carries no KV, and
# small messages legitimately take UCX's short and copy protocols (rc_verbs copies through its bounce buffers up
# to their size, UCX_IB_SEG_SIZE, 8 KiB by default at UCX b56982d8, src/uct/ib/base/ib_iface.c). One block of
# one layer on one rank is block size x KV heads on the rank x head size x element size: at vLLM's 16 tokens,
# 16 x 8 x 128 x 2 B = 32 KiB for Qwen3-8B in BF16; 4 KiB is a single KV head of 128 in BF16 (or of 256 in FP8)
# per rank. A configuration with smaller blocks (one FP8 KV head of 128 per rank: 2 KiB) must lower it.
KV_MESSAGE_MIN = 4 << 10
# Distinct KV rows kept per log: endpoints repeat the same few tables, so more than this is garbage.
MAX_KV_ROWS = 512


@dataclass(frozen=True)
class UcxRow:
    """One row of a UCX_PROTO_INFO table of a put or get between two processes (intra- or inter-node)."""

    scope: str  # "intra-node" or "inter-node"
    operation: str  # "remote memory read by ucp_get*(multi) into host memory from host"
    sizes: str  # the message sizes the row covers, as UCX prints them: "0..92", "5737..inf", "1K..inf"
    method: str  # the protocol's description: "zero-copy", "copy-in", "software emulation", ...
    config: str  # the lanes: "rc_verbs/ionic_0:1", "50% on rc_verbs/ionic_0:1 and 50% on rc_verbs/ionic_1:1"

    @property
    def transports(self) -> list[str]:
        """The ``transport/device`` of every lane of the row."""
        return [f"{transport}/{device}" for transport, device in _UCX_TLDEV.findall(self.config)]

    @property
    def largest(self) -> float:
        """The largest message of the row, in bytes (``math.inf`` for inf)."""
        last = self.sizes.rsplit("..", 1)[-1]
        if last == "inf":
            return math.inf
        unit = last[-1] if last[-1] in _UNITS else ""
        return int(last[: len(last) - len(unit)]) * _UNITS[unit]

    @property
    def zero_copy(self) -> bool:
        return self.method in ZERO_COPY_METHODS

    @property
    def carries_kv(self) -> bool:
        """Whether a KV block can take this row: it covers messages of KV_MESSAGE_MIN or more."""
        return self.carries(KV_MESSAGE_MIN)

    def carries(self, message_min: int) -> bool:
        """Whether UCX takes this row for a message of ``message_min`` bytes or more (KV messages are at least
        one block of one layer; adjacent blocks merge into larger ones): its size range reaches that far."""
        return self.largest >= message_min

    def shown(self) -> str:
        """The row as one line that names it: ``<scope> <operation>: <sizes> | <method> | <config>``."""
        return f"{self.scope} {self.operation}: {self.sizes} | {self.method} | {self.config}"


_VLLM_TIME = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
_ISO_TIME = re.compile(r"\b\d{4}-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d(?:\.\d+)?)")


@dataclass
class KvPoint:
    """One vLLM "KV Transfer metrics" summary: transfers since the previous one, their mean size and time."""

    t: float | None  # seconds within the year, from the log's own timestamp (None when the line has none)
    transfers: int
    mean_mb: float
    mean_ms: float | None


@dataclass
class FileScan:
    """What one log file said."""

    path: Path
    bytes_read: int = 0
    lines: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    excerpts: dict[str, list[str]] = field(default_factory=dict)
    dmabuf_errnos: dict[str, int] = field(default_factory=dict)
    kv_points: list[KvPoint] = field(default_factory=list)
    cut_lines: int = 0
    undecodable: bool = False
    # UCX tables: (scope, operation) of the table being read, and "transport/device" -> rows that carried a
    # put or get between two processes (scope intra-node or inter-node, not self)
    ucx_table: tuple[str, str] = ("", "")
    kv_transports: dict[str, int] = field(default_factory=dict)
    # every distinct such row, in the order first seen -> where: "<file>:<line>: <text>"
    kv_rows: dict[UcxRow, str] = field(default_factory=dict)
    ucx_row: UcxRow | None = None  # the row the last "ucx_kv_row" line was
    engine: WorkerProbe = field(default_factory=WorkerProbe)  # vLLM's platform and model, as logged

    def count(self, name: str) -> int:
        return self.counts.get(name, 0)


def _timestamp(line: str) -> float | None:
    """Seconds within the year of a vLLM (``MM-DD hh:mm:ss``) or ISO timestamp: enough to order and space."""
    found = _ISO_TIME.search(line) or _VLLM_TIME.search(line)
    if not found:
        return None
    month, day, hour, minute = (int(found.group(i)) for i in range(1, 5))
    second = float(found.group(5))
    return ((((month - 1) * 31 + day - 1) * 24 + hour) * 60 + minute) * 60 + second


def _errno_name(raw: str) -> str:
    """``22`` -> ``EINVAL``; a name stays a name."""
    return errno.errorcode.get(int(raw), raw) if raw.isdigit() else raw


def _classify(scan: FileScan, marker: Marker, line: str, max_points: int) -> str | None:
    """What a line holding a parse marker is (the name it is counted and excerpted under), or None."""
    if marker.name == "nixl":
        if HOST_VRAM_LINE in line:
            return "host_vram"
        return "nixl_err" if "NIXL_ERR" in line else None
    if marker.name == "dmabuf":  # format: packages/dmabuf-shim/README.md, "Log lines"
        if "dmabuf-shim: reg ok" in line:
            # path=plain is host memory passed through (or a fallback): not a dma-buf registration
            return "dmabuf_plain" if " path=plain" in line else "dmabuf_ok"
        if "dmabuf-shim: reg fail" in line:
            found = _ERRNO.search(line)
            key = _errno_name(found.group(1)) if found else "unknown"
            scan.dmabuf_errnos[key] = scan.dmabuf_errnos.get(key, 0) + 1
            return "dmabuf_fail"
        if "dmabuf-shim: init" in line:
            return "dmabuf_init"
        return "dmabuf_config" if "dmabuf-shim: config bad" in line else None
    if marker.name == "ucx_table":
        return _ucx_table_line(scan, line)
    if marker.name == "engine_probe":
        before = scan.engine.lines
        scan.engine.add_line(line)
        return "engine_probe" if scan.engine.lines > before else None
    if marker.name == "kv_transfer" and "KV Transfer metrics:" in line:
        fields = dict(_KV_FIELDS.findall(line))
        try:
            transfers = int(float(fields["Num successful transfers"]))
            mean_mb = float(fields["Avg MB per transfer"])
            ms = fields.get("Avg xfer time (ms)")
            point = KvPoint(_timestamp(line), transfers, mean_mb, float(ms) if ms else None)
        except (KeyError, ValueError):
            return "kv_transfer"
        if transfers > 0:
            scan.kv_points.append(point)
            if len(scan.kv_points) > max_points:  # keep the series bounded: drop every other point
                del scan.kv_points[1::2]
        return "kv_transfer"
    return None


def _ucx_table_line(scan: FileScan, line: str) -> str | None:
    """Follow a UCX_PROTO_INFO table; a row of a put/get between processes is a KV transport row."""
    start = line.find("|")
    cell = line[start:].strip() if start >= 0 else ""
    scope, operation = scan.ucx_table
    if found := _UCX_SCOPE.match(cell):
        scan.ucx_table = (found.group(1), "")
    elif found := _UCX_TITLE.match(cell):
        scan.ucx_table = (scope, found.group(1))
    elif (
        scope in ("intra-node", "inter-node")
        and ("ucp_put" in operation or "ucp_get" in operation)
        and (found := _UCX_ROW.match(cell))
    ):
        scan.ucx_row = UcxRow(scope, operation, found.group(1), found.group(2), found.group(3))
        for key in scan.ucx_row.transports:
            scan.kv_transports[key] = scan.kv_transports.get(key, 0) + 1
        return "ucx_kv_row"
    return None


def matching_lines(path: Path, markers: tuple[Marker, ...] = MARKERS, block: int = BLOCK) -> Iterator[bytes]:
    """Every line of ``path`` that holds a marker, in file order and with its newline (the file's last line
    may lack one; a line longer than a block comes cut): what a scan of the log reads, and nothing else."""
    for buf, end, _ in _blocks(path, block):
        spans: set[tuple[int, int]] = set()
        for marker in markers:
            pos = buf.find(marker.needle, 0, end)
            while pos >= 0:
                start = buf.rfind(b"\n", 0, pos) + 1
                stop = buf.find(b"\n", pos, end)
                stop = end if stop < 0 else stop + 1
                spans.add((start, stop))
                pos = buf.find(marker.needle, stop, end)
        for start, stop in sorted(spans):
            yield buf[start:stop]


def scan_file(
    path: Path,
    markers: tuple[Marker, ...] = MARKERS,
    block: int = BLOCK,
    excerpt_lines: int = EXCERPT_LINES,
    max_points: int = 2000,
    on_line: Callable[[Marker, str], None] | None = None,
) -> FileScan:
    """Scan one log. Never raises on content (binary garbage, a truncated last line); OSError on I/O."""
    scan = FileScan(path)
    lines_before = 0
    for buf, end, cut in _blocks(path, block):
        scan.bytes_read += end
        scan.cut_lines += cut

        def where(start: int, line: str, buf: bytes = buf, before: int = lines_before) -> str:
            number = before + buf.count(b"\n", 0, start) + 1
            return f"{path.name}:{number}: {line[:MAX_LINE]}"

        def keep(name: str, start: int, line: str) -> None:
            kept = scan.excerpts.setdefault(name, [])
            if len(kept) < excerpt_lines:
                kept.append(where(start, line))

        for marker in markers:
            if not marker.parse:
                hits = buf.count(marker.needle, 0, end)
                if not hits:
                    continue
                scan.counts[marker.name] = scan.counts.get(marker.name, 0) + hits
                if len(scan.excerpts.get(marker.name, ())) >= excerpt_lines:
                    continue
            pos = buf.find(marker.needle, 0, end)
            while pos >= 0:
                start = buf.rfind(b"\n", 0, pos) + 1
                stop = buf.find(b"\n", pos, end)
                stop = end if stop < 0 else stop
                line = buf[start:stop].decode("utf-8", errors="replace")
                if "\x1b" in line:
                    line = _ANSI.sub("", line)
                if "\ufffd" in line:
                    scan.undecodable = True
                if marker.parse:
                    name = _classify(scan, marker, line, max_points)
                    if name is not None:
                        scan.counts[name] = scan.counts.get(name, 0) + 1
                        keep(name, start, line)
                    row = scan.ucx_row if name == "ucx_kv_row" else None
                    if row is not None and row not in scan.kv_rows and len(scan.kv_rows) < MAX_KV_ROWS:
                        scan.kv_rows[row] = where(start, line)
                else:
                    keep(marker.name, start, line)
                    if len(scan.excerpts[marker.name]) >= excerpt_lines:
                        break
                if on_line is not None:
                    on_line(marker, line)
                pos = buf.find(marker.needle, stop, end)
        lines_before += buf.count(b"\n", 0, end)
    scan.lines = lines_before
    return scan
