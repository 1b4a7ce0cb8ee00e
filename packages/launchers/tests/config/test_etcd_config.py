"""The etcd keys of cluster.env: ETCD_ENDPOINTS as Dynamo reads it, TLS files and a user, checked together."""

from __future__ import annotations

import pytest

from atomdyn_launchers.config.cluster import ClusterConfigError, parse_cluster_env
from atomdyn_launchers.config.etcd import etcd_access

BASE = """\
SLURM_ACCOUNT=acct
SLURM_PARTITION=gpu
SLURM_QOS=normal
PRIMARY_NODE=n01
PREFILL_NODE=n01
DECODE_NODE=n02
SHARED_DIR=/shared
MODEL_PATH=/shared/models/m
ENGINE_PROFILE=mocker
RUNTIME=venv
PROJECT_DIR=/shared/checkout
"""
TLS = """\
ETCD_AUTH_CA=/shared/etcd/ca.pem
ETCD_AUTH_CLIENT_CERT=/shared/etcd/dynamo.pem
ETCD_AUTH_CLIENT_KEY=/shared/etcd/dynamo.key
"""


def _problems(text: str) -> list[str]:
    with pytest.raises(ClusterConfigError) as caught:
        parse_cluster_env(BASE + text)
    return caught.value.problems


def test_endpoints_list_round_trips_and_is_what_dynamo_reads() -> None:
    cfg = parse_cluster_env(BASE + "ETCD_ENDPOINTS='http://e1:2379,http://e2:2379, http://e3:2379'\n")
    assert cfg.etcd_endpoints == ("http://e1:2379", "http://e2:2379", "http://e3:2379")
    assert cfg.etcd_endpoint == "http://e1:2379"  # where the nodes' management route leads
    assert cfg.require_etcd() == "http://e1:2379,http://e2:2379,http://e3:2379"
    env = cfg.to_env()
    assert (
        env["ETCD_ENDPOINTS"] == "http://e1:2379,http://e2:2379,http://e3:2379" and "ETCD_ENDPOINT" not in env
    )
    assert parse_cluster_env(cfg.to_env_text()) == cfg


def test_the_one_endpoint_spelling_is_still_read_but_not_with_the_list() -> None:
    cfg = parse_cluster_env(BASE + "ETCD_ENDPOINT=http://e1:2379\n")
    assert cfg.etcd_endpoints == ("http://e1:2379",)
    problems = _problems("ETCD_ENDPOINTS=http://e1:2379\nETCD_ENDPOINT=http://e2:2379\n")
    assert problems == ["line 13: ETCD_ENDPOINT: ETCD_ENDPOINTS is set too; keep one of them"]


def test_bad_endpoint_lists_are_named() -> None:
    assert _problems("ETCD_ENDPOINTS=http://e1:2379,https://e2:2379\n" + TLS) == [
        "line 12: ETCD_ENDPOINTS: 'http://e1:2379,https://e2:2379' mixes http and https endpoints"
    ]
    assert _problems("ETCD_ENDPOINTS=http://e1:2379,http://e1:2379\n") == [
        "line 12: ETCD_ENDPOINTS: 'http://e1:2379,http://e1:2379' names an endpoint twice"
    ]
    assert _problems("ETCD_ENDPOINTS=http://e1:2379,\n") == [
        "line 12: ETCD_ENDPOINTS: '' is not http(s)://HOST:PORT"
    ]


def test_https_with_client_certificates_and_a_user() -> None:
    cfg = parse_cluster_env(
        BASE
        + "ETCD_ENDPOINTS=https://e1:2379,https://e2:2379\n"
        + TLS
        + "ETCD_AUTH_USERNAME=atomdyn\nETCD_AUTH_PASSWORD_FILE=/shared/etcd/pw\n"
        + "ETCD_GATEWAY_CLIENT_CERT=/shared/etcd/gw.pem\nETCD_GATEWAY_CLIENT_KEY=/shared/etcd/gw.key\n"
    )
    access = etcd_access(cfg)
    assert [ep.url for ep in access.endpoints] == ["https://e1:2379", "https://e2:2379"]
    # The launchers use the gateway certificate (no CN) and the user; Dynamo gets the ETCD_AUTH_* files.
    assert (str(access.tls.ca), str(access.tls.cert), str(access.tls.key)) == (
        "/shared/etcd/ca.pem",
        "/shared/etcd/gw.pem",
        "/shared/etcd/gw.key",
    )
    assert (access.user, str(access.password_file)) == ("atomdyn", "/shared/etcd/pw")
    assert parse_cluster_env(cfg.to_env_text()) == cfg


def test_tls_and_user_rules_follow_what_dynamo_can_use() -> None:
    assert _problems("ETCD_ENDPOINTS=https://e1:2379\nETCD_AUTH_CA=/ca.pem\n") == [
        "ETCD_ENDPOINTS: https needs ETCD_AUTH_CLIENT_CERT, ETCD_AUTH_CLIENT_KEY too "
        "(Dynamo 1.3 uses TLS only with CA, client certificate and key)"
    ]
    assert _problems("ETCD_ENDPOINTS=http://e1:2379\nETCD_AUTH_CA=/ca.pem\n") == [
        "ETCD_AUTH_CA: only for https endpoints (ETCD_ENDPOINTS is http)"
    ]
    assert _problems("ETCD_ENDPOINTS=http://e1:2379\nETCD_AUTH_USERNAME=u\n") == [
        "ETCD_AUTH_USERNAME and ETCD_AUTH_PASSWORD_FILE: set both or neither"
    ]
    assert _problems("ETCD_AUTH_USERNAME=u\nETCD_AUTH_PASSWORD_FILE=/pw\n") == [
        "ETCD_AUTH_PASSWORD_FILE: needs ETCD_ENDPOINTS (the run-owned etcd has no TLS)",
        "ETCD_AUTH_USERNAME: needs ETCD_ENDPOINTS (the run-owned etcd has no TLS)",
    ]
    assert _problems("ETCD_ENDPOINTS=https://e1:2379\n" + TLS + "ETCD_GATEWAY_CLIENT_CERT=/gw.pem\n") == [
        "ETCD_GATEWAY_CLIENT_CERT and ETCD_GATEWAY_CLIENT_KEY: set both or neither"
    ]
    # A user over plain http: the launchers and Dynamo both authenticate with it.
    cfg = parse_cluster_env(
        BASE + "ETCD_ENDPOINTS=http://e1:2379\nETCD_AUTH_USERNAME=u\nETCD_AUTH_PASSWORD_FILE=/pw\n"
    )
    assert etcd_access(cfg).user == "u" and etcd_access(cfg).tls.ca is None


@pytest.mark.parametrize(
    "endpoints",
    [
        "http://root:pw@e1:2379",
        "http://root@e1:2379",
        "http://:pw@e1:2379",
        "http://e1:2379,https://root:pw@e2:2379",
        "http://root:pw@e1:notaport",
        "http://root:pw@e1:2379/path",
    ],
)
def test_credentials_in_an_endpoint_are_refused_and_not_repeated(endpoints: str) -> None:
    """A password in ETCD_ENDPOINTS would be written into every job script (mode 0755) and dry-run.json; the
    error points to the ETCD_AUTH_* keys and does not repeat it."""
    for key in ("ETCD_ENDPOINTS", "ETCD_ENDPOINT"):
        (problem,) = _problems(f"{key}='{endpoints}'\n")
        assert problem.startswith(f"line 12: {key}: "), problem
        assert "carries credentials (user:password@)" in problem, problem
        assert "ETCD_AUTH_USERNAME and ETCD_AUTH_PASSWORD_FILE" in problem, problem
        assert "pw" not in problem and "root" not in problem, problem
