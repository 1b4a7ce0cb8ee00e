"""The launchers' etcd path against a real etcd with TLS, client certificates and users (tests/secure_etcd.py).

Every test runs with ``http_proxy``/``https_proxy`` pointing at a dead address: cluster traffic must never go
through a proxy (set on many clusters for downloads).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import secure_etcd

from atomdyn_launchers.config.cluster import PreflightError, parse_cluster_env
from atomdyn_launchers.contract.leases import lease_ttl_for
from atomdyn_launchers.contract.readiness import ReadinessError, Registration, http_json
from atomdyn_launchers.etcd.access import EtcdAccess
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import run_prefix
from atomdyn_launchers.run.etcd_watch import Presence, RoleEvent, RoleWatcher
from atomdyn_launchers.run.preflight import check_etcd
from atomdyn_launchers.run.smoke import SmokeClient, build_requests


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[secure_etcd.SecureEtcd]:
    secure_etcd.require_tools()
    server = secure_etcd.start(tmp_path_factory.mktemp("secure-etcd"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def dead_proxy(monkeypatch: pytest.MonkeyPatch) -> str:
    """A proxy address nothing listens on, in every spelling urllib reads; no bypass list."""
    proxy = f"http://127.0.0.1:{secure_etcd.free_port()}"
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return proxy


def _registration(role: str) -> Registration:
    return Registration(role, "7", "node1", "10.0.0.1", {role: 8081}, {role: 1}, time.time())


def test_kv_leases_watch_and_presence_over_tls_with_a_user(etcd: secure_etcd.SecureEtcd) -> None:
    client = EtcdClient(etcd.access())
    assert client.version().startswith("3.") and client.healthy()
    prefix = run_prefix(f"tls-{os.getpid()}")
    events: queue.Queue[RoleEvent] = queue.Queue()
    watcher = RoleWatcher(client, prefix, events)
    watcher.start()
    try:
        lease = client.grant(10)
        assert client.keepalive(lease) > 0
        client.put(prefix + "prefill", _registration("prefill").to_json(), lease)
        event = events.get(timeout=10)
        assert (event.kind, event.role) == ("registered", "prefill")
        client.revoke(lease)
        event = events.get(timeout=10)
        assert (event.kind, event.role) == ("deregistered", "prefill")
    finally:
        watcher.stop()
    presence = Presence(client, prefix + "launcher", ttl_s=3, lost_after_s=2.0)
    presence.start()
    try:
        assert prefix + "launcher" in client.get_prefix(prefix)[0]
        lease = client.get_lease(prefix + "launcher")
        # Over longer than the TTL, the lease never runs out: the presence keeps refreshing it.
        until = time.monotonic() + 4
        while time.monotonic() < until:
            assert client.time_to_live(lease) > 0
            time.sleep(0.2)  # sampling interval of the invariant
        assert prefix + "launcher" in client.get_prefix(prefix)[0]
    finally:
        presence.stop()
    assert client.get_prefix(prefix)[0] == {}


def _poll(what: str, value: Callable[[], object], timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := value()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.1)
    return found


@contextmanager
def _frozen(etcd: secure_etcd.SecureEtcd) -> Iterator[None]:
    os.kill(etcd.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(etcd.proc.pid, signal.SIGCONT)


def test_the_launchers_presence_waits_out_its_grace_and_then_names_the_silent_etcd(
    etcd: secure_etcd.SecureEtcd,
) -> None:
    # The vllm-cpu roles wait 30 s for etcd (a 2-core node stalls for 5-13 s under the engines): the
    # launcher must wait as long as they do, not fail the run on the default 5 s rule. Scaled down here.
    grace = 7.0
    client = EtcdClient(etcd.access(), timeout_s=2.0)
    presence = Presence(
        client,
        run_prefix(f"grace-{os.getpid()}") + "launcher",
        ttl_s=lease_ttl_for(grace),
        lost_after_s=grace,
    )
    assert presence.ttl_s > grace
    presence.start()
    try:
        with _frozen(etcd):  # silent for longer than the default rule, shorter than the grace
            until = time.monotonic() + 6.0
            while time.monotonic() < until:
                assert presence.lost() is None
                time.sleep(0.2)  # sampling interval of the invariant
        _poll("a refresh after etcd resumed", lambda: presence.silent_s < 1.5, 15)
        assert presence.lost() is None
        with _frozen(etcd):
            frozen_at = time.monotonic()
            why = _poll("the presence to name the silent etcd", presence.lost, grace + 10)
            # Not before the grace: the last refresh came at most 1.5 s before the freeze (checked above).
            assert time.monotonic() - frozen_at >= grace - 1.5
        assert etcd.endpoint in why and "has not answered for" in why, why
    finally:
        presence.stop()
    with pytest.raises(ValueError, match="must outlive the etcd grace"):
        Presence(client, "k", ttl_s=10, lost_after_s=30.0)


def test_endpoints_fail_over_to_the_one_that_answers(etcd: secure_etcd.SecureEtcd) -> None:
    dead = f"https://127.0.0.1:{secure_etcd.free_port()}"
    client = EtcdClient(etcd.access(f"{dead},{etcd.endpoint}"), timeout_s=2.0)
    key = f"atomdyn/failover-{os.getpid()}"
    client.put(key, "v")
    assert client.endpoint.url == etcd.endpoint
    assert client.get_prefix(key)[0] == {key: "v"}
    watch = client.watch(key, 1)
    watch.close()
    client.delete_prefix(key)


def test_refusals_name_what_is_wrong(etcd: secure_etcd.SecureEtcd, tmp_path: Path) -> None:
    access = etcd.access()
    key = "atomdyn/refused"
    no_user = EtcdAccess(access.endpoints, access.tls)
    with pytest.raises(ReadinessError, match=r"refused /v3/kv/put: HTTP \d+: etcdserver: "):
        EtcdClient(no_user).put(key, "v")
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    bad_password = EtcdAccess(access.endpoints, access.tls, access.user, wrong)
    with pytest.raises(ReadinessError, match=r"refused user 'atomdyn' \(/v3/auth/authenticate\)"):
        EtcdClient(bad_password).put(key, "v")
    # Outside what the launchers' role may write.
    with pytest.raises(ReadinessError, match="permission denied"):
        EtcdClient(access).put("elsewhere/key", "v")
    # A certificate with a CN is refused by the gateway while authentication is on.
    cert, cn_key = etcd.pair(secure_etcd.DYNAMO_USER)
    with_cn = EtcdAccess.parse(etcd.endpoint, ca=etcd.ca, cert=cert, key=cn_key, user="atomdyn",
                               password_file=etcd.password_file)  # fmt: skip
    with pytest.raises(ReadinessError, match="CommonName"):
        EtcdClient(with_cn).put(key, "v")
    # No client certificate: the TLS handshake fails, and the error says where.
    no_cert = EtcdAccess.parse(etcd.endpoint, ca=etcd.ca)
    with pytest.raises(
        ReadinessError, match=rf"unreachable \(/version\) at every endpoint: {etcd.endpoint}: "
    ):
        EtcdClient(no_cert, timeout_s=2.0).version()
    with pytest.raises(ReadinessError, match=r"etcd TLS: the CA file /absent/ca.pem does not exist"):
        EtcdClient(EtcdAccess.parse(etcd.endpoint, ca="/absent/ca.pem"))


def test_a_token_that_etcd_dropped_is_renewed(etcd: secure_etcd.SecureEtcd) -> None:
    client = EtcdClient(etcd.access())
    key = f"atomdyn/token-{os.getpid()}"
    client.put(key, "1")
    # Turning authentication off and on again invalidates every token etcd handed out.
    etcd.etcdctl("auth", "disable")
    etcd.etcdctl("auth", "enable", user=None)
    client.put(key, "2")
    assert client.get_prefix(key)[0] == {key: "2"}
    client.delete_prefix(key)


def test_register_helper_over_tls_holds_and_revokes_its_lease(etcd: secure_etcd.SecureEtcd) -> None:
    client = EtcdClient(etcd.access())
    prefix = run_prefix(f"tls-reg-{os.getpid()}")
    events: queue.Queue[RoleEvent] = queue.Queue()
    watcher = RoleWatcher(client, prefix, events)
    watcher.start()
    access = etcd.access(f"https://127.0.0.1:{secure_etcd.free_port()},{etcd.endpoint}")
    helper = subprocess.Popen(
        [sys.executable, "-m", "atomdyn_launchers.job.readiness", "register", *access.cli_args(),
         "--key", prefix + "decode", "--role", "decode", "--job-id", "9", "--node", "node2",
         "--pid", f"self={os.getpid()}", "--ttl", "3", "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        event = events.get(timeout=15)
        assert (event.kind, event.role) == ("registered", "decode")
        assert event.registration is not None and event.registration.host == "127.0.0.1"
        helper.send_signal(signal.SIGTERM)
        assert events.get(timeout=10).kind == "deregistered"
        out, _ = helper.communicate(timeout=10)
        assert helper.returncode == 0 and "lease revoked" in out, out
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.communicate()
        watcher.stop()


def test_preflight_checks_tls_and_the_user(etcd: secure_etcd.SecureEtcd, tmp_path: Path) -> None:
    base = (
        "SLURM_ACCOUNT=a\nSLURM_PARTITION=p\nSLURM_QOS=q\nPRIMARY_NODE=n1\nPREFILL_NODE=n1\nDECODE_NODE=n2\n"
        f"SHARED_DIR={tmp_path}\nMODEL_PATH={tmp_path}\nENGINE_PROFILE=mocker\nRUNTIME=venv\nPROJECT_DIR={tmp_path}\n"
    )
    keys = etcd.cluster_env()
    check_etcd(parse_cluster_env(base + "".join(f"{k}={v}\n" for k, v in keys.items())))
    # A listed endpoint that is down: the launchers would fail over, Dynamo 1.3 would not start.
    dead = f"https://127.0.0.1:{secure_etcd.free_port()}"
    with pytest.raises(
        PreflightError, match=rf"{dead}: .*Dynamo 1.3 does not start while a listed endpoint is down"
    ):
        check_etcd(
            parse_cluster_env(
                base
                + "".join(f"{k}={v}\n" for k, v in keys.items()).replace(
                    f"ETCD_ENDPOINTS={etcd.endpoint}", f"ETCD_ENDPOINTS={etcd.endpoint},{dead}"
                )
            )
        )
    wrong = tmp_path / "wrong"
    wrong.write_text("nope")
    keys["ETCD_AUTH_PASSWORD_FILE"] = str(wrong)
    with pytest.raises(
        PreflightError, match=r"ETCD_ENDPOINTS=https://.*refused user 'atomdyn'.*nothing was submitted"
    ):
        check_etcd(parse_cluster_env(base + "".join(f"{k}={v}\n" for k, v in keys.items())))


class _Frontend(BaseHTTPRequestHandler):
    """Answers like Dynamo's frontend: /health, and one disaggregated chat completion."""

    def do_GET(self) -> None:
        self._send({"status": "healthy", "instances": []})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send({
            "choices": [{"message": {"content": "hello"}}],
            "usage": {"completion_tokens": 3, "prompt_tokens": 5},
            "nvext": {"worker_id": {"prefill_worker_id": 1, "decode_worker_id": 2}, "timing": {"kv_hit_rate": 0.0}},
        })  # fmt: skip

    def _send(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_health_and_smoke_traffic_ignore_the_proxy() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Frontend)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        assert http_json(f"{base}/health") == (200, {"status": "healthy", "instances": []})
        result = SmokeClient(base, "m", timeout_s=5).send(build_requests(1)[0], require_pd=True)
        assert result.ok and result.status == 200, result.error
    finally:
        server.shutdown()
        server.server_close()
