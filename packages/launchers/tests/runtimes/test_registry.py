"""The runtime registry: RUNTIME takes its names, a cluster configuration becomes a runtime object in one place,
and the launchers outside ``runtimes/`` ask a runtime rather than compare its name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import atomdyn_launchers
from atomdyn_launchers.config.cluster import ClusterConfig, ClusterConfigError, parse_cluster_env
from atomdyn_launchers.runtimes import (
    RUNTIME_NAMES,
    RUNTIMES,
    DockerRuntime,
    PodmanRuntime,
    PyxisRuntime,
    VenvRuntime,
    get_runtime,
    image_runtime,
    runtime_for,
)

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
PROJECT_DIR=/shared/checkout
DYNAMO_ATOM_IMAGE=img:1
"""


def _config(runtime: str, extra: str = "") -> ClusterConfig:
    return parse_cluster_env(BASE + f"RUNTIME={runtime}\n" + extra)


def test_runtime_takes_the_registry_s_names_and_no_other() -> None:
    assert RUNTIME_NAMES == ("venv", "docker", "podman", "pyxis")
    for name in RUNTIME_NAMES:
        assert _config(name).runtime == name and get_runtime(name).name == name
    with pytest.raises(ClusterConfigError, match="RUNTIME"):
        _config("apptainer")
    with pytest.raises(ValueError, match="known: venv, docker, podman, pyxis"):
        get_runtime("apptainer")


def test_a_configuration_becomes_each_runtime_through_runtime_for() -> None:
    built = {
        name: runtime_for(
            _config(name), image="img:1", venv=Path("/v"), container_prefix="atomdyn-r", mounts=["/m"]
        )
        for name in RUNTIME_NAMES
    }
    assert built["venv"] == VenvRuntime(Path("/v"))
    assert built["docker"] == DockerRuntime("img:1", "atomdyn-r", ("/m",))
    assert built["podman"] == PodmanRuntime("img:1", "atomdyn-r", ("/m",))
    assert isinstance(built["pyxis"], PyxisRuntime)
    assert built["pyxis"].image == "/shared/images/img+1.sqsh"  # the squashfs nodes.prepare imports
    assert all(type(runtime) is RUNTIMES[name] for name, runtime in built.items())
    # What runs the image where RUNTIME runs none: validate.gpu on a venv cluster runs docker.
    assert image_runtime("venv") is DockerRuntime and image_runtime("pyxis") is PyxisRuntime
    assert type(runtime_for(_config("venv"), image="img:1", in_image=True)) is DockerRuntime


def test_each_runtime_answers_what_nodes_and_checks_ask() -> None:
    answers = {n: (r.in_image, r.node_images, r.store().shared) for n, r in RUNTIMES.items()}
    assert answers == {
        "venv": (False, False, False),
        "docker": (True, True, False),
        "podman": (True, True, False),
        "pyxis": (True, False, True),
    }
    podman = _config("podman", "PODMAN_CONFIG_DIR=/etc/p/%n\n")
    assert podman.container_env_for("n01") == {
        "CONTAINERS_STORAGE_CONF": "/etc/p/n01/storage.conf",
        "CONTAINERS_CONF": "/etc/p/n01/containers.conf",
    }
    assert _config("docker", "DOCKER_HOST=unix:///d/%n.sock\n").container_env_for("n02") == {
        "DOCKER_HOST": "unix:///d/n02.sock"
    }
    assert PodmanRuntime.prepare_problem("build") and PodmanRuntime.prepare_problem("load") is None
    assert DockerRuntime.prepare_problem("build") is None
    assert (
        PyxisRuntime.mount_problem("SHARED_DIR", "/a,b")
        and DockerRuntime.mount_problem("SHARED_DIR", "/a,b") is None
    )


# A comparison of a runtime's name: `runtime == "x"`, `runtime in (...)`, `runtime != ...`, `runtime not in`.
COMPARISON = re.compile(r"""\bruntime\b(["']\])?\)?\s*(==|!=|\bin\b|\bnot in\b)\s*[("'A-Z]""")


def test_nothing_outside_runtimes_compares_a_runtime_s_name() -> None:
    """The submit side asks the runtime (the node side, job/, reads its JSON spec and may not import it)."""
    src = Path(atomdyn_launchers.__file__).parent
    found = [
        f"{path.relative_to(src)}:{number}: {line.strip()}"
        for path in sorted(src.rglob("*.py"))
        if path.relative_to(src).parts[0] not in ("runtimes", "job")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if COMPARISON.search(line) and not line.lstrip().startswith("#")
    ]
    assert not found, found
