"""Readiness through etcd's JSON gateway, against a real etcd started on loopback by the test."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from atomdyn_launchers.contract.readiness import (
    ReadinessError,
    Registration,
    frontend_instances,
    worker_ready,
)
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import prefix_end, run_prefix
from atomdyn_launchers.run.etcd_watch import RoleEvent, RoleWatcher

IN_CI = os.environ.get("CI") == "true"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = shutil.which("etcd")
    if exe is None:
        if IN_CI:
            pytest.fail("etcd is not installed (.ci/run must install etcd-server)")
        pytest.skip("etcd is not installed")
    data = tmp_path_factory.mktemp("etcd")
    client, peer = _free_port(), _free_port()
    url = f"http://127.0.0.1:{client}"
    log = (data / "etcd.log").open("w")
    proc = subprocess.Popen(
        [exe, "--name", f"t{os.getpid()}", "--data-dir", str(data / "d"), "--listen-client-urls", url,
         "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"t{os.getpid()}=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    log.close()  # the child keeps its own descriptor
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                EtcdClient(url, timeout_s=1).version()
                break
            except ReadinessError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "etcd did not answer /version: " + (data / "etcd.log").read_text()[-500:]
                    ) from exc
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_prefix_end_covers_exactly_the_prefix() -> None:
    assert prefix_end("atomdyn/runs/x/roles/") == "atomdyn/runs/x/roles0"
    assert prefix_end("atomdyn/runs/x/roles/") > "atomdyn/runs/x/roles/decode"


def test_unreachable_etcd_is_named(etcd: str) -> None:
    with pytest.raises(
        ReadinessError, match=r"etcd is unreachable \(/version\) at every endpoint: http://127.0.0.1:9: "
    ):
        EtcdClient("http://127.0.0.1:9", timeout_s=1).version()
    with pytest.raises(ReadinessError, match=r"must look like http\(s\)://HOST:PORT"):
        EtcdClient("ftp://x:1/")


def test_watch_sees_registration_and_lease_revocation(etcd: str) -> None:
    client = EtcdClient(etcd)
    prefix = run_prefix(f"watch-{os.getpid()}")
    events: queue.Queue[RoleEvent] = queue.Queue()
    # A key that exists before the watch starts is reported too.
    lease0 = client.grant(10)
    early = Registration("prefill", "1", "node1", "10.0.0.1", {"prefill": 8082}, {"prefill": 11}, time.time())
    client.put(prefix + "prefill", early.to_json(), lease0)
    watcher = RoleWatcher(client, prefix, events)
    watcher.start()
    try:
        first = events.get(timeout=5)
        assert (first.kind, first.role, first.registration) == ("registered", "prefill", early)
        lease = client.grant(10)
        reg = Registration(
            "decode", "2", "node2", "10.0.0.2", {"frontend": 8000}, {"frontend": 12}, time.time()
        )
        client.put(prefix + "decode", reg.to_json(), lease)
        client.put(f"{prefix[:-1]}-other/decode", "{}")  # outside the prefix: not reported
        second = events.get(timeout=5)
        assert (second.kind, second.role, second.registration) == ("registered", "decode", reg)
        started = time.monotonic()
        client.revoke(lease)
        gone = events.get(timeout=5)
        assert (gone.kind, gone.role) == ("deregistered", "decode")
        assert time.monotonic() - started < 1.0
        assert client.keepalive(lease) <= 0
    finally:
        watcher.stop()
    assert set(client.get_prefix(prefix)[0]) == {prefix + "prefill"}
    client.delete_prefix(prefix)
    assert client.get_prefix(prefix)[0] == {}


class _Health(BaseHTTPRequestHandler):
    """Answers like a Dynamo worker's system port: 503 'notready' until the generate endpoint is up."""

    ready = threading.Event()

    def do_GET(self) -> None:
        state = "ready" if self.ready.is_set() else "notready"
        body = f'{{"status":"notready","endpoints":{{"generate":"{state}"}}}}'.encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_register_helper_waits_for_health_then_holds_a_lease_until_sigterm(etcd: str, tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = EtcdClient(etcd)
    prefix = run_prefix(f"reg-{os.getpid()}")
    events: queue.Queue[RoleEvent] = queue.Queue()
    watcher = RoleWatcher(client, prefix, events)
    watcher.start()
    helper = subprocess.Popen(
        [sys.executable, "-m", "atomdyn_launchers.job.readiness", "register", "--etcd", etcd, "--key", prefix + "decode",
         "--role", "decode", "--job-id", "42", "--node", "node2", "--port", f"decode={server.server_port}",
         "--pid", f"self={os.getpid()}", "--worker-health", f"http://127.0.0.1:{server.server_port}/health",
         "--ttl", "3", "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        with pytest.raises(queue.Empty):
            events.get(timeout=0.5)  # not ready yet: nothing registered
        _Health.ready.set()
        event = events.get(timeout=10)
        assert event.kind == "registered" and event.registration is not None
        assert event.registration.job_id == "42" and event.registration.node == "node2"
        assert event.registration.host == "127.0.0.1"  # the source address towards etcd
        assert event.registration.ports == {"decode": server.server_port}
        # Still registered after more than one TTL: the helper keeps its lease alive.
        with pytest.raises(queue.Empty):
            events.get(timeout=4)
        helper.send_signal(signal.SIGTERM)
        gone = events.get(timeout=5)
        assert (gone.kind, gone.role) == ("deregistered", "decode")
        out, _ = helper.communicate(timeout=10)
        assert helper.returncode == 0, out
        assert "lease revoked" in out
    finally:
        if helper.poll() is None:
            helper.kill()
        watcher.stop()
        server.shutdown()
        server.server_close()


def test_register_helper_fails_when_a_process_dies_before_health(etcd: str) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    done = subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.job.readiness", "register", "--etcd", etcd, "--key", "k", "--role",
         "prefill", "--pid", f"prefill={dead.pid}", "--worker-health", "http://127.0.0.1:9/health"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 3
    assert f"process prefill (pid {dead.pid}) exited before becoming healthy" in done.stderr


def test_health_parsers_follow_dynamo_answers() -> None:
    assert worker_ready({"status": "notready", "endpoints": {"generate": "ready"}})
    assert not worker_ready({"status": "notready", "endpoints": {"generate": "notready"}})
    assert not worker_ready(None)
    body = {
        "status": "healthy",
        "instances": [
            {"component": "backend", "endpoint": "generate", "instance_id": 1},
            {"component": "backend", "endpoint": "router-discovery", "instance_id": 2},
            {"component": "prefill", "endpoint": "generate", "instance_id": 3},
        ],
    }
    assert frontend_instances(body) == {"backend": 1, "prefill": 1}


def test_register_helper_reports_an_unreachable_etcd() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "atomdyn_launchers.job.readiness", "register", "--etcd", "http://127.0.0.1:9",
         "--key", "k", "--role", "decode"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 5
    assert (
        "register: etcd is unreachable (/v3/lease/grant) at every endpoint: http://127.0.0.1:9" in done.stderr
    )
