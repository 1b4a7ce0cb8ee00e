"""The node-side half of the run-owned etcd (``python -m atomdyn_launchers.job.owned_etcd serve``): etcd runs in a
job of its own until SIGTERM, publishing its endpoint once healthy (:mod:`atomdyn_launchers.nodes.etcd_owned`
submits the job and waits for it). It runs with the node's Python."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_launchers.contract.direct_http import DIRECT

MODULE = "atomdyn_launchers.job.owned_etcd"
START_TIMEOUT_S = 30.0
_POLL_S = 0.05


class OwnedEtcdError(RuntimeError):
    """The run-owned etcd could not be provided, started or stopped; the message says which and why."""


def etcd_healthy(endpoint: str, timeout: float = 1.0) -> bool:
    try:
        with DIRECT.open(f"{endpoint}/health", timeout=timeout) as response:
            body = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return isinstance(body, dict) and body.get("health") == "true"


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) and "endpoint" in loaded else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def _node_address() -> str:
    """The address the node's hostname resolves to (what the other nodes and Dynamo use)."""
    try:
        return str(socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)[0][4][0])
    except (OSError, IndexError) as exc:
        raise OwnedEtcdError(
            f"the hostname {socket.gethostname()} does not resolve to an IPv4 address"
        ) from exc


def serve(binary: Path, record: Path, log: Path) -> int:
    """Run etcd until SIGTERM; publish the endpoint once healthy; clean up its data directory."""
    address = _node_address()
    client, peer = _free_port(), _free_port()
    data = Path(tempfile.mkdtemp(prefix="atomdyn-etcd-"))
    endpoint = f"http://{address}:{client}"
    name = f"atomdyn-{socket.gethostname()}"
    argv = [
        str(binary), f"--name={name}", f"--data-dir={data}",
        f"--listen-client-urls=http://0.0.0.0:{client}", f"--advertise-client-urls={endpoint}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster={name}=http://127.0.0.1:{peer}", "--initial-cluster-state=new",
        "--logger=zap", "--log-outputs=stderr",
    ]  # fmt: skip
    stop = {"signal": 0}
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop["signal"] = signum
        proc.terminate()  # the wait below returns as soon as etcd has exited

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    status = 1
    info: dict[str, Any] = {"endpoint": endpoint, "node": socket.gethostname(), "pid": proc.pid,
                            "binary": str(binary), "data_dir": str(data), "job_id": os.environ.get("SLURM_JOB_ID")}  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not etcd_healthy(endpoint):
            if proc.poll() is not None:
                print(f"etcd exited ({proc.returncode}) before answering /health; see {log}", file=sys.stderr)
                return 1
            if stop["signal"]:
                return 0
            if time.monotonic() >= deadline:
                print(
                    f"etcd did not answer {endpoint}/health within {START_TIMEOUT_S:.0f} s", file=sys.stderr
                )
                return 1
            time.sleep(_POLL_S)
        with (
            contextlib.suppress(OSError, ValueError),
            DIRECT.open(f"{endpoint}/version", timeout=2.0) as resp,
        ):
            info["version"] = json.loads(resp.read()).get("etcdserver")
        info["started"] = _now()
        atomic_write_json(record, info)
        print(f"etcd serving at {endpoint} (version {info.get('version')})", flush=True)
        proc.wait()
        status = 0 if stop["signal"] else 1
        if status:
            print(f"etcd exited on its own ({proc.returncode}); see {log}", file=sys.stderr)
        return status
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(data, ignore_errors=True)
        if read_record(record) is not None:
            info.update(stopped=_now(), exit_status=status, etcd_returncode=proc.returncode)
            atomic_write_json(record, info)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE, description="node side of the run-owned etcd")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--binary", type=Path, required=True)
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--log", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        return serve(args.binary, args.record, args.log)
    except OwnedEtcdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
