"""The cluster.env loader: valid files, every kind of bad input, round trips, preflight checks."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import (
    KEYS,
    ClusterConfig,
    ClusterConfigError,
    PreflightError,
    example_text,
    load_cluster_config,
    parse_cluster_env,
    resolve_cluster_config,
)
from atomdyn_launchers.run.preflight import check_etcd, check_model_path

EXAMPLE = Path(__file__).resolve().parents[4] / "config" / "cluster.env.example"

MINIMAL = """\
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


def problems_of(text: str) -> list[str]:
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(text, "test.env")
    assert str(info.value).startswith("invalid cluster configuration test.env:")
    return info.value.problems


def test_example_file_loads_with_every_documented_key() -> None:
    cfg = load_cluster_config(EXAMPLE)
    assert cfg.slurm_partition == "mi355x"
    assert (cfg.prefill_node, cfg.decode_node) == ("gpu-node-01", "gpu-node-02")
    assert cfg.engine_profile == "atom" and cfg.runtime == "docker"
    assert cfg.etcd_endpoint == "http://gpu-node-01:2379"
    assert cfg.python_venv == Path("/shared/atomdyn/checkout/.venv")  # derived from PROJECT_DIR
    assert cfg.runs_dir == Path("/shared/atomdyn/runs")
    text = EXAMPLE.read_text()
    for key in KEYS:  # every key is at least mentioned, commented or not
        assert key in text, key


def test_example_file_is_generated_from_the_key_specs() -> None:
    assert EXAMPLE.read_text() == example_text(), (
        "config/cluster.env.example differs from the key specifications in config/cluster.py: "
        "regenerate it with `nox -s snapshots`"
    )


def test_example_images_are_the_image_builders_tags() -> None:
    from atomdyn_core.lock import find_lock_path, load_lock
    from atomdyn_images.render import release_tag

    lock = load_lock(find_lock_path(EXAMPLE.parents[1]))
    cfg = load_cluster_config(EXAMPLE)
    assert cfg.dynamo_atom_image == release_tag(lock)
    assert cfg.nixl_image == release_tag(lock, "-nixl-rocm")


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("UCX_NET_DEVICES=ionic_0:1", "is not NODE=DEVICE"),
        ("UCX_NET_DEVICES='n01=ionic_0:1 n01=ionic_1:1'", "names a node twice"),
        ("UCX_NET_DEVICES=n01=ionic 0", "whitespace in an unquoted value"),
        ("UCX_NET_DEVICES=n01=ionic;0", "is not a UCX device name"),
        ("ATOM_UCX_PATH=tcp", "'tcp' is not one of host-vram, rocm"),
        ("SLURM_GPU_GRES=true", "'true' is not yes or no"),
        ("RDMA_PROVIDER_LIBS=libionic.so", "is not an absolute path"),
    ],
)
def test_launch_path_keys_refuse_bad_values(line: str, problem: str) -> None:
    assert any(problem in p for p in problems_of(MINIMAL + line + "\n"))


def test_launch_path_keys_per_node_and_defaults() -> None:
    cfg = parse_cluster_env(MINIMAL)
    assert cfg.ucx_net_devices_for("n01") is None and cfg.atom_ucx_path == "host-vram"
    assert cfg.slurm_gpu_gres is False and cfg.rdma_verbs_config_dir == Path("/etc/libibverbs.d")
    text = MINIMAL + "UCX_NET_DEVICES='n01=mlx5_0:1,mlx5_1:1 *=ionic_0:1'\nSLURM_GPU_GRES=yes\n"
    cfg = parse_cluster_env(text + "RDMA_PROVIDER_LIBS='/usr/lib/a.so /usr/lib/b.so'\n")
    assert cfg.ucx_net_devices_for("n01") == "mlx5_0:1,mlx5_1:1"
    assert cfg.ucx_net_devices_for("n02") == "ionic_0:1"
    assert cfg.slurm_gpu_gres is True
    assert cfg.rdma_provider_libs == (Path("/usr/lib/a.so"), Path("/usr/lib/b.so"))
    assert parse_cluster_env(cfg.to_env_text()) == cfg


def test_minimal_file_gets_defaults() -> None:
    cfg = parse_cluster_env(MINIMAL)
    assert cfg.gpus_per_node == 8
    assert cfg.etcd_endpoint is None and cfg.dynamo_atom_image is None
    assert cfg.slurm_extra_args == ()
    assert cfg.python_venv == Path("/shared/checkout/.venv")
    with pytest.raises(PreflightError, match="ETCD_ENDPOINTS is not set"):
        cfg.require_etcd()


def test_syntax_quotes_comments_and_export() -> None:
    text = MINIMAL.replace("SLURM_ACCOUNT=acct\n", "export SLURM_ACCOUNT='acct'   # trailing comment\n")
    text = text.replace("SLURM_QOS=normal\n", 'SLURM_QOS="normal"\n\n# a comment line\n')
    text += "SLURM_EXTRA_ARGS='--time=01:00:00 --comment=\"a b\"'\nNODE_ADDRS=n01=10.1.2.3,n02=10.1.2.4\n"
    text += 'DYNAMO_ATOM_IMAGE="reg.example:5000/team/img:v1@sha256:' + "a" * 64 + '"\n'
    cfg = parse_cluster_env(text)
    assert (cfg.slurm_account, cfg.slurm_qos) == ("acct", "normal")
    assert cfg.slurm_extra_args == ("--time=01:00:00", "--comment=a b")
    assert cfg.node_address("n02") == "10.1.2.4" and cfg.node_address("other") == "other"
    assert cfg.dynamo_atom_image is not None and cfg.dynamo_atom_image.endswith("a" * 64)


def test_round_trip_through_env_text(tmp_path: Path) -> None:
    text = MINIMAL + 'SLURM_EXTRA_ARGS="--comment=\\"it\'s\\" --time=5"\nETCD_ENDPOINT=http://h:2379\n'
    text += "NODE_ADDRS=n01=10.1.2.3\nGPUS_PER_NODE=4\nSLURM_CONF=/etc/slurm x/slurm.conf\n".replace(
        "/etc/slurm x/slurm.conf", "'/etc/slurm x/slurm.conf'"
    )
    cfg = parse_cluster_env(text)
    assert cfg.slurm_extra_args == ("--comment=it's", "--time=5")
    path = tmp_path / "out.env"
    cfg.write(path, header="generated\nfor a test")
    again = load_cluster_config(path)
    assert again == cfg
    assert again.source == str(path)
    assert path.read_text().startswith("# generated\n# for a test\n")


def test_unknown_key_names_key_and_line() -> None:
    problems = problems_of(MINIMAL + "\nSLURM_PARTITON=typo\n")
    assert len(problems) == 1
    assert problems[0].startswith("line 13: SLURM_PARTITON: unknown key")


def test_every_bad_value_is_reported_with_its_key() -> None:
    text = MINIMAL.replace("ENGINE_PROFILE=mocker", "ENGINE_PROFILE=trtllm").replace(
        "RUNTIME=venv", "RUNTIME=lxc"
    )
    text = text.replace("SHARED_DIR=/shared", "SHARED_DIR=relative/dir").replace(
        "PRIMARY_NODE=n01", "PRIMARY_NODE=n[01-02]"
    )
    text += "GPUS_PER_NODE=eight\nETCD_ENDPOINT=etcd:2379\n"
    text += "DYNAMO_ATOM_IMAGE=Not An Image\nNIXL_IMAGE=UPPER/case\n"
    text += "SLURM_EXTRA_ARGS='--partition=other'\nNODE_ADDRS=n01=not-an-ip\nSLURM_ACCOUNT=has space\n"
    text = text.replace("SLURM_ACCOUNT=acct\n", "")
    problems = problems_of(text)
    expected = {
        "ENGINE_PROFILE": "'trtllm' is not one of mocker, vllm, atom",
        "RUNTIME": "'lxc' is not one of venv, docker, podman, pyxis",
        "SHARED_DIR": "is not an absolute path",
        "PRIMARY_NODE": "is not a single node name",
        "GPUS_PER_NODE": "is not a whole number",
        "ETCD_ENDPOINT": "is not http(s)://HOST:PORT",
        "NIXL_IMAGE": "is not an image reference",
        "SLURM_EXTRA_ARGS": "--partition is set by SLURM_ACCOUNT/SLURM_PARTITION/SLURM_QOS",
        "NODE_ADDRS": "'not-an-ip' is not an IP address",
        "SLURM_ACCOUNT": "whitespace in an unquoted value",
        "DYNAMO_ATOM_IMAGE": "whitespace in an unquoted value",
    }
    for key, fragment in expected.items():
        matching = [p for p in problems if f"{key}: " in p]
        assert matching, f"no problem reported for {key}: {problems}"
        assert fragment in matching[0], matching[0]
    assert len(problems) == len(expected)


def test_missing_required_keys_are_named() -> None:
    problems = problems_of("SLURM_ACCOUNT=a\n")
    missing = {p.split(":")[0] for p in problems}
    assert missing == {
        "SLURM_PARTITION", "SLURM_QOS", "PRIMARY_NODE", "PREFILL_NODE", "DECODE_NODE",
        "SHARED_DIR", "MODEL_PATH", "ENGINE_PROFILE", "RUNTIME",
    }  # fmt: skip
    assert all(p.endswith("required key is missing") for p in problems)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("JUST TEXT", "line 12: expected KEY=VALUE"),
        ("lower_case=1", "line 12: expected KEY=VALUE"),
        ("NIXL_IMAGE='unterminated", "line 12: NIXL_IMAGE: missing closing '"),
        ("NIXL_IMAGE=$HOME/img", "line 12: NIXL_IMAGE: '$' (variable expansion is not supported"),
        ('NIXL_IMAGE="${IMG}"', "line 12: NIXL_IMAGE: '$' (variable expansion is not supported"),
        ("NIXL_IMAGE='a' b", "line 12: NIXL_IMAGE: unexpected text after the closing quote"),
        ("SLURM_QOS=dup", "line 12: SLURM_QOS: duplicate key (first set on line 3)"),
    ],
)
def test_syntax_errors_name_line_and_key(line: str, fragment: str) -> None:
    problems = problems_of(MINIMAL + line + "\n")
    assert len(problems) == 1 and problems[0].startswith(fragment), problems


def test_cross_key_rules() -> None:
    docker = problems_of(MINIMAL.replace("RUNTIME=venv", "RUNTIME=docker"))
    assert docker == ["DYNAMO_ATOM_IMAGE: required when RUNTIME=docker"]
    gpus = problems_of(MINIMAL.replace("ENGINE_PROFILE=mocker", "ENGINE_PROFILE=atom") + "GPUS_PER_NODE=0\n")
    assert gpus == ["GPUS_PER_NODE: must be at least 1 for ENGINE_PROFILE=atom"]


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError, match="cannot read the file"):
        load_cluster_config(tmp_path / "missing.env")


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "shared" / "checkout").mkdir(parents=True)  # resolving requires existing directories
    minimal = MINIMAL.replace("=/shared", f"={tmp_path}/shared")
    explicit = tmp_path / "explicit.env"
    explicit.write_text(minimal)
    from_env = tmp_path / "from-env.env"
    from_env.write_text(minimal.replace("SLURM_QOS=normal", "SLURM_QOS=high"))
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    monkeypatch.chdir(repo)
    monkeypatch.delenv("ATOMDYN_REPO", raising=False)
    assert resolve_cluster_config(explicit, env={"ATOMDYN_CLUSTER_ENV": str(from_env)}).slurm_qos == "normal"
    assert resolve_cluster_config(None, env={"ATOMDYN_CLUSTER_ENV": str(from_env)}).slurm_qos == "high"
    with pytest.raises(ClusterConfigError, match=r"local cluster is not up: run `invoke cluster.up`"):
        resolve_cluster_config(None, env={})
    local = repo / ".atomdyn" / "cluster" / "cluster.env"
    local.parent.mkdir(parents=True)
    local.write_text(minimal.replace("SLURM_QOS=normal", "SLURM_QOS=local"))
    assert resolve_cluster_config(None, env={}).slurm_qos == "local"


def test_check_model_path(tmp_path: Path) -> None:
    cfg = parse_cluster_env(MINIMAL.replace("MODEL_PATH=/shared/models/m", f"MODEL_PATH={tmp_path}/nope"))
    with pytest.raises(PreflightError, match=r"MODEL_PATH .*/nope does not exist"):
        check_model_path(cfg)
    (tmp_path / "nope").mkdir()
    check_model_path(cfg)


class _Health(http.server.BaseHTTPRequestHandler):
    body = b'{"health":"true"}'

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(self.body)

    def do_POST(self) -> None:  # the launchers' access check: a count-only range over their keys
        self.send_response(200 if self.path == "/v3/kv/range" else 404)
        self.end_headers()
        self.wfile.write(b'{"count": "0"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("Handler", (_Health,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _with_etcd(endpoint: str) -> ClusterConfig:
    return parse_cluster_env(MINIMAL + f"ETCD_ENDPOINT={endpoint}\n")


def test_check_etcd_healthy_and_unhealthy(health_server: tuple[str, type[_Health]]) -> None:
    endpoint, handler = health_server
    check_etcd(_with_etcd(endpoint))
    handler.body = json.dumps({"health": "false", "reason": "NOSPACE"}).encode()
    with pytest.raises(PreflightError, match="reports unhealthy"):
        check_etcd(_with_etcd(endpoint))


def test_check_etcd_unreachable_names_the_endpoint() -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(PreflightError, match=rf"ETCD_ENDPOINTS={endpoint}: etcd is unreachable"):
            check_etcd(_with_etcd(endpoint), timeout=2.0)


# -- hostile input (issue 25) ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "option"),
    [
        ("-Aother", "-A"),
        ("-A other", "-A"),
        ("-A=other", "-A"),
        ("--acc=other", "--acc"),
        ("--acco=other", "--acco"),
        ("--accoun other", "--accoun"),
        ("--account other", "--account"),
        ("-pother", "-p"),
        ("--part=other", "--part"),
        ("--p=other", "--p"),
        ("-qlow", "-q"),
        ("--qo=low", "--qo"),
        ("--q=low", "--q"),
        ("-vAother", "-A"),  # -v takes no value: the cluster goes on to -A
        ("-HvOp other", "-p"),
        ("--hold -Aother", "-A"),
        ("--reservation=r --time 5 -Aother", "-A"),
    ],
)
def test_extra_args_cannot_set_account_partition_or_qos_as_sbatch_reads_them(extra: str, option: str) -> None:
    (problem,) = problems_of(MINIMAL + f"SLURM_EXTRA_ARGS='{extra}'\n")
    assert problem.startswith(f"line 12: SLURM_EXTRA_ARGS: {option} "), problem
    assert "set by SLURM_ACCOUNT/SLURM_PARTITION/SLURM_QOS, not here" in problem, problem


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ("--hold script.sh", "'script.sh' is not an sbatch option (sbatch would run it as the batch script)"),
        ("-- --account=x", "'--' ends sbatch's options"),
        ("--re=x", "--re is ambiguous (sbatch refuses it): --reboot, --requeue, --reservation"),
        ("-Z", "-Z is not an sbatch option"),
        ("--time", "--time needs a value"),
        ("-t", "-t needs a value"),
    ],
)
def test_extra_args_that_sbatch_would_misread_are_refused(extra: str, fragment: str) -> None:
    (problem,) = problems_of(MINIMAL + f"SLURM_EXTRA_ARGS='{extra}'\n")
    assert problem.startswith("line 12: SLURM_EXTRA_ARGS: ") and fragment in problem, problem


@pytest.mark.parametrize(
    "extra",
    [
        "--reservation=dynamo --time=01:00:00",
        "--reservation dynamo -t 5",
        "--acctg-freq=task=30",  # not --account
        "--parsable --exclusive --exclusive=user",
        "-J -A",  # -J takes the next word as its value, whatever it looks like
        "-tA -Hk",  # -t's value is A; -k takes an optional value, attached
        "--comment=-pother --qos-ish-plugin-option=1",  # a SPANK plugin's option is passed on
        "--mem 4G -w n01 -Q",
    ],
)
def test_extra_args_sbatch_reads_as_other_options_are_kept(extra: str) -> None:
    cfg = parse_cluster_env(MINIMAL + f"SLURM_EXTRA_ARGS='{extra}'\n")
    assert " ".join(cfg.slurm_extra_args) == extra


def test_a_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "cluster.env"
    path.write_bytes(MINIMAL.encode() + b"# caf\xe9\nSLURM_EXTRA_ARGS=--hold\n")
    with pytest.raises(ClusterConfigError) as info:
        load_cluster_config(path)
    assert info.value.problems == [
        "line 12: byte 0xe9 is not UTF-8 (save the file as UTF-8; latin-1 is not read)"
    ]


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("MODEL_PATH='/shared/models/m\0x'", "line 8: MODEL_PATH: U+0000 (a control character)"),
        ('MODEL_PATH="/shared/models/m\0x"', "line 8: MODEL_PATH: U+0000 (a control character)"),
        ("MODEL_PATH=/shared/models/m\0x", "line 8: MODEL_PATH: U+0000 (a control character)"),
        ("MODEL_PATH=/shared/models/m\x1b[2Jx", "line 8: MODEL_PATH: U+001B (a control character)"),
        ("MODEL_PATH='/shared/models/m\u200bx'", "line 8: MODEL_PATH: U+200B ZERO WIDTH SPACE"),
        ("MODEL_PATH='/shared/models/m\u202ex'", "line 8: MODEL_PATH: U+202E RIGHT-TO-LEFT OVERRIDE"),
    ],
)
def test_control_and_invisible_characters_in_a_value_are_refused(line: str, fragment: str) -> None:
    text = MINIMAL.replace("MODEL_PATH=/shared/models/m", line)
    (problem,) = problems_of(text)
    assert problem.startswith(fragment), problem


@pytest.mark.parametrize(
    "separator", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r"]
)
def test_a_line_break_only_some_tools_see_cannot_hide_a_key(separator: str) -> None:
    """Python's splitlines() ended the line at U+2028 (and the others); bash and editors keep one line, so a
    key behind a comment was used while it looked commented out. Such characters are refused wherever they are."""
    text = MINIMAL + f"# the account is set above{separator}SLURM_EXTRA_ARGS=--hold\n"
    (problem,) = problems_of(text)
    assert problem.startswith(f"line 12: U+{ord(separator):04X} "), problem
    assert "not allowed anywhere in cluster.env" in problem, problem


def test_crlf_line_ends_are_still_read() -> None:
    cfg = parse_cluster_env(MINIMAL.replace("\n", "\r\n"))
    assert cfg.slurm_qos == "normal" and cfg.project_dir == Path("/shared/checkout")


def test_a_value_from_defaults_is_checked_like_one_from_the_file() -> None:
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(MINIMAL.replace("PRIMARY_NODE=n01\n", ""), defaults={"PRIMARY_NODE": "n01\n"})
    (problem,) = info.value.problems
    assert problem.startswith("PRIMARY_NODE: U+000A (a control character)"), problem


def test_a_node_given_twice_in_node_addrs_is_refused() -> None:
    (problem,) = problems_of(MINIMAL + "NODE_ADDRS=n01=10.0.0.1,n02=10.0.0.2,n01=10.0.0.3\n")
    assert problem == "line 12: NODE_ADDRS: node n01 is given twice (10.0.0.1, 10.0.0.3)"


DOCKER = MINIMAL.replace("RUNTIME=venv", "RUNTIME=docker") + "DYNAMO_ATOM_IMAGE=img:1\n"


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("MODEL_PATH=/shared/models/m", "MODEL_PATH=/shared/models/m:ro", "MODEL_PATH"),
        ("SHARED_DIR=/shared", "SHARED_DIR=/shared:x", "SHARED_DIR"),
        ("PROJECT_DIR=/shared/checkout", "PROJECT_DIR=/shared/a:b", "PROJECT_DIR"),
        ("RUNTIME=docker", "RUNTIME=docker\nRDMA_PROVIDER_LIBS=/usr/lib/a:b.so", "RDMA_PROVIDER_LIBS"),
    ],
)
def test_a_colon_in_a_path_docker_mounts_is_refused(old: str, new: str, key: str) -> None:
    (problem,) = problems_of(DOCKER.replace(old, new))
    assert problem.startswith(f"{key}: ") and "contains ':'" in problem, problem
    assert "docker -v SOURCE:TARGET" in problem, problem


def test_a_colon_in_a_path_is_kept_where_nothing_mounts_it() -> None:
    cfg = parse_cluster_env(MINIMAL.replace("MODEL_PATH=/shared/models/m", "MODEL_PATH=/shared/models/m:1"))
    assert cfg.model_path == Path("/shared/models/m:1")
