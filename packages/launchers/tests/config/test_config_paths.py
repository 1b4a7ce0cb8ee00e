"""SHARED_DIR and PROJECT_DIR: absolute, plain path characters, existing where the configuration is resolved."""

from __future__ import annotations

from pathlib import Path

import pytest

from atomdyn_launchers.config.cluster import ClusterConfigError, parse_cluster_env, resolve_cluster_config

BASE = """\
SLURM_ACCOUNT=acct
SLURM_PARTITION=gpu
SLURM_QOS=normal
PRIMARY_NODE=n01
PREFILL_NODE=n01
DECODE_NODE=n02
MODEL_PATH=/models/m
ENGINE_PROFILE=mocker
RUNTIME=venv
"""


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    shared, project = tmp_path / "shared", tmp_path / "checkout"
    shared.mkdir()
    project.mkdir()
    return shared, project


@pytest.mark.parametrize("key", ["SHARED_DIR", "PROJECT_DIR"])
@pytest.mark.parametrize(
    "value",
    [
        "/tmp/$(touch pwned)",
        "/tmp/`id`",
        "/tmp/a;b",
        "/tmp/a b",
        "/tmp/a|b",
        "/tmp/a&b",
        "/tmp/*",
        "/tmp/a'b",
    ],
)
def test_shell_metacharacters_are_refused_by_the_loader(tmp_path: Path, key: str, value: str) -> None:
    shared, project = _dirs(tmp_path)
    values = {"SHARED_DIR": str(shared), "PROJECT_DIR": str(project), key: value}
    # Quoted, so the file syntax takes the value literally: the path rule itself must refuse it.
    quote = '"' if "'" in value else "'"
    lines = "".join(f"{k}={quote}{v}{quote}\n" for k, v in values.items())
    text = BASE + lines
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(text, "t.env")
    (problem,) = info.value.problems
    assert key in problem and "contains" in problem and "use a path of letters" in problem


@pytest.mark.parametrize("key", ["SHARED_DIR", "PROJECT_DIR"])
def test_relative_path_is_refused(tmp_path: Path, key: str) -> None:
    shared, project = _dirs(tmp_path)
    values = {"SHARED_DIR": str(shared), "PROJECT_DIR": str(project), key: "relative/dir"}
    with pytest.raises(ClusterConfigError, match=f"{key}: 'relative/dir' is not an absolute path"):
        parse_cluster_env(BASE + "".join(f"{k}={v}\n" for k, v in values.items()), "t.env")


@pytest.mark.parametrize("key", ["SHARED_DIR", "PROJECT_DIR"])
def test_missing_directory_is_refused_when_resolved(tmp_path: Path, key: str) -> None:
    shared, project = _dirs(tmp_path)
    values = {"SHARED_DIR": str(shared), "PROJECT_DIR": str(project), key: str(tmp_path / "absent")}
    env = tmp_path / "cluster.env"
    env.write_text(BASE + "".join(f"{k}={v}\n" for k, v in values.items()))
    with pytest.raises(ClusterConfigError) as info:
        resolve_cluster_config(env)
    assert info.value.problems == [f"{key}: {tmp_path / 'absent'} is not an existing directory on this host"]


def test_plain_existing_directories_resolve(tmp_path: Path) -> None:
    shared, project = _dirs(tmp_path)
    env = tmp_path / "cluster.env"
    env.write_text(BASE + f"SHARED_DIR={shared}\nPROJECT_DIR={project}\n")
    config = resolve_cluster_config(env)
    assert (config.shared_dir, config.project_dir) == (shared, project)


def test_an_empty_required_value_is_called_empty_not_missing(tmp_path: Path) -> None:
    shared, project = _dirs(tmp_path)
    text = BASE.replace("SLURM_QOS=normal", "SLURM_QOS=") + f"SHARED_DIR={shared}\nPROJECT_DIR={project}\n"
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(text, "t.env")
    assert info.value.problems == ["line 3: SLURM_QOS: required key is empty"]
    with pytest.raises(ClusterConfigError) as info:
        parse_cluster_env(text.replace("SLURM_QOS=\n", ""), "t.env")
    assert info.value.problems == ["SLURM_QOS: required key is missing"]
