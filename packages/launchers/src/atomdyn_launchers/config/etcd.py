"""The configured etcd as the launchers and the workers reach it: the client's access, and Dynamo's TLS/user
environment for the job scripts."""

from __future__ import annotations

import shlex
from pathlib import Path

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.etcd.access import EtcdAccess


def etcd_access(config: ClusterConfig, endpoints: str | None = None) -> EtcdAccess:
    """The launchers' access to the configured etcd (or to ``endpoints``, a run-owned etcd: plain http)."""
    if endpoints is not None:
        return EtcdAccess.parse(endpoints)
    return EtcdAccess.parse(
        config.require_etcd(),
        ca=config.etcd_auth_ca,
        cert=config.etcd_gateway_client_cert or config.etcd_auth_client_cert,
        key=config.etcd_gateway_client_key or config.etcd_auth_client_key,
        user=config.etcd_auth_username,
        password_file=config.etcd_auth_password_file,
    )


def worker_etcd_env(config: ClusterConfig) -> dict[str, str]:
    """The configured etcd's TLS and user as Dynamo 1.3 reads them, for a job script's exports.

    Dynamo takes the PEM text itself in ETCD_AUTH_CA/CLIENT_CERT/CLIENT_KEY, so each value is a shell
    expansion that reads the file on the node (the script never holds a key). It uses TLS only with all
    three, and skips TLS whenever a user name is set: over https it authenticates with the certificate's
    CN and gets no user; over http it gets the user and the password.
    Values are shell text, already quoted (``"$(cat FILE)"``).
    """

    def contents(path: Path) -> str:
        return '"$(cat ' + shlex.quote(str(path)) + ')"'

    env: dict[str, str] = {}
    if config.etcd_auth_ca and config.etcd_auth_client_cert and config.etcd_auth_client_key:
        env["ETCD_AUTH_CA"] = contents(config.etcd_auth_ca)
        env["ETCD_AUTH_CLIENT_CERT"] = contents(config.etcd_auth_client_cert)
        env["ETCD_AUTH_CLIENT_KEY"] = contents(config.etcd_auth_client_key)
    elif config.etcd_auth_username and config.etcd_auth_password_file:
        env["ETCD_AUTH_USERNAME"] = shlex.quote(config.etcd_auth_username)
        env["ETCD_AUTH_PASSWORD"] = contents(config.etcd_auth_password_file)
    return env
