"""A raw TCP copy between two nodes of the local cluster: what moving a KV transfer's bytes costs on the link
alone, to set beside the time NIXL took for them.

The shape is that of a NIXL READ, which the decode worker initiates: a server on the node that holds the
bytes (the prefill node) answers each request with the number of bytes asked, and a client on the reading
node (the decode node) times each request until its last byte has arrived. Both are this module, run by the
project's Python inside the node as its jobs are (``LocalCluster.node_command``: the node's network namespace,
so the bytes cross the cluster's veth link and bridge), on the nodes' own addresses.

``python -m atomdyn_launchers.rehearsal.rawcopy measure --bytes N`` measures between the running local cluster's
PREFILL_NODE and DECODE_NODE by hand.
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

_REQUEST = struct.Struct("!Q")  # bytes asked for; 0 ends the session
MAX_BYTES = 1 << 30  # one request's reply is sent from one buffer: bound what a request may allocate
DEFAULT_COPIES = 200
WARMUP_COPIES = 5  # connection start and TCP slow start: not what a steady KV path pays per transfer

NodeCommand = Callable[[str, list[str]], list[str]]


class RawCopyError(RuntimeError):
    """The raw copy could not be measured; the message says which side failed and why."""


@dataclass(frozen=True)
class RawCopy:
    """Per-copy times of ``nbytes`` from ``source`` to ``reader``, request to last byte."""

    source: str
    reader: str
    nbytes: int
    copies: int
    p50_s: float
    min_s: float

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"raw TCP copy {self.source} -> {self.reader} of {self.nbytes} bytes: "
            f"p50 {self.p50_s * 1e3:.3f} ms, min {self.min_s * 1e3:.3f} ms (n={self.copies})"
        )


def summarize(source: str, reader: str, nbytes: int, seconds: Sequence[float]) -> RawCopy:
    if not seconds:
        raise RawCopyError("no copy was timed")
    return RawCopy(source, reader, nbytes, len(seconds), statistics.median(seconds), min(seconds))


# -- the two sides (run inside the nodes) --------------------------------------------------------------------


def _recv_exact(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; False when the peer closed first."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def serve(bind_addr: str, timeout_s: float, out: Callable[[str], None] = print) -> None:
    """Accept one reader on ``bind_addr`` (port chosen by the kernel, announced as ``listening PORT``) and
    answer each request with that many bytes until the reader sends 0 or closes."""
    with socket.create_server((bind_addr, 0)) as listener:
        listener.settimeout(timeout_s)
        out(f"listening {listener.getsockname()[1]}")
        try:
            conn, _peer = listener.accept()
        except TimeoutError:
            raise RawCopyError(f"no reader connected to {bind_addr} within {timeout_s:.0f} s") from None
    with conn:
        conn.settimeout(timeout_s)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request = bytearray(_REQUEST.size)
        payload = memoryview(b"")
        while _recv_exact(conn, memoryview(request)):
            (nbytes,) = _REQUEST.unpack(request)
            if nbytes == 0:
                return
            if nbytes > MAX_BYTES:
                raise RawCopyError(f"a request for {nbytes} bytes is over the limit of {MAX_BYTES}")
            if len(payload) < nbytes:
                payload = memoryview(bytes(range(256)) * (nbytes // 256 + 1))
            conn.sendall(payload[:nbytes])


def fetch(addr: str, port: int, nbytes: int, copies: int, timeout_s: float) -> list[float]:
    """Seconds per copy of ``nbytes`` from the server at ``addr:port``, after WARMUP_COPIES untimed ones."""
    buffer = memoryview(bytearray(nbytes))
    request = _REQUEST.pack(nbytes)
    times: list[float] = []
    with socket.create_connection((addr, port), timeout=timeout_s) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(WARMUP_COPIES + copies):
            start = time.perf_counter()
            conn.sendall(request)
            if not _recv_exact(conn, buffer):
                raise RawCopyError(f"the server at {addr}:{port} closed after {i} copies")
            elapsed = time.perf_counter() - start
            if i >= WARMUP_COPIES:
                times.append(elapsed)
        conn.sendall(_REQUEST.pack(0))
    return times


# -- the two sides started in their nodes --------------------------------------------------------------------


def _await_port(server: subprocess.Popen[str], deadline: float, where: str) -> int:
    """The port the server announces; fails naming the node when it exits or stays silent past the deadline."""
    assert server.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(server.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RawCopyError(f"the raw-copy server on {where} did not announce its port in time")
            if sel.select(timeout=left):
                line = server.stdout.readline()
                if line.startswith("listening "):
                    return int(line.split()[1])
                if not line:  # exited before listening
                    _out, err = server.communicate(timeout=5)
                    raise RawCopyError(f"the raw-copy server on {where} exited: {err.strip()[-500:]}")


def measure(
    node_command: NodeCommand,
    source: str,
    source_addr: str,
    reader: str,
    nbytes: int,
    copies: int = DEFAULT_COPIES,
    timeout_s: float = 60.0,
    python: str = sys.executable,
) -> RawCopy:
    """Time ``copies`` reads of ``nbytes`` by ``reader`` from ``source`` (at ``source_addr``), each side in its
    own node through ``node_command`` (e.g. ``LocalCluster.node_command``)."""
    if not 0 < nbytes <= MAX_BYTES:
        raise RawCopyError(f"bytes per copy must be between 1 and {MAX_BYTES}, not {nbytes}")
    if copies < 1:
        raise RawCopyError(f"copies must be at least 1, not {copies}")
    deadline = time.monotonic() + timeout_s
    module = [python, "-m", "atomdyn_launchers.rehearsal.rawcopy"]  # not __name__: "__main__" when run as one
    server = subprocess.Popen(
        node_command(source, [*module, "serve", source_addr, "--timeout", str(timeout_s)]),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = _await_port(server, deadline, source)
        argv = [*module, "fetch", source_addr, str(port), "--bytes", str(nbytes), "--copies", str(copies)]
        try:
            done = subprocess.run(
                node_command(reader, [*argv, "--timeout", str(timeout_s)]),
                capture_output=True,
                text=True,
                timeout=max(deadline - time.monotonic(), 1.0),
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise RawCopyError(
                f"{copies} copies from {source} to {reader} took over {timeout_s:.0f} s"
            ) from None
        if done.returncode != 0:
            raise RawCopyError(f"the raw-copy reader on {reader} failed: {done.stderr.strip()[-500:]}")
        seconds = [float(s) for s in json.loads(done.stdout)["seconds"]]
    finally:
        server.kill()
        server.communicate(timeout=10)
    return summarize(source, reader, nbytes, seconds)


def measure_in_local_cluster(
    state_dir: Path,
    nbytes: int,
    copies: int = DEFAULT_COPIES,
    source: str | None = None,
    reader: str | None = None,
) -> RawCopy:
    """:func:`measure` between two nodes of the local cluster at ``state_dir`` (default: its PREFILL_NODE to
    its DECODE_NODE), on the nodes' cluster addresses."""
    from atomdyn_launchers.rehearsal.localcluster.cluster import LocalCluster, LocalClusterError

    cluster = LocalCluster(state_dir)
    try:
        layout = cluster.layout()
        config = cluster.config()
        src, dst = source or config.prefill_node, reader or config.decode_node
        for node in (src, dst):
            if node not in layout.nodes:
                raise RawCopyError(f"no node {node!r} in the local cluster at {state_dir}")
        return measure(cluster.node_command, src, layout.node_addr(src), dst, nbytes, copies)
    except LocalClusterError as exc:
        raise RawCopyError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m atomdyn_launchers.rehearsal.rawcopy", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    srv = sub.add_parser("serve", help="(inside the source node) answer reads of N bytes")
    srv.add_argument("addr")
    srv.add_argument("--timeout", type=float, default=60.0)
    cli = sub.add_parser("fetch", help="(inside the reading node) time reads; prints JSON")
    cli.add_argument("addr")
    cli.add_argument("port", type=int)
    cli.add_argument("--bytes", type=int, required=True)
    cli.add_argument("--copies", type=int, default=DEFAULT_COPIES)
    cli.add_argument("--timeout", type=float, default=60.0)
    by_hand = sub.add_parser("measure", help="between two nodes of the running local cluster")
    by_hand.add_argument("--bytes", type=int, required=True, help="bytes per copy")
    by_hand.add_argument(
        "--copies", type=int, default=DEFAULT_COPIES, help=f"timed copies (default {DEFAULT_COPIES})"
    )
    by_hand.add_argument(
        "--state-dir", type=Path, default=None, help="the local cluster (default: this checkout's)"
    )
    by_hand.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            serve(args.addr, args.timeout, out=lambda line: print(line, flush=True))
        elif args.command == "fetch":
            print(json.dumps({"seconds": fetch(args.addr, args.port, args.bytes, args.copies, args.timeout)}))
        else:
            from atomdyn_launchers.config.cluster import default_local_state_dir

            result = measure_in_local_cluster(
                args.state_dir or default_local_state_dir(), args.bytes, args.copies
            )
            print(json.dumps(result.to_json()) if args.json else result.describe())
    except (RawCopyError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
