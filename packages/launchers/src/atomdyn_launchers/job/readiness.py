"""The in-job readiness helper: ``python -m atomdyn_launchers.job.readiness register …``.

Inside a job it waits until the role's own processes answer on their health endpoints, then writes
``<prefix>/<role>`` (host, ports, role, job id, pids) under an etcd lease it keeps alive. On SIGTERM it revokes
the lease, so the key disappears the moment the role stops; if the job dies hard the key expires with the lease
TTL. It stops the role when the launcher's presence key vanishes or etcd stays silent past the grace.

It runs with the node's Python and imports only the contract and the etcd client (standard library).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from atomdyn_launchers.contract.leases import (
    ETCD_LOST_S,
    LEASE_TTL_S,
    REFRESH_S,
    EtcdSilence,
    call_timeout_for,
)
from atomdyn_launchers.contract.readiness import (
    ReadinessError,
    Registration,
    frontend_ready,
    http_json,
    wait_until,
    worker_ready,
)
from atomdyn_launchers.etcd.access import Endpoint, EtcdAccess
from atomdyn_launchers.etcd.client import EtcdClient


def local_address_towards(endpoint: Endpoint) -> str:
    """The source address this node uses to reach ``endpoint``: the management address peers can use."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((endpoint.host, endpoint.port))
        return str(probe.getsockname()[0])


@dataclass
class _RegisterArgs:
    etcd: EtcdAccess
    key: str
    role: str
    job_id: str
    node: str
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    worker_health: list[str] = field(default_factory=list)
    frontend_health: list[str] = field(default_factory=list)
    timeout_s: float = 600.0
    ttl_s: int = LEASE_TTL_S
    etcd_lost_s: float = ETCD_LOST_S
    launcher_key: str | None = None


def _pairs(values: Sequence[str], what: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for value in values:
        name, sep, number = value.partition("=")
        if not sep or not name or not number.isdigit():
            raise SystemExit(f"register: bad {what} {value!r}, expected NAME=NUMBER")
        out[name] = int(number)
    return out


def register_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="atomdyn_launchers.job.readiness register")
    parser.add_argument("--etcd", required=True, help="etcd endpoint(s), comma-separated")
    parser.add_argument("--etcd-ca", help="CA file for https endpoints")
    parser.add_argument("--etcd-cert", help="client certificate file (its CN empty: see EtcdAccess)")
    parser.add_argument("--etcd-key", help="client key file")
    parser.add_argument("--etcd-user", help="etcd user (authentication on)")
    parser.add_argument("--etcd-password-file", help="file holding the etcd user's password")
    parser.add_argument("--key", required=True)
    parser.add_argument("--role", required=True)
    parser.add_argument("--job-id", default=os.environ.get("SLURM_JOB_ID", ""))
    parser.add_argument("--node", default=os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    parser.add_argument("--port", action="append", default=[], help="NAME=PORT to publish")
    parser.add_argument("--pid", action="append", default=[], help="NAME=PID to publish and watch")
    parser.add_argument("--worker-health", action="append", default=[], help="URL of a worker /health")
    parser.add_argument("--frontend-health", action="append", default=[], help="URL of a frontend /health")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--ttl", type=int, default=LEASE_TTL_S)
    parser.add_argument(
        "--etcd-lost-s", type=float, default=ETCD_LOST_S, help="etcd silence that fails the role (< --ttl)"
    )
    parser.add_argument("--launcher-key", help="stop (exit 6) when this key vanishes: the launcher is gone")
    ns = parser.parse_args(argv)
    access = EtcdAccess.parse(
        ns.etcd,
        ca=ns.etcd_ca,
        cert=ns.etcd_cert,
        key=ns.etcd_key,
        user=ns.etcd_user,
        password_file=ns.etcd_password_file,
    )
    args = _RegisterArgs(
        etcd=access,
        key=ns.key,
        role=ns.role,
        job_id=ns.job_id,
        node=ns.node,
        ports=_pairs(ns.port, "port"),
        pids=_pairs(ns.pid, "pid"),
        worker_health=list(ns.worker_health),
        frontend_health=list(ns.frontend_health),
        timeout_s=ns.timeout,
        ttl_s=ns.ttl,
        launcher_key=ns.launcher_key,
        etcd_lost_s=ns.etcd_lost_s,
    )
    return register(args)


def _health_missing(args: _RegisterArgs) -> str | None:
    for name, pid in args.pids.items():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise ReadinessError(f"process {name} (pid {pid}) exited before becoming healthy") from None
        except PermissionError:
            pass
    for url in args.worker_health:
        try:
            _, body = http_json(url)
        except OSError:
            return f"worker health {url} not answering"
        if not worker_ready(body):
            return f"worker health {url} not ready: {json.dumps(body)[:200]}"
    for url in args.frontend_health:
        try:
            _, body = http_json(url)
        except OSError:
            return f"frontend health {url} not answering"
        if not frontend_ready(body):
            return f"frontend health {url} not healthy"
    return None


def register(args: _RegisterArgs) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # 2 s per call: on SIGTERM a call in flight and the revoke fit the job script's 5 s stop grace, so the key
    # goes at once instead of living out its TTL after a SIGKILL. A longer grace (a starved rehearsal node) takes
    # longer calls; a key left by a SIGKILL then goes with its lease or with the launcher's cleanup.
    client = EtcdClient(args.etcd, timeout_s=call_timeout_for(args.etcd_lost_s, 2.0))
    started = time.monotonic()
    try:
        wait_until(
            f"role {args.role}'s processes to become healthy",
            lambda: None if stop.is_set() else _health_missing(args),
            started + args.timeout_s,
        )
    except ReadinessError as exc:
        print(f"register: {exc}", file=sys.stderr, flush=True)
        return 3
    if stop.is_set():
        return 0
    lease = client.grant(args.ttl_s)
    host = local_address_towards(client.endpoint)  # the endpoint that answered
    registration = Registration(
        role=args.role,
        job_id=args.job_id,
        node=args.node,
        host=host,
        ports=args.ports,
        pids=args.pids,
        registered_at=time.time(),
    )
    client.put(args.key, registration.to_json(), lease)
    print(f"register: {args.key} -> {registration.to_json()} (lease {lease:x})", flush=True)
    silence = EtcdSilence(args.etcd_lost_s)
    try:
        # Event.wait returns at once on SIGTERM.
        while not stop.wait(min(REFRESH_S, args.ttl_s / 3)):
            try:
                remaining = client.keepalive(lease)
                present = (
                    not args.launcher_key or args.launcher_key in client.get_prefix(args.launcher_key)[0]
                )
            except ReadinessError as exc:
                silence.failed(str(exc))
                if (why := silence.lost(client.endpoint.url)) is None:
                    continue  # a slow answer: the lease has time left, retry
                print(f"register: etcd lost: {why}", file=sys.stderr, flush=True)
                return 5
            silence.answered()
            if remaining <= 0:
                print("register: etcd lease lost (expired on the server)", file=sys.stderr, flush=True)
                return 4
            if not present:
                # The launcher died without stopping the run (its lease expired): stop this role.
                print(
                    f"register: {args.launcher_key} vanished: the launcher is gone",
                    file=sys.stderr,
                    flush=True,
                )
                return 6
    finally:
        try:
            client.revoke(lease)
            print("register: lease revoked", flush=True)
        except ReadinessError as exc:
            print(f"register: could not revoke the lease: {exc}", file=sys.stderr, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "register":
        print(
            "usage: python -m atomdyn_launchers.job.readiness register --etcd URL[,URL…] --key KEY --role ROLE …"
        )
        return 2
    try:
        return register_main(argv[1:])
    except ReadinessError as exc:
        print(f"register: {exc}", file=sys.stderr, flush=True)
        return 5


if __name__ == "__main__":
    sys.exit(main())
