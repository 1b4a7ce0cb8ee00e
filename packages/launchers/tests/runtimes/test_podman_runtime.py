"""RUNTIME=podman: the configuration, the podman command lines (docker's options, what differs: --pull=never and
NVIDIA's CDI device), the image record, the node jobs' environment, and the prepare strategies it takes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import ClusterConfigError, parse_cluster_env
from atomdyn_launchers.engines.atom import container_args
from atomdyn_launchers.job import images, stores
from atomdyn_launchers.job.podman import PodmanCLI
from atomdyn_launchers.nodes.prepare import PrepareError, PrepareSpec, prepare
from atomdyn_launchers.runtimes import RUNTIME_NAMES, DockerRuntime, PodmanRuntime, get_runtime
from atomdyn_launchers.runtimes.devices import DeviceAccess
from atomdyn_launchers.sbatch import render_arg
from atomdyn_launchers.validate.gpu import job_script

BASE = """\
SLURM_ACCOUNT=acct
SLURM_PARTITION=gpu
SLURM_QOS=normal
PRIMARY_NODE=n01
PREFILL_NODE=n01
DECODE_NODE=n02
SHARED_DIR=/shared
MODEL_PATH=/shared/models/m
ENGINE_PROFILE=atom
PROJECT_DIR=/shared/checkout
GPUS_PER_NODE=8
"""
MOUNTS = ["/shared"]


def words(argv: list[object]) -> list[str]:
    return [render_arg(a) for a in argv]  # type: ignore[arg-type]


def test_runtime_podman_needs_an_image_and_mountable_paths() -> None:
    cfg = parse_cluster_env(BASE + "RUNTIME=podman\nDYNAMO_ATOM_IMAGE=img:1\n")
    assert cfg.runtime == "podman"
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(BASE + "RUNTIME=podman\n")
    assert "DYNAMO_ATOM_IMAGE: required when RUNTIME=podman" in info.value.problems
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(
            BASE.replace("MODEL_PATH=/shared/models/m", "MODEL_PATH=/shared/a:b")
            + "RUNTIME=podman\nDYNAMO_ATOM_IMAGE=img:1\n"
        )
    assert any("podman -v SOURCE:TARGET" in p and p.startswith("MODEL_PATH:") for p in info.value.problems)


def test_podman_config_dir_reaches_each_nodes_jobs_and_only_for_podman() -> None:
    text = BASE + "DYNAMO_ATOM_IMAGE=img:1\nPODMAN_CONFIG_DIR=/etc/pm/%n/\nDOCKER_HOST=unix:///d/%n.sock\n"
    cfg = parse_cluster_env(text + "RUNTIME=podman\n")
    assert cfg.container_env_for("n02") == {
        "CONTAINERS_STORAGE_CONF": "/etc/pm/n02/storage.conf",
        "CONTAINERS_CONF": "/etc/pm/n02/containers.conf",
    }
    docker = parse_cluster_env(text + "RUNTIME=docker\n")
    assert docker.container_env_for("n02") == {"DOCKER_HOST": "unix:///d/n02.sock"}
    assert (
        parse_cluster_env(BASE + "RUNTIME=podman\nDYNAMO_ATOM_IMAGE=img:1\n").container_env_for("n01") == {}
    )
    for bad in ("relative/%n", "/a:b", "/a,b"):
        with pytest.raises(ClusterConfigError) as info:
            parse_cluster_env(BASE + f"RUNTIME=podman\nDYNAMO_ATOM_IMAGE=img:1\nPODMAN_CONFIG_DIR={bad}\n")
        assert any("PODMAN_CONFIG_DIR: " in p and repr(bad) in p for p in info.value.problems)


@pytest.mark.parametrize("vendor", ["amd", "nvidia", "none"])
def test_podman_takes_dockers_options_but_never_pulls_and_names_nvidia_gpus_by_cdi(vendor: str) -> None:
    devices = DeviceAccess(
        vendor, gpu_visibility="ROCR_VISIBLE_DEVICES" if vendor == "amd" else None,
        container_args=container_args("decode") if vendor == "amd" else (),
    )  # fmt: skip
    env = {"A": "1"}
    docker = words(list(DockerRuntime("img:1", "run", MOUNTS).wrap("decode", ["python3"], env, devices).argv))
    podman_spec = PodmanRuntime("img:1", "run", MOUNTS).wrap("decode", ["python3"], env, devices)
    podman = words(list(podman_spec.argv))
    assert podman[:5] == ["podman", "run", "--rm", "--init", "--pull=never"]
    expected = ["podman", *docker[1:4], "--pull=never", *docker[4:]]
    if vendor == "nvidia":
        gpus = expected.index("--gpus")
        expected[gpus : gpus + 2] = ["--device", "nvidia.com/gpu=all"]
    assert podman == expected
    # stopped by name with the podman client, as a docker container is with docker's
    assert podman_spec.container is not None
    assert (podman_spec.container.name, podman_spec.container.cli) == ("run-decode", "podman")


def test_validation_job_runs_in_podman(tmp_path: Path) -> None:
    cfg = parse_cluster_env(BASE + "RUNTIME=podman\nDYNAMO_ATOM_IMAGE=img:1\n")
    text = job_script(cfg, "img:1", tmp_path, "docker")
    assert " podman run --rm --init --pull=never --name atomdyn-validate-" in text
    assert "docker" not in text


def test_podman_ids_are_written_as_dockers(tmp_path: Path) -> None:
    podman = tmp_path / "podman"
    podman.write_text("#!/bin/sh\necho 0123abcd\n")
    podman.chmod(0o755)
    cli = PodmanCLI(client=str(podman))
    assert cli.image_id("img:1") == "sha256:0123abcd"
    assert cli.save_args(Path("/a.tar"), ["b:1", "a:1"]) == [
        "save", "--format", "docker-archive", "-m", "-o", "/a.tar", "b:1", "a:1",
    ]  # fmt: skip


@pytest.mark.parametrize("name", RUNTIME_NAMES)
def test_the_node_side_reaches_each_runtimes_image_store_by_its_facts_not_its_name(name: str) -> None:
    """job/ may not import the registry: it gets the runtime's node facts in its spec and asks them."""
    runtime = get_runtime(name)
    facts = json.loads(json.dumps(runtime.node_facts()))  # as the node side reads its spec
    store = stores.store_for(facts, "unix:///x", "/shared/images")
    assert type(store) is runtime.store()  # the store nodes.prepare fills and the workers run from
    cli = store.client
    assert isinstance(cli, PodmanCLI) == (name == "podman")
    assert (cli.env().get("DOCKER_HOST") == "unix:///x") == (name != "podman")
    assert ("--pull=never" in cli.run_args()) == (name == "podman")  # as PodmanRuntime runs its images
    assert store.shared == (name == "pyxis")  # one import into the shared filesystem serves every node


def test_an_unknown_image_store_is_named() -> None:
    with pytest.raises(images.ImageError, match="unknown image store 'sif'; known: docker, podman, squashfs"):
        stores.store_for({"image_store": "sif"}, "unix:///x")


def test_prepare_with_podman_refuses_the_build_strategy_before_any_job() -> None:
    cfg = parse_cluster_env(BASE + "RUNTIME=podman\nDYNAMO_ATOM_IMAGE=img:1\n")
    spec = PrepareSpec(images=("img:1",), build_steps=())
    with pytest.raises(PrepareError, match="RUNTIME=podman prepares with the load strategy only"):
        prepare(dataclasses.replace(cfg, shared_dir=Path("/nonexistent")), spec, strategy="build")
