"""A real etcd with TLS, client-certificate authentication and users, for the tests.

Certificates come from the openssl command line: a CA, a server certificate for the listening address, a
client certificate whose CN is the etcd user Dynamo acts as, and one without a CN for the launchers (etcd's
JSON gateway refuses a certificate with a CN while authentication is on). Users: root, ``atomdyn`` (the
launchers: read-write under ``atomdyn/``, read under ``v1/``) and ``dynamo`` (read-write everywhere).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from atomdyn_launchers.etcd.access import EtcdAccess
from atomdyn_launchers.etcd.client import EtcdClient

IN_CI = os.environ.get("CI") == "true"
LAUNCHER_USER = "atomdyn"
DYNAMO_USER = "dynamo"


def require_tools() -> None:
    """Skip without etcd, etcdctl and openssl; in CI (CI=true) fail instead."""
    missing = [tool for tool in ("etcd", "etcdctl", "openssl") if shutil.which(tool) is None]
    if missing:
        message = f"missing {', '.join(missing)} (Debian: etcd-server etcd-client openssl)"
        if IN_CI:
            pytest.fail(message + "; .ci/run must install them")
        pytest.skip(message)


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def _openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {done.stderr.strip()}")


def _issue(directory: Path, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
    key, csr, cert, ext = (directory / f"{name}{s}" for s in (".key", ".csr", ".pem", ".ext"))
    ext.write_text(extensions + "\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
             "-out", str(csr), "-subj", subject)  # fmt: skip
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(directory / "ca.pem"), "-CAkey",
             str(directory / "ca.key"), "-CAcreateserial", "-out", str(cert), "-days", "2",
             "-extfile", str(ext))  # fmt: skip
    return cert, key


@dataclass
class SecureEtcd:
    endpoint: str
    directory: Path
    proc: subprocess.Popen[bytes]
    root_password: str

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def password_file(self) -> Path:
        return self.directory / "atomdyn.password"

    def pair(self, name: str) -> tuple[Path, Path]:
        return self.directory / f"{name}.pem", self.directory / f"{name}.key"

    def access(self, endpoints: str | None = None) -> EtcdAccess:
        """The launchers' access: the CN-less certificate and the ``atomdyn`` user."""
        cert, key = self.pair("launcher")
        return EtcdAccess.parse(
            endpoints or self.endpoint,
            ca=self.ca,
            cert=cert,
            key=key,
            user=LAUNCHER_USER,
            password_file=self.password_file,
        )

    def cluster_env(self) -> dict[str, str]:
        """The cluster.env keys for this etcd."""
        dyn_cert, dyn_key = self.pair(DYNAMO_USER)
        gw_cert, gw_key = self.pair("launcher")
        return {
            "ETCD_ENDPOINTS": self.endpoint,
            "ETCD_AUTH_CA": str(self.ca),
            "ETCD_AUTH_CLIENT_CERT": str(dyn_cert),
            "ETCD_AUTH_CLIENT_KEY": str(dyn_key),
            "ETCD_AUTH_USERNAME": LAUNCHER_USER,
            "ETCD_AUTH_PASSWORD_FILE": str(self.password_file),
            "ETCD_GATEWAY_CLIENT_CERT": str(gw_cert),
            "ETCD_GATEWAY_CLIENT_KEY": str(gw_key),
        }

    def etcdctl(self, *args: str, user: str | None = "root") -> str:
        cert, key = self.pair("launcher")
        argv = ["etcdctl", f"--endpoints={self.endpoint}", f"--cacert={self.ca}", f"--cert={cert}",
                f"--key={key}", "--dial-timeout=5s", "--command-timeout=10s"]  # fmt: skip
        if user == "root":
            argv.append(f"--user=root:{self.root_password}")
        env = {**os.environ, "ETCDCTL_API": "3"}
        done = subprocess.run([*argv, *args], capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)


def start(directory: Path, address: str = "127.0.0.1", netns: Path | None = None) -> SecureEtcd:
    """Certificates, then etcd listening on https://ADDRESS (inside ``netns`` when given), then users."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", str(directory / "ca.key"), "-out", str(directory / "ca.pem"), "-days", "2",
             "-subj", "/CN=atomdyn test CA")  # fmt: skip
    _issue(
        directory,
        "server",
        "/CN=etcd",
        f"subjectAltName=IP:{address}\nextendedKeyUsage=serverAuth,clientAuth",
    )
    _issue(directory, DYNAMO_USER, f"/CN={DYNAMO_USER}", "extendedKeyUsage=clientAuth")
    _issue(directory, "launcher", "/O=atomdyn launchers", "extendedKeyUsage=clientAuth")
    password = secrets.token_hex(12)
    (directory / "atomdyn.password").write_text(password + "\n")
    client, peer = free_port(), free_port()  # probed on the host; the namespace has its own ports
    endpoint = f"https://{address}:{client}"
    argv = [
        "etcd", f"--name=secure{client}", f"--data-dir={directory / 'data'}",
        f"--listen-client-urls={endpoint}", f"--advertise-client-urls={endpoint}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=secure{client}=http://127.0.0.1:{peer}",
        f"--cert-file={directory / 'server.pem'}", f"--key-file={directory / 'server.key'}",
        f"--trusted-ca-file={directory / 'ca.pem'}", "--client-cert-auth",
    ]  # fmt: skip
    if netns is not None:
        argv = ["nsenter", f"--net={netns}", "--", *argv]
    with (directory / "etcd.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    etcd = SecureEtcd(endpoint, directory, proc, secrets.token_hex(12))
    try:
        probe = EtcdClient(EtcdAccess.parse(endpoint, ca=etcd.ca, cert=etcd.pair("launcher")[0],
                                            key=etcd.pair("launcher")[1]), timeout_s=1.0)  # fmt: skip
        deadline = time.monotonic() + 30
        while not probe.healthy():
            if proc.poll() is not None or time.monotonic() > deadline:
                log_tail = (directory / "etcd.log").read_text(errors="replace")[-800:]
                raise RuntimeError(f"etcd at {endpoint} did not answer /health within 30 s: {log_tail}")
            time.sleep(0.05)  # polling interval while waiting for /health
        for args in (
            ["user", "add", f"root:{etcd.root_password}"],
            ["user", "add", f"{LAUNCHER_USER}:{password}"],
            ["user", "add", f"{DYNAMO_USER}:{secrets.token_hex(12)}"],  # acts through its certificate's CN
            ["role", "add", "launchers"],
            ["role", "grant-permission", "launchers", "--prefix=true", "readwrite", "atomdyn/"],
            ["role", "grant-permission", "launchers", "--prefix=true", "read", "v1/"],
            ["user", "grant-role", LAUNCHER_USER, "launchers"],
            ["role", "add", "dynamo"],
            ["role", "grant-permission", "dynamo", "--prefix=true", "readwrite", ""],
            ["user", "grant-role", DYNAMO_USER, "dynamo"],
            ["auth", "enable"],
        ):
            etcd.etcdctl(*args, user=None)
    except BaseException:
        etcd.stop()
        raise
    return etcd
