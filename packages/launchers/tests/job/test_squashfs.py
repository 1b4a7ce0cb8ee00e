"""RUNTIME=pyxis on the node side: the enroot import of nodes.prepare (its exact command line, its record, the
skip when the squashfs matches), the record a job copies into its run directory, and the node check's pyxis
and squashfs checks. enroot, srun and docker are stand-ins on PATH (none is installable here): they record
what they were asked and answer as the real ones do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atomdyn_launchers.job import node_prepare, squashfs, stores
from atomdyn_launchers.job.node_check import FAIL, NOT_NEEDED, PASS
from atomdyn_launchers.runtimes import PyxisRuntime, get_runtime

TAG = "dynamo-atom-mi355x-nixl-rocm:1.3.0-0.1.6rc0"
ID = "sha256:" + "ab" * 32
FAKE_ENROOT = """#!/bin/bash
echo "$* DOCKER_HOST=$DOCKER_HOST" >>"$CALLS"
[ "$1" = import ] && [ "$2" = -o ] && printf 'hsqs %s' "$4" >"$3"
"""
FAKE_DOCKER = f"""#!/bin/bash
case "$1 $2" in
  "version --format") echo 24.0.7 ;;
  "image inspect") case "$4" in *Labels*) echo lock-digest-1 ;; *) echo {ID} ;; esac ;;
  *) exit 1 ;;
esac
"""


def _tool(bindir: Path, name: str, text: str) -> Path:
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    _tool(bindir, "enroot", FAKE_ENROOT)
    docker = _tool(bindir, "docker", FAKE_DOCKER)
    monkeypatch.setenv("PATH", f"{bindir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("ATOMDYN_DOCKER", str(docker))
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    return tmp_path / "calls"


def test_import_command_line_and_names() -> None:
    assert squashfs.import_argv(TAG, "/shared/images/x.sqsh") == [
        "enroot", "import", "-o", "/shared/images/x.sqsh", f"dockerd://{TAG}",
    ]  # fmt: skip
    assert squashfs.import_argv("reg/img:1", "/o.sqsh", source="docker")[-1] == "docker://reg/img:1"
    assert squashfs.squashfs_name(TAG) == "dynamo-atom-mi355x-nixl-rocm+1.3.0-0.1.6rc0.sqsh"
    assert squashfs.squashfs_name("reg.io/a/b@sha256:00") == "reg.io+a+b+sha256+00.sqsh"


def _spec(tmp_path: Path) -> dict[str, object]:
    return {
        "images": [TAG],
        "build_steps": [],
        "archive_dir": str(tmp_path / "images"),
        "project_dir": str(tmp_path),
        "shim": None,
        "source": "build",
        "runtime": "pyxis",
        "runtime_facts": get_runtime("pyxis").node_facts(),  # as nodes.prepare writes them
    }


def test_prepare_imports_once_and_then_verifies(tmp_path: Path, tools: Path) -> None:
    spec = _spec(tmp_path)
    first = node_prepare.prepare_node(spec, "n1", "import", "unix:///d.sock", tmp_path / "log")
    assert first["ok"], first
    sqsh = tmp_path / "images" / squashfs.squashfs_name(TAG)
    tmp_names = [p.name for p in (tmp_path / "images").iterdir() if p.name.startswith(".importing")]
    assert not tmp_names  # imported under a temporary name, renamed into place
    (call,) = tools.read_text().splitlines()
    assert call.startswith(f"import -o {tmp_path}/images/.importing-n1-")
    assert call.endswith(f"{sqsh.name} dockerd://{TAG} DOCKER_HOST=unix:///d.sock")
    record = json.loads((tmp_path / "images" / (sqsh.name + ".json")).read_text())
    assert record["image"] == TAG and record["id"] == ID and record["lock_digest"] == "lock-digest-1"
    assert record["size"] == sqsh.stat().st_size and record["imported_on"] == "n1"
    assert squashfs.matches(sqsh, TAG, ID) is None
    assert any(a.startswith(f"imported {sqsh.name} (no import record") for a in first["actions"])

    second = node_prepare.prepare_node(spec, "n1", "import", "unix:///d.sock", tmp_path / "log")
    assert second["ok"] and len(tools.read_text().splitlines()) == 1  # not imported again
    assert f"{sqsh.name} matches its image: verified, not re-imported" in second["actions"]

    sqsh.write_bytes(b"changed")  # a squashfs that is not the one recorded is imported again
    assert "bytes, its record says" in str(squashfs.matches(sqsh, TAG, ID))
    third = node_prepare.prepare_node(spec, "n1", "import", "unix:///d.sock", tmp_path / "log")
    assert third["ok"] and len(tools.read_text().splitlines()) == 2
    assert "expected sha256:cdcd" in str(squashfs.matches(sqsh, TAG, "sha256:" + "cd" * 32))


def test_failed_import_is_named_and_leaves_nothing(tmp_path: Path, tools: Path) -> None:
    _tool(tmp_path / "bin", "enroot", "#!/bin/bash\necho 'no space left' >&2\nexit 1\n")
    result = node_prepare.prepare_node(_spec(tmp_path), "n1", "import", "unix:///d.sock", tmp_path / "log")
    assert not result["ok"] and "exited 1" in result["error"]
    assert "no space left" in (tmp_path / "log").read_text()
    assert not list((tmp_path / "images").glob("*.sqsh*"))


def test_job_records_the_squashfs_it_runs(tmp_path: Path, tools: Path) -> None:
    directory = tmp_path / "images"
    squashfs.import_image(TAG, directory, "n1", image_id=ID, lock_digest="d1")
    sqsh = squashfs.squashfs_path(directory, TAG)
    out = tmp_path / "run" / "images" / "prefill.json"
    out.parent.mkdir(parents=True)
    assert squashfs.main(["record", str(sqsh), "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert (written["lock_digest"], written["id"], written["squashfs"]) == ("d1", ID, str(sqsh))
    sqsh.write_bytes(b"truncated")
    assert squashfs.main(["record", str(sqsh), "--out", str(out)]) == 1
    assert "no import record" in str(squashfs.record_for_run(tmp_path / "other.sqsh", out))


def test_node_check_finds_pyxis_in_srun_help(tmp_path: Path) -> None:
    with_pyxis = _tool(
        tmp_path / "a",
        "srun",
        "#!/bin/bash\necho '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'\n",
    )
    without = _tool(tmp_path / "b", "srun", "#!/bin/bash\necho 'Usage: srun [OPTIONS(0)...]'\n")
    assert squashfs.pyxis_installed(str(with_pyxis)).status == PASS
    check = squashfs.pyxis_installed(str(without))
    assert check.status == FAIL and "pyxis is not installed" in check.detail
    assert squashfs.pyxis_installed(str(tmp_path / "none")).status == FAIL


def test_node_check_squashfs_against_its_record(tmp_path: Path, tools: Path) -> None:
    directory = tmp_path / "images"
    srun = _tool(tmp_path / "a", "srun", "#!/bin/bash\necho '--container-image=PATH'\n")
    spec = {"images": {TAG: ID}, "runtime": "pyxis"}
    store = squashfs.SquashfsStore("", str(directory), srun=str(srun))
    checks = store.checks(spec)
    assert [(c.name, c.status) for c in checks] == [("docker", NOT_NEEDED), ("pyxis", PASS), ("image", FAIL)]
    assert "run `invoke nodes.prepare`" in checks[2].detail
    assert store.stale([TAG]) == [TAG]  # what nodes.prepare still has to import
    squashfs.import_image(TAG, directory, "n1", image_id=ID, lock_digest="d1")
    assert store.checks(spec)[2].status == PASS and store.stale([TAG]) == []
    other = store.checks({**spec, "images": {TAG: "sha256:" + "00" * 32}})[2]
    assert other.status == FAIL and "was imported from" in other.detail


def test_the_node_check_finds_the_squashfs_where_nodes_check_says(tmp_path: Path, tools: Path) -> None:
    """The spec nodes.check writes names the shared images directory; the runtime's facts name the store."""
    directory = tmp_path / "images"
    squashfs.import_image(TAG, directory, "n1", image_id=ID, lock_digest="d1")
    facts = json.loads(json.dumps(get_runtime("pyxis").node_facts()))  # as the node side reads its spec
    store = stores.store_for(facts, "unix:///d.sock", str(directory))
    assert isinstance(store, squashfs.SquashfsStore) and store.shared
    assert [
        c.status for c in store.checks({"images": {TAG: ID}, "runtime": "pyxis"}) if c.name == "image"
    ] == [PASS]


def test_a_one_shot_in_the_squashfs_runs_as_the_jobs_tools_do() -> None:
    """The node check's shim and ucx rows run in the image as the job scripts' tools do (PyxisRuntime.tool):
    the same srun and flags; the ucx row with the devices and the provider libraries bind-mounted."""
    store = squashfs.SquashfsStore("", "/shared/images")
    sqsh = str(squashfs.squashfs_path("/shared/images", TAG))
    tool = PyxisRuntime(sqsh, ()).tool(["dmabuf-shim", "env", "--check"])
    assert store.one_shot(TAG, ["dmabuf-shim", "env", "--check"]) == tool
    argv = store.one_shot(
        TAG, ["ucx_info", "-v"], network="host", devices=["/dev/kfd"], mounts=["/usr/lib/x"]
    )
    mounted = [
        *tool[:5],
        "--container-mounts=/dev/kfd:/dev/kfd,/usr/lib/x:/usr/lib/x",
        *tool[5:-3],
        "ucx_info",
        "-v",
    ]
    assert argv == mounted
