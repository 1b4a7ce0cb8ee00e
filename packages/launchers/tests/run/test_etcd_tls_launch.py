"""A disaggregated run on the local cluster against an etcd with TLS, client certificates and users.

The etcd listens on https in the cluster's head namespace; the launcher and the registration helpers reach
it with the CN-less certificate and the ``atomdyn`` user, Dynamo's frontend and mock engines with the
certificate whose CN is the ``dynamo`` user (Dynamo 1.3 skips TLS when a user name is set). The launcher
runs with ``http_proxy`` pointing at a dead address: cluster traffic never goes through a proxy.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import secure_etcd

from atomdyn_launchers.config.cluster import ClusterConfig, parse_cluster_env
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.etcd.keys import run_prefix
from atomdyn_launchers.rehearsal.localcluster import LocalCluster
from atomdyn_launchers.rehearsal.localcluster.layout import HEAD
from atomdyn_launchers.run.launch import run
from atomdyn_launchers.run.options import LaunchOptions

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls_etcd(
    local_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[secure_etcd.SecureEtcd]:
    secure_etcd.require_tools()
    layout = local_cluster.layout()
    server = secure_etcd.start(
        tmp_path_factory.mktemp("tls-etcd"), address=layout.head_addr, netns=layout.netns_path(HEAD)
    )
    try:
        yield server
    finally:
        server.stop()


def _tls_config(base: ClusterConfig, etcd: secure_etcd.SecureEtcd) -> ClusterConfig:
    env = {key: value for key, value in base.to_env().items() if not key.startswith("ETCD_")}
    env.update(etcd.cluster_env())
    return parse_cluster_env("".join(f"{key}='{value}'\n" for key, value in env.items()), "tls test")


def test_disagg_run_against_tls_etcd_with_authentication(
    local_cluster_config: ClusterConfig, tls_etcd: secure_etcd.SecureEtcd, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not any(Path(sys.prefix).glob("lib/python3*/site-packages/dynamo/mocker/__main__.py")):
        pytest.skip("ai-dynamo is not installed in this venv (the rehearsal's mock engine)")
    proxy = f"http://127.0.0.1:{secure_etcd.free_port()}"
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(name, proxy)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    config = _tls_config(local_cluster_config, tls_etcd)
    assert config.etcd_endpoints == (tls_etcd.endpoint,) and tls_etcd.endpoint.startswith("https://")

    outcome = run(LaunchOptions(kind="disagg", requests=8, concurrency=4), config)

    assert outcome.passed, outcome.failure
    # Dynamo's discovery went through the TLS etcd: every response names two different workers.
    assert outcome.results and all(
        r.ok and r.prefill_worker_id != r.decode_worker_id for r in outcome.results
    )
    script = (outcome.run_dir / "scripts" / "prefill.sbatch").read_text()
    _cert, key = tls_etcd.pair(secure_etcd.DYNAMO_USER)
    assert f'ETCD_AUTH_CLIENT_KEY="$(cat {key})"' in script and "PRIVATE KEY" not in script
    assert "ETCD_AUTH_USERNAME" not in script and "--etcd-user atomdyn" in script
    client = EtcdClient(tls_etcd.access())
    assert client.get_prefix(run_prefix(outcome.run_id))[0] == {}
    namespace = f"atomdyn-{outcome.run_id.lower()}"
    assert client.get_prefix(f"v1/instances/{namespace}/")[0] == {}
