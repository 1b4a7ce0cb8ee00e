"""Cluster preparation on the real local cluster with one Docker daemon per node (issue 10).

Each node's daemon has its own cache, so a node that was not prepared really lacks the image. The images are
the rehearsal's: the stand-in base (`atomdyn-images standin`) and a small image built on it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from atomdyn_core.dockerd import find_dockerd
from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.readiness import ReadinessError
from atomdyn_launchers.etcd.client import EtcdClient
from atomdyn_launchers.job import images
from atomdyn_launchers.job.node_check import FAIL, NOT_NEEDED, PASS, UNKNOWN
from atomdyn_launchers.job.node_prepare import REHEARSAL_SHIM_ACTION, install_shim
from atomdyn_launchers.job.owned_etcd import OwnedEtcdError
from atomdyn_launchers.job.podman import PodmanCLI, podman_client
from atomdyn_launchers.nodes import jobs
from atomdyn_launchers.nodes.check import check_nodes
from atomdyn_launchers.nodes.etcd_owned import OwnedEtcd
from atomdyn_launchers.nodes.invoke_tasks import wipe
from atomdyn_launchers.nodes.prepare import PrepareError, PrepareSpec, archive_dir, prepare, shim_current
from atomdyn_launchers.nodes.rehearsal import IMAGE_TAG, rehearsal_spec
from atomdyn_launchers.rehearsal.localcluster import LocalCluster, missing_tools
from atomdyn_launchers.rehearsal.localcluster.dockerd import exec_root as dockerd_exec_root
from atomdyn_launchers.rehearsal.localcluster.procs import Proc, alive
from atomdyn_launchers.run.launch import Launch, run
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.runtimes import DockerRuntime, PodmanRuntime
from atomdyn_launchers.runtimes.devices import NO_DEVICES
from atomdyn_launchers.runtimes.podman import podman_env
from atomdyn_launchers.sbatch import JobSpec, render
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration
IN_CI = os.environ.get("CI") == "true"
REPO = Path(__file__).resolve().parents[4]
NODES = ["node1", "node2"]


def _need(condition: bool, what: str) -> None:
    if condition:
        return
    if IN_CI:
        pytest.fail(f"{what} is missing in CI: .ci/run must install it")
    pytest.skip(f"{what} is not available here")


@pytest.fixture(scope="module")
def docker_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A second local cluster, this one with a Docker daemon inside each node."""
    _need(os.geteuid() == 0, "root (the local cluster)")
    _need(not missing_tools(), f"the local cluster's tools ({', '.join(missing_tools())})")
    _need(find_dockerd() is not None, "dockerd (Debian package docker.io)")
    base = tmp_path_factory.mktemp("nodes")
    cluster = LocalCluster(
        base / "state",
        shared_dir=base / "shared",
        project_dir=REPO,
        python_venv=Path(sys.prefix),
        owner_pid=os.getpid(),
        docker=True,
    )
    cluster.up(log=lambda message: print(message, file=sys.stderr))
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def config(docker_cluster: LocalCluster) -> ClusterConfig:
    return docker_cluster.config()


@pytest.fixture(scope="module")
def shim_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real dmabuf-shim wheel, built from packages/dmabuf-shim like a release would."""
    out = tmp_path_factory.mktemp("shim-wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", str(REPO / "packages" / "dmabuf-shim"), "-w", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    _need(done.returncode == 0, f"a buildable dmabuf-shim (pip wheel failed: {done.stderr[-400:]})")
    return next(out.glob("dmabuf_shim-*.whl"))


def _daemon(config: ClusterConfig, node: str) -> images.DockerCLI:
    return images.DockerCLI(jobs.docker_host(config, node))


def _reset(config: ClusterConfig, spec: PrepareSpec, *, archive: bool) -> None:
    wipe(config, NODES, spec.images)
    if archive:
        shutil.rmtree(archive_dir(config) / "x", ignore_errors=True)
        for path in archive_dir(config).glob("images-*.tar"):
            path.unlink()
        (archive_dir(config) / images.MANIFEST_NAME).unlink(missing_ok=True)


def test_cluster_config_names_each_nodes_own_daemon(config: ClusterConfig) -> None:
    hosts = {node: jobs.docker_host(config, node) for node in NODES}
    assert hosts["node1"] != hosts["node2"]
    for node, host in hosts.items():
        assert (
            host == f"unix://{config.shared_dir.parent / 'state' / 'nodes' / node / 'docker' / 'docker.sock'}"
        )
        assert _daemon(config, node).version()


def test_prepare_both_strategies_from_empty_caches_and_second_prepare_is_a_no_op(
    config: ClusterConfig, shim_wheel: Path
) -> None:
    spec = rehearsal_spec(config, shim_wheel=shim_wheel)

    _reset(config, spec, archive=True)
    assert all(i is None for n in NODES for i in _daemon(config, n).image_ids(spec.images).values())
    built = prepare(config, spec, strategy="build", nodes=NODES)
    for node in NODES:
        result = built.nodes[node]
        assert result["ok"], result
        assert result["actions"][0] == f"built {', '.join(spec.images)}"
        # This machine has no GPU runtime: the rehearsal accepts that one missing piece and nothing else.
        assert REHEARSAL_SHIM_ACTION in result["actions"]
        assert any("interposes=1 ibverbs=1 reg_dmabuf=1" in line for line in result["shim"]["check"])
        assert "check ok without a GPU runtime" in result["shim"]["check"][-1]
        assert all(_daemon(config, node).image_ids(spec.images).values())
    # The workers' path to the prepared helper: `current` names the install, and it answers `env`.
    current = shim_current(config)
    assert current.resolve() == Path(built.nodes["node1"]["shim"]["target"]).resolve()
    shim_env = subprocess.run(
        [sys.executable, "-m", "dmabuf_shim", "env"],
        env={**os.environ, "PYTHONPATH": str(current)},
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in shim_env.stdout.splitlines() if "LD_PRELOAD=" in x)
    library = Path(line.split("LD_PRELOAD=", 1)[1].strip().strip('"'))
    assert library.is_file() and library.resolve().is_relative_to(current.resolve())
    # Built on each node: two separate caches, two separate builds of the small image.
    assert built.nodes["node1"]["images"][IMAGE_TAG] != built.nodes["node2"]["images"][IMAGE_TAG]
    again = prepare(config, spec, strategy="build", nodes=NODES)
    for node in NODES:
        assert again.nodes[node]["actions"][0] == "images present: verified, not rebuilt"
        assert again.nodes[node]["images"] == built.nodes[node]["images"]

    _reset(config, spec, archive=True)
    first = prepare(config, spec, strategy="load", nodes=NODES)
    assert first.saved is not None and first.saved["node"] == "node1"
    manifest = images.read_manifest(archive_dir(config))
    assert manifest.sha256 == images.sha256_file(manifest.archive)
    assert (
        first.nodes["node1"]["actions"][0] == "images present with the manifest's ids: verified, not reloaded"
    )
    assert first.nodes["node2"]["actions"][0].startswith(f"loaded {manifest.archive.name}")

    _reset(config, spec, archive=False)  # empty caches, the saved archive kept
    loaded = prepare(config, spec, strategy="load", nodes=NODES)
    assert loaded.saved is None
    for node in NODES:
        assert loaded.nodes[node]["actions"][0].startswith(f"loaded {manifest.archive.name} (sha256 verified")
        assert _daemon(config, node).image_ids(spec.images) == manifest.images
    noop = prepare(config, spec, strategy="load", nodes=NODES)
    for node in NODES:
        assert (
            noop.nodes[node]["actions"][0] == "images present with the manifest's ids: verified, not reloaded"
        )
        assert noop.nodes[node]["images"] == manifest.images
    assert images.read_manifest(archive_dir(config)) == manifest  # nothing re-saved


# A process with no SIGTERM handler, as python is while a model loads. As a container's PID 1 it ignores the
# TERM its docker client forwards; only the init that --init adds passes it on.
LOADING = "import time; time.sleep(600)"


def _container_job(
    config: ClusterConfig, work: Path, name: str, kind: type[DockerRuntime] = DockerRuntime
) -> tuple[Path, DockerRuntime]:
    runtime = kind(IMAGE_TAG, f"atomdyn-{name}", [], lock_memory=False)
    job = JobSpec(
        role="agg",
        job_name="atomdyn-agg",
        node="node1",
        account=config.slurm_account,
        partition=config.slurm_partition,
        qos=config.slurm_qos,
        output=str(work / "logs" / "agg.slurm.out"),
        log_dir=str(work / "logs"),
        processes=[runtime.wrap("worker", ["python3", "-c", LOADING], {}, NO_DEVICES)],
    )
    script = work / "agg.sbatch"
    (work / "logs").mkdir(parents=True, exist_ok=True)  # Slurm opens the output file before the script runs
    script.write_text(render(job))
    return script, runtime


def _containers(docker: images.DockerCLI, name: str) -> list[str]:
    return docker.run("ps", "-aq", "--filter", f"name=^{name}$").split()


def test_a_job_stopped_while_its_engine_loads_leaves_no_container_and_runs_again(
    config: ClusterConfig, shim_wheel: Path, tmp_path: Path
) -> None:
    """The launcher stops a job with SIGTERM to its script; the container must go with it (issue 23, item 1)."""
    prepare(
        config, rehearsal_spec(config, shim_wheel=shim_wheel), strategy="build", nodes=("node1",)
    )  # raises
    slurm = Slurm(config)
    work = config.shared_dir / "container-stop" / tmp_path.name
    script, runtime = _container_job(config, work, tmp_path.name.lower())
    name = runtime.container_name("worker")
    host = jobs.docker_host(config, "node1")
    docker = images.DockerCLI(host)
    try:
        _stop_while_loading_twice(slurm, script, work, docker, name, {"DOCKER_HOST": host})
    finally:
        subprocess.run([images.docker_client(), "rm", "-f", name], env={**os.environ, "DOCKER_HOST": host},
                       capture_output=True, check=False)  # fmt: skip


def _stop_while_loading_twice(
    slurm: Slurm, script: Path, work: Path, docker: images.DockerCLI, name: str, env: dict[str, str]
) -> None:
    for attempt in (1, 2):  # the second attempt reuses the container name: a stale one would refuse it
        job_id = slurm.submit(
            script, job_name="atomdyn-agg", nodelist="node1", output=work / "logs" / "agg.slurm.out",
            chdir=work, env=env,
        )  # fmt: skip
        try:
            slurm.wait_for(job_id, lambda info: info.state == "RUNNING", timeout=60, what="running")
            deadline = time.monotonic() + 60
            while not docker.run("ps", "-q", "--filter", f"name=^{name}$").strip():
                assert time.monotonic() < deadline, f"attempt {attempt}: the container never started"
                time.sleep(0.2)  # polling the daemon for the container, with a deadline
            slurm.signal_batch([job_id])  # as the launcher stops a job
            info = slurm.wait_terminal(job_id, timeout=60)
        finally:
            slurm.cancel([job_id])
        out = (work / "logs" / "agg.slurm.out").read_text()
        assert info.state == "COMPLETED", (attempt, info, out)
        assert _containers(docker, name) == [], f"attempt {attempt}: the container outlived its job\n{out}"


def test_tampered_image_archive_is_refused(config: ClusterConfig) -> None:
    spec = rehearsal_spec(config)
    if images.manifest_covers(archive_dir(config), spec.images) is None:
        prepare(config, spec, strategy="load", nodes=["node1"])
    manifest = images.read_manifest(archive_dir(config))
    wipe(config, ["node2"], spec.images)
    original = manifest.archive.read_bytes()
    try:
        tampered = bytearray(original)
        tampered[len(tampered) // 2] ^= 0xFF  # same size, one byte changed
        manifest.archive.write_bytes(bytes(tampered))
        with pytest.raises(PrepareError) as refused:
            prepare(config, spec, strategy="load", nodes=["node2"])
        assert "node node2: image archive" in str(refused.value)
        assert "does not match its manifest" in str(refused.value)
        assert "refusing to load it" in str(refused.value)
        assert all(i is None for i in _daemon(config, "node2").image_ids(spec.images).values())

        # Appended bytes: the node checks the size first (prepare itself would re-save a resized archive).
        manifest.archive.write_bytes(original + b"\0")
        with pytest.raises(images.ImageError, match=r"bytes, its manifest says \d+: refusing to load it"):
            images.load_verified(_daemon(config, "node2"), manifest)
        assert all(i is None for i in _daemon(config, "node2").image_ids(spec.images).values())
    finally:
        manifest.archive.write_bytes(original)
    restored = prepare(config, spec, strategy="load", nodes=["node2"])
    assert restored.nodes["node2"]["images"] == manifest.images


def test_unprepared_node_fails_the_preflight_naming_node_and_check(config: ClusterConfig) -> None:
    spec = rehearsal_spec(config)
    prepare(config, spec, strategy="load", nodes=NODES)
    docker_config = dataclasses.replace(config, runtime="docker", dynamo_atom_image=IMAGE_TAG)
    ready = check_nodes(docker_config, NODES)
    assert ready.ok, ready.table()

    wipe(config, ["node2"], spec.images)  # node2 loses its cache; node1 keeps it
    report = check_nodes(docker_config, NODES)
    statuses = {(n, c.name): c for n, checks in report.nodes.items() for c in checks}
    assert statuses[("node1", "image")].status == PASS
    assert "(matches the archive)" in statuses[("node1", "image")].detail
    assert statuses[("node2", "image")].status == FAIL
    assert report.failures() == [
        ("node2", "image", f"{IMAGE_TAG} is not present on this node (run `invoke nodes.prepare`)")
    ]
    with pytest.raises(PreflightError) as refused:
        report.require_ok()
    assert f"node node2: check image failed: {IMAGE_TAG} is not present on this node" in str(refused.value)
    table = report.table()
    assert "node2  image         FAIL" in table and "1 failed" in table
    prepare(config, spec, strategy="load", nodes=["node2"])
    assert check_nodes(docker_config, NODES).ok


def test_mocker_profile_needs_no_gpu_or_rdma_checks_and_says_so(config: ClusterConfig) -> None:
    report = check_nodes(config, NODES)
    assert report.ok, report.table()
    for node in NODES:
        by_name = {c.name: c for c in report.nodes[node]}
        for name in ("gpu-devices", "rdma-devices", "gpu-memory", "dmabuf-shim", "docker", "image"):
            assert by_name[name].status == NOT_NEEDED, by_name[name]
        for name in ("advertise", "shared-dir", "model-path"):
            assert by_name[name].status == PASS, by_name[name]
        address = dict(config.node_addrs)[node]
        assert by_name["advertise"].detail.startswith(f"side channel {address} (eth0)")
    as_json = report.to_json()
    assert as_json["ok"] is True and set(as_json["nodes"]) == set(NODES)
    json.dumps(as_json)


def test_atom_profile_on_this_cpu_cluster_fails_the_hardware_checks(config: ClusterConfig) -> None:
    report = check_nodes(config, ["node1"], engine="atom")
    failed = {check for _, check, _ in report.failures()}
    assert {"gpu-devices", "rdma-devices", "rdma-ports"} <= failed
    assert "advertise" not in failed and "shared-dir" not in failed


def test_run_owned_etcd_starts_serves_and_is_gone(config: ClusterConfig, tmp_path: Path) -> None:
    run_dir = config.runs_dir / f"owned-etcd-{tmp_path.name}"
    run_dir.mkdir(parents=True)
    owned = OwnedEtcd.start(config, run_dir, "node1")
    record = json.loads((run_dir / "etcd.json").read_text())
    assert record["endpoint"] == owned.endpoint
    assert record["node"] == "node1" and record["version"] == "3.4.23"
    assert owned.endpoint.startswith(f"http://{dict(config.node_addrs)['node1']}:")
    client = EtcdClient(owned.endpoint)
    client.put("atomdyn-test/key", "value")
    assert client.get_prefix("atomdyn-test/")[0] == {"atomdyn-test/key": "value"}
    pid = int(record["pid"])
    assert Path(f"/proc/{pid}").exists()
    stopped = owned.stop()
    assert stopped["endpoint_gone"] and stopped["job_state"] == "COMPLETED"
    final = json.loads((run_dir / "etcd.json").read_text())
    assert final["stopped"] and final["exit_status"] == 0
    assert not Path(f"/proc/{pid}").exists()
    assert record["data_dir"].startswith("/tmp/atomdyn-etcd-") and not Path(record["data_dir"]).exists()


def test_run_owned_etcd_without_the_lock_is_refused_before_submitting(
    config: ClusterConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ATOMDYN_LOCK", raising=False)
    run_dir = config.runs_dir / f"bad-etcd-{tmp_path.name}"
    run_dir.mkdir(parents=True)
    broken = dataclasses.replace(config, project_dir=tmp_path)  # no release-lock.json there
    with pytest.raises(OwnedEtcdError, match=f"cannot read the release lock: .*{tmp_path}/release-lock.json"):
        OwnedEtcd.start(broken, run_dir, "node1")
    assert not (run_dir / "scripts" / "etcd.sbatch").exists()


def test_run_refuses_to_submit_when_a_node_is_unprepared(config: ClusterConfig) -> None:
    spec = rehearsal_spec(config)
    prepare(config, spec, strategy="load", nodes=NODES)
    wipe(config, ["node2"], spec.images)
    docker_config = dataclasses.replace(config, runtime="docker", dynamo_atom_image=IMAGE_TAG)
    runs_before = sorted(config.runs_dir.glob("*-disagg-*")) if config.runs_dir.is_dir() else []
    with pytest.raises(PreflightError) as refused:
        run(LaunchOptions(kind="disagg", requests=1), docker_config)
    message = str(refused.value)
    assert f"node node2: check image failed: {IMAGE_TAG} is not present on this node" in message
    assert "node node1" not in message
    assert (sorted(config.runs_dir.glob("*-disagg-*")) if config.runs_dir.is_dir() else []) == runs_before
    # The explicit skip flag leaves the node check out (the rest of the preflight still runs).
    Launch(docker_config, LaunchOptions(kind="disagg", node_check=False)).preflight()
    prepare(config, spec, strategy="load", nodes=["node2"])


def test_disagg_run_with_run_owned_etcd_serves_the_run_and_leaves_nothing(config: ClusterConfig) -> None:
    _need(
        any(Path(sys.prefix).glob("lib/python3*/site-packages/dynamo/mocker/__main__.py")),
        "ai-dynamo in this venv (the rehearsal's mock engine)",
    )
    no_etcd = dataclasses.replace(config, etcd_endpoints=())
    outcome = run(LaunchOptions(kind="disagg", requests=4, concurrency=2), no_etcd)
    assert outcome.passed, outcome.failure
    node_check = json.loads((outcome.run_dir / "node-check.json").read_text())
    assert node_check["ok"] is True and set(node_check["nodes"]) == set(NODES)
    record = json.loads((outcome.run_dir / "etcd.json").read_text())
    assert record["node"] == config.prefill_node and record["version"] == "3.4.23"
    assert record["stopped"] and record["exit_status"] == 0
    # The roles registered in the run's own etcd: their registrations name its endpoint's node addresses.
    run_record = json.loads((outcome.run_dir / "run.json").read_text())
    assert set(run_record["registrations"]) == {"prefill", "decode"}
    assert all(r.ok and r.prefill_worker_id != r.decode_worker_id for r in outcome.results)
    assert not Path(f"/proc/{record['pid']}").exists()
    assert not Path(record["data_dir"]).exists()
    with pytest.raises(ReadinessError):
        EtcdClient(record["endpoint"], timeout_s=1.0).version()
    scripts = (outcome.run_dir / "scripts" / "prefill.sbatch").read_text()
    assert record["endpoint"] in scripts and config.etcd_endpoint not in scripts


def test_check_on_a_busy_node_is_reported_unknown_not_waited_for(
    config: ClusterConfig, tmp_path: Path
) -> None:
    slurm = Slurm(config)
    blocker_script = tmp_path / "blocker.sbatch"
    blocker_script.write_text("#!/bin/bash\nexec tail -f /dev/null\n")
    blocker = slurm.submit(
        blocker_script, nodelist="node2", output=tmp_path / "b.out", extra_args=["--exclusive"]
    )
    try:
        slurm.wait_for(blocker, lambda i: i.state == "RUNNING", timeout=30, what="running")
        report = check_nodes(config, NODES, pending_grace_s=2.0)
    finally:
        slurm.cancel([blocker])
        slurm.wait_terminal(blocker, timeout=30)
    assert report.ok, report.table()
    [busy] = report.nodes["node2"]
    assert busy.name == "job" and busy.status == UNKNOWN
    assert busy.detail.startswith("checks not run: job ") and busy.detail.endswith("node busy")
    assert "(Resources)" in busy.detail
    assert {c.name for c in report.nodes["node1"]} >= {"advertise", "shared-dir", "model-path"}
    check_job = int(busy.detail.split()[4])
    assert slurm.job(check_job).state == "CANCELLED"


def test_docker_daemons_are_part_of_the_cluster_and_stopped_by_down(
    docker_cluster: LocalCluster, tmp_path: Path
) -> None:
    status = docker_cluster.status()
    assert status.healthy and {"dockerd-node1", "dockerd-node2"} <= {
        d.name for d in status.daemons if d.alive
    }
    # A second cluster, brought up and down here: its daemons and their runtime state are gone afterwards.
    cluster = LocalCluster(
        tmp_path / "state",
        shared_dir=tmp_path / "shared",
        project_dir=REPO,
        python_venv=Path(sys.prefix),
        docker=True,
    )
    up = cluster.up()
    try:
        daemons = [d for d in cluster.status().daemons if d.name.startswith("dockerd-")]
        record = json.loads((cluster.state_dir / "cluster.json").read_text())
        recorded = [Proc.from_json(p) for p in record["procs"] if p["name"].startswith("dockerd-")]
        assert len(daemons) == 2 and all(d.alive for d in daemons)
        exec_root = dockerd_exec_root(cluster.tag, "node1")
        assert exec_root.is_dir()
        # The daemon runs inside its node: its network namespace is node1's.
        node1 = next(d for d in daemons if d.name == "dockerd-node1")
        assert os.readlink(f"/proc/{node1.pid}/ns/net") == os.readlink(
            f"/proc/{next(d.pid for d in cluster.status().daemons if d.name == 'slurmd-node1')}/ns/net"
        )
        assert up.config.docker_host_for("node1") == f"unix://{cluster.layout().docker_socket('node1')}"
    finally:
        down = cluster.down()
    assert down.killed == ()
    assert len(recorded) == 2 and not any(alive(p) for p in recorded)
    assert not exec_root.parent.exists()


@pytest.mark.parametrize("required", [True, False])
def test_shim_install_fails_without_a_gpu_runtime_only_where_one_is_required(
    tmp_path: Path, shim_wheel: Path, required: bool
) -> None:
    """A real node needs the HSA runtime or the CUDA driver for the helper to export anything; this machine has
    neither, which a rehearsal node accepts and a real node's prepare must not."""
    shim = {
        "wheel": str(shim_wheel),
        "sha256": images.sha256_file(shim_wheel),
        "target": str(tmp_path / "dmabuf-shim" / "install"),
        "gpu_runtime_required": required,
    }
    actions: list[str] = []
    if required:
        with pytest.raises(images.ImageError, match="missing GPU runtime"):
            install_shim(shim, "node1", actions)
    else:
        install_shim(shim, "node1", actions)
        assert actions[-1] == REHEARSAL_SHIM_ACTION


def test_nodes_check_task_says_it_is_alive_while_it_waits(docker_cluster: LocalCluster) -> None:
    """Long node work prints a heartbeat line (stderr) so a terminal or a log shows the wait is alive."""
    done = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "invoke"), "--search-root", str(REPO), "nodes.check",
         "--config", str(docker_cluster.state_dir / "cluster.env"), "--engine", "mocker"],
        env={**os.environ, "ATOMDYN_HEARTBEAT_S": "0.2"}, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nodes.check on node1, node2: still running (" in done.stderr, done.stderr


# RUNTIME=podman on the same nodes: no daemon, each node's own podman storage (the cluster's PODMAN_CONFIG_DIR).


@pytest.fixture(scope="module")
def podman_config(config: ClusterConfig) -> ClusterConfig:
    _need(shutil.which("podman") is not None, "podman (Debian package podman, with catatonit for --init)")
    return dataclasses.replace(config, runtime="podman", dynamo_atom_image=IMAGE_TAG)


def _podman(config: ClusterConfig, node: str) -> PodmanCLI:
    """A node's podman storage, reached from here with the variables its jobs get."""
    return PodmanCLI(env_overrides=podman_env(config, node))


def test_podman_nodes_load_the_verified_archive_into_their_own_stores(podman_config: ClusterConfig) -> None:
    spec = rehearsal_spec(podman_config)
    with pytest.raises(PrepareError, match="load strategy only"):
        prepare(podman_config, spec, strategy="build", nodes=NODES)
    wipe(podman_config, NODES, spec.images)  # docker's caches and the podman stores empty; the archive kept
    assert all(i is None for n in NODES for i in _podman(podman_config, n).image_ids(spec.images).values())
    first = prepare(podman_config, spec, strategy="load", nodes=NODES)
    manifest = images.read_manifest(archive_dir(podman_config))
    for node in NODES:
        result = first.nodes[node]
        assert result["store"] == "podman" and result["ok"], result
        assert result["actions"][0].startswith(
            f"loaded {manifest.archive.name} (sha256 verified, ids checked)"
        )
        # podman's ids, written as docker's, are the archive's: the image config's digest in both
        assert _podman(podman_config, node).image_ids(spec.images) == manifest.images == result["images"]
    again = prepare(podman_config, spec, strategy="load", nodes=NODES)
    for node in NODES:
        assert (
            again.nodes[node]["actions"][0]
            == "images present with the manifest's ids: verified, not reloaded"
        )

    ready = check_nodes(podman_config, NODES)
    assert ready.ok, ready.table()
    for node in NODES:
        checks = {c.name: c for c in ready.nodes[node]}
        storage = podman_env(podman_config, node)["CONTAINERS_STORAGE_CONF"]
        assert checks["podman"].status == PASS and storage in checks["podman"].detail, checks["podman"]
        assert checks["image"].status == PASS and "(matches the archive)" in checks["image"].detail
        assert "docker" not in checks

    # The stores are the nodes' own: node2 losing its image leaves node1's, and the run is refused before
    # anything is submitted, naming the node and the check.
    _podman(podman_config, "node2").run("rmi", "-f", IMAGE_TAG)
    assert _podman(podman_config, "node1").image_id(IMAGE_TAG) == manifest.images[IMAGE_TAG]
    report = check_nodes(podman_config, NODES)
    assert report.failures() == [
        ("node2", "image", f"{IMAGE_TAG} is not present on this node (run `invoke nodes.prepare`)")
    ]
    runs_before = sorted(podman_config.runs_dir.glob("*-disagg-*")) if podman_config.runs_dir.is_dir() else []
    with pytest.raises(PreflightError) as refused:
        run(LaunchOptions(kind="disagg", requests=1), podman_config)
    assert f"node node2: check image failed: {IMAGE_TAG} is not present on this node" in str(refused.value)
    assert sorted(podman_config.runs_dir.glob("*-disagg-*")) == runs_before
    prepare(podman_config, spec, strategy="load", nodes=["node2"])
    assert check_nodes(podman_config, NODES).ok


def test_a_podman_job_stopped_while_its_engine_loads_leaves_no_container_and_runs_again(
    podman_config: ClusterConfig, tmp_path: Path
) -> None:
    """As for docker: the container outlives its client (podman's conmon keeps it), so the job stops it by name."""
    spec = rehearsal_spec(podman_config)
    if images.manifest_covers(archive_dir(podman_config), spec.images) is None:
        prepare(podman_config, spec, strategy="load", nodes=["node1"])
    if _podman(podman_config, "node1").image_id(IMAGE_TAG) is None:
        prepare(podman_config, spec, strategy="load", nodes=["node1"])
    work = podman_config.shared_dir / "container-stop" / f"podman-{tmp_path.name}"
    script, runtime = _container_job(podman_config, work, tmp_path.name.lower(), PodmanRuntime)
    name = runtime.container_name("worker")
    podman = _podman(podman_config, "node1")
    assert f"podman run --rm --init --pull=never --name {name} " in script.read_text()
    try:
        _stop_while_loading_twice(
            Slurm(podman_config), script, work, podman, name, podman_env(podman_config, "node1")
        )
    finally:
        subprocess.run([podman_client(), "rm", "-f", name], env=podman.env(), capture_output=True,
                       check=False)  # fmt: skip
