"""Fast checks of the node-preparation pieces that need no cluster: config key, sysfs RDMA reading (a tree
laid out like the kernel's /sys/class/infiniband: no RDMA device exists here), manifests, report logic."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from atomdyn_launchers.config.cluster import ClusterConfigError, PreflightError, parse_cluster_env
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.job import images
from atomdyn_launchers.job.node_check import (
    FAIL,
    NOT_NEEDED,
    PASS,
    Check,
    _rdma,
    _rdma_mounts,
    gid_text,
    rdma_ports,
)
from atomdyn_launchers.job.node_prepare import NODE, PYTHON
from atomdyn_launchers.nodes import jobs
from atomdyn_launchers.nodes.check import CheckReport
from atomdyn_launchers.nodes.invoke_tasks import _spec
from atomdyn_launchers.nodes.prepare import PrepareError, PrepareSpec
from atomdyn_launchers.rehearsal.localcluster import dockerd
from atomdyn_launchers.runtimes import get_runtime

BASE_ENV = """SLURM_ACCOUNT=a
SLURM_PARTITION=p
SLURM_QOS=q
PRIMARY_NODE=n1
PREFILL_NODE=n1
DECODE_NODE=n2
SHARED_DIR=/shared
MODEL_PATH=/shared/model
ENGINE_PROFILE=mocker
RUNTIME=venv
PROJECT_DIR=/shared/checkout
"""


def test_docker_host_template_per_node_and_round_trip() -> None:
    config = parse_cluster_env(BASE_ENV + "DOCKER_HOST=unix:///srv/%n/docker.sock\n")
    assert config.docker_host_for("n1") == "unix:///srv/n1/docker.sock"
    assert config.docker_host_for("n2") == "unix:///srv/n2/docker.sock"
    assert parse_cluster_env(config.to_env_text()) == config
    assert parse_cluster_env(BASE_ENV).docker_host_for("n1") is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("/var/run/docker.sock", "is not a docker daemon address"),
        ("unix://relative.sock", "needs an absolute path"),
        ("http://host:2375", "is not a docker daemon address"),
    ],
)
def test_bad_docker_host_is_named(value: str, problem: str) -> None:
    with pytest.raises(ClusterConfigError) as error:
        parse_cluster_env(BASE_ENV + f"DOCKER_HOST={value}\n")
    assert any(p.startswith("line 12: DOCKER_HOST:") and problem in p for p in error.value.problems)


def _port(root: Path, device: str, port: int, state: str, gids: dict[int, tuple[str, str, str]]) -> None:
    """One port the way the kernel lays it out: state, gids/N, gid_attrs/types/N, gid_attrs/ndevs/N."""
    base = root / device / "ports" / str(port)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "state").write_text(state + "\n")
    for index, (gid, kind, ndev) in gids.items():
        (base / "gids" / str(index)).write_text(gid + "\n")
        (base / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
        (base / "gid_attrs" / "ndevs" / str(index)).write_text(ndev + "\n")


def test_rdma_ports_read_roce_v2_gids_from_sysfs(tmp_path: Path) -> None:
    _port(
        tmp_path,
        "ionic_0",
        1,
        "4: ACTIVE",
        {
            0: ("fe80:0000:0000:0000:0202:c9ff:fe00:0001", "IB/RoCE v1", "enp1s0"),
            1: ("0000:0000:0000:0000:0000:ffff:0a00:000b", "RoCE v2", "enp1s0"),
            2: ("0000:0000:0000:0000:0000:0000:0000:0000", "RoCE v2", ""),
        },
    )
    _port(
        tmp_path,
        "ionic_1",
        1,
        "1: DOWN",
        {1: ("0000:0000:0000:0000:0000:ffff:0a00:000c", "RoCE v2", "enp2s0")},
    )
    ports = rdma_ports(tmp_path)
    assert [(p.device, p.port, p.state) for p in ports] == [
        ("ionic_0", "1", "4: ACTIVE"),
        ("ionic_1", "1", "1: DOWN"),
    ]
    assert ports[0].roce_v2 == ((1, "10.0.0.11", "enp1s0"),)  # v1 and all-zero GIDs are left out
    check = _rdma(get_engine("atom").node_needs("disagg"), tmp_path)
    assert check.status == PASS and "ionic_0/1 4: ACTIVE RoCEv2 [1] 10.0.0.11 (enp1s0)" in check.detail


def test_rdma_check_fails_for_atom_without_an_active_roce_v2_port(tmp_path: Path) -> None:
    _port(tmp_path, "ionic_0", 1, "1: DOWN", {1: ("0000:0000:0000:0000:0000:ffff:0a00:000b", "RoCE v2", "e")})
    assert _rdma(get_engine("atom").node_needs("disagg"), tmp_path).status == FAIL
    assert _rdma(get_engine("mocker").node_needs("disagg"), tmp_path).status == NOT_NEEDED
    assert _rdma(get_engine("atom").node_needs("disagg"), tmp_path / "none").detail.startswith(
        "no ACTIVE port with a RoCE v2 GID: no RDMA devices"
    )


def test_rdma_mounts_must_exist_where_containers_mount_them(tmp_path: Path) -> None:
    atom = get_engine("atom").node_needs("disagg")
    (tmp_path / "libibverbs.d").mkdir()
    spec = {
        "runtime": "docker",
        "runtime_facts": get_runtime("docker").node_facts(),
        "rdma_mounts": [str(tmp_path / "libibverbs.d"), str(tmp_path / "libionic.so")],
    }
    check = _rdma_mounts(spec, atom)
    assert check.status == FAIL and check.detail == f"missing on this node: {tmp_path / 'libionic.so'}"
    (tmp_path / "libionic.so").touch()
    assert _rdma_mounts(spec, atom).status == PASS
    venv = {**spec, "runtime": "venv", "runtime_facts": get_runtime("venv").node_facts()}
    assert _rdma_mounts(venv, atom).status == NOT_NEEDED
    assert _rdma_mounts(spec, get_engine("mocker").node_needs("disagg")).status == NOT_NEEDED


def test_gid_text() -> None:
    assert gid_text("0000:0000:0000:0000:0000:ffff:c0a8:0101") == "192.168.1.1"
    assert gid_text("fe80:0000:0000:0000:0202:c9ff:fe00:0001") == "fe80::202:c9ff:fe00:1"


def _manifest(directory: Path, payload: bytes, **over: object) -> images.Manifest:
    (directory / "images-x.tar").write_bytes(payload)
    raw = {
        "schema_version": 1,
        "archive": "images-x.tar",
        "sha256": images.sha256_file(directory / "images-x.tar"),
        "size": len(payload),
        "images": {"a:1": "sha256:" + "1" * 64},
        "saved_on": "n1",
        "created": "2026-01-01T00:00:00Z",
        **over,
    }
    (directory / images.MANIFEST_NAME).write_text(json.dumps(raw))
    return images.read_manifest(directory)


def test_archive_verified_against_manifest_into_a_private_copy(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, b"archive bytes" * 1000)
    copy = tmp_path / "copy.tar"
    images.verify_archive(manifest, copy_to=copy)
    assert copy.read_bytes() == manifest.archive.read_bytes()
    assert images.manifest_covers(tmp_path, ["a:1"]) == manifest
    assert images.manifest_covers(tmp_path, ["a:1", "b:2"]) is None
    assert images.recorded_ids(tmp_path, ["a:1", "b:2"]) == {"a:1": "sha256:" + "1" * 64}

    manifest.archive.write_bytes(b"Archive bytes" * 1000)  # same size, other bytes
    with pytest.raises(images.ImageError, match=r"does not match its manifest .*refusing to load it"):
        images.verify_archive(manifest)
    manifest.archive.write_bytes(b"short")
    with pytest.raises(images.ImageError, match="has 5 bytes, its manifest says 13000"):
        images.verify_archive(manifest)
    manifest.archive.unlink()
    with pytest.raises(images.ImageError, match="is missing"):
        images.verify_archive(manifest)


@pytest.mark.parametrize(
    ("over", "problem"),
    [
        ({"schema_version": 2}, "schema_version 2, expected 1"),
        ({"archive": "../etc/passwd"}, "must be a file name in"),
        ({"size": "big"}, "missing or bad field"),
    ],
)
def test_bad_manifest_is_named(tmp_path: Path, over: dict[str, object], problem: str) -> None:
    with pytest.raises(images.ImageError, match=problem):
        _manifest(tmp_path, b"x", **over)


def test_missing_manifest_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(
        images.ImageError, match=r"no image archive manifest .* \(run `invoke nodes.prepare`\)"
    ):
        images.read_manifest(tmp_path)


def test_prepare_spec_needs_images() -> None:
    with pytest.raises(PrepareError, match="no images named"):
        PrepareSpec(images=(), build_steps=())


def test_check_report_names_node_and_check() -> None:
    report = CheckReport(
        "mocker",
        "docker",
        {
            "n1": [Check("image", PASS, "x:1 sha256:ab"), Check("gpu-devices", NOT_NEEDED, "cpu")],
            "n2": [Check("image", FAIL, "x:1 is not present on this node")],
        },
        errors={"n3": "job 7 ended FAILED without a result: boom"},
    )
    assert report.failures() == [
        ("n3", "job", "job 7 ended FAILED without a result: boom"),
        ("n2", "image", "x:1 is not present on this node"),
    ]
    with pytest.raises(PreflightError) as refused:
        report.require_ok()
    assert "node n2: check image failed: x:1 is not present on this node" in str(refused.value)
    assert "nothing was submitted" in str(refused.value)
    lines = report.table().splitlines()
    assert lines[0] == "nodes.check (mocker, docker): 2 failed"
    assert lines[1].split() == ["node", "check", "status", "detail"]
    assert "n2    image        FAIL        x:1 is not present on this node" in lines


def test_dockerd_ping_is_false_for_anything_but_a_docker_daemon(tmp_path: Path) -> None:
    assert dockerd.ping(tmp_path / "absent.sock") is False
    path = tmp_path / "other.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.0 404 Not Found\r\n\r\nnope")

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        assert dockerd.ping(path) is False
    finally:
        thread.join(timeout=5)
        server.close()
    argv = dockerd.argv("dockerd", Path("/d"), Path("/s.sock"), Path("/r"))
    assert "--iptables=false" in argv and "--bridge=none" in argv and "--host=unix:///s.sock" in argv


def test_default_prepare_spec_builds_configured_images_with_a_work_directory_per_node() -> None:
    config = parse_cluster_env(
        BASE_ENV.replace("RUNTIME=venv", "RUNTIME=docker")
        + "DYNAMO_ATOM_IMAGE=atomdyn-dynamo-atom:0.1.0\nNIXL_IMAGE=atomdyn-dynamo-atom-nixl-rocm:0.1.0\n"
    )
    spec = _spec(config, [], False, "--atom-variant rocm7.1 --compat-wheels dist/", "")
    assert spec.images == ("atomdyn-dynamo-atom:0.1.0", "atomdyn-dynamo-atom-nixl-rocm:0.1.0")
    assert spec.build_steps == (
        (PYTHON, "-m", "atomdyn_images.cli", "build", "--workdir", f"/shared/checkout/build/images/nodes/{NODE}",
         "--atom-variant", "rocm7.1", "--compat-wheels", "dist/"),
    )  # fmt: skip
    assert _spec(config, ["other:1"], False, "", "").images == ("other:1",)
    with pytest.raises(Exit, match="nothing to prepare"):
        _spec(parse_cluster_env(BASE_ENV), [], False, "", "")


def test_node_job_script_is_shellcheck_clean(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is missing in CI: .ci/run must install it")
        pytest.skip("shellcheck is not installed")
    config = parse_cluster_env(BASE_ENV.replace("PROJECT_DIR=/shared/checkout", f"PROJECT_DIR={tmp_path}"))
    text = jobs.script(config, "atomdyn_launchers.job.node_check", ["--spec", "/a dir/it's.json"])
    assert "PYTHONPATH=" in text  # no venv at PYTHON_VENV: the checkout's sources
    script = tmp_path / "job.sh"
    script.write_text(text)
    done = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout
