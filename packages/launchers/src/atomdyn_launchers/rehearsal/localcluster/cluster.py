"""The local two-node Slurm cluster: up (idempotent), status and down (by PID, nothing left behind).

Daemons and where they run:

- munged: host namespace, private socket and key under the state directory;
- slurmctld and etcd: the head namespace (hostname ``head``), which also holds the bridge;
- one slurmd per node: the node's network namespace, entered with ``nsenter --net`` and then
  ``unshare --mount --uts`` (``ip netns exec`` would remount /sys and slurmd then fails on cgroups). In its
  private mount namespace each node sees an /etc/hosts naming every node (Dynamo advertises the address of
  the node's hostname) and an /etc/resolv.conf with no server, so unknown names fail at once instead of
  timing out. Jobs are children of slurmd, so they inherit the node's network, hostname and /etc/hosts;
  the rest of the filesystem is the host's, so the repository and its virtualenv are usable in jobs.

NATS: no engine profile needs it today (Dynamo runs with the TCP request plane and ZMQ events). A profile
that does would add one more daemon to :meth:`LocalCluster._start_daemons` in the head namespace and one
more optional key to the config; nothing else changes.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import time
import urllib.error
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from atomdyn_core.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from atomdyn_core.dockerd import find_dockerd
from atomdyn_launchers.config.cluster import (
    ClusterConfig,
    default_local_state_dir,
    find_repo_root,
    load_cluster_config,
)
from atomdyn_launchers.contract.direct_http import DIRECT
from atomdyn_launchers.nodes.jobs import tail
from atomdyn_launchers.rehearsal.localcluster import dockerd, netns, podman, procs, slurmconf
from atomdyn_launchers.rehearsal.localcluster.layout import (
    ACCOUNT,
    ETCD_CLIENT_PORT,
    ETCD_PEER_PORT,
    HEAD,
    PARTITION,
    QOS,
    Layout,
    host_networks,
    pick_subnet,
    tag_for,
)
from atomdyn_launchers.rehearsal.localcluster.procs import Proc
from atomdyn_launchers.run import orphans, ports
from atomdyn_launchers.slurm.client import Slurm, SlurmError

REQUIRED_TOOLS = (
    "munged",
    "munge",
    "slurmctld",
    "slurmd",
    "scontrol",
    "sinfo",
    "etcd",
    "ip",
    "nsenter",
    "unshare",
)
UP_TIMEOUT_S = 30.0
# One file per running cluster (tag.json): lets a later test session remove a cluster whose owning
# process died without `down` (a killed pytest), even after its state directory was deleted.
REGISTRY = Path("/run/atomdyn-clusters")
_POLL_S = 0.05

# Run inside a fresh mount + UTS namespace before exec'ing the daemon: hostname, /etc/hosts, /etc/resolv.conf,
# and drop the copies of /run/netns mounts so this mount namespace never keeps another namespace alive.
NODE_SHELL = (
    'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" /etc/resolv.conf || exit 1\n'
    'awk \'$2 ~ "^/run/netns/" {print $2}\' /proc/self/mounts | while read -r m; do umount -l "$m"; done\n'
    "shift 3\n"
    'exec "$@"\n'
)


class LocalClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class DaemonStatus:
    name: str
    pid: int
    alive: bool


@dataclass(frozen=True)
class ClusterStatus:
    state_dir: Path
    recorded: bool  # a cluster.json exists (up was run and down was not)
    daemons: tuple[DaemonStatus, ...] = ()
    nodes: dict[str, str] = field(default_factory=dict)  # Slurm node -> state
    etcd: str = "not running"
    problems: tuple[str, ...] = ()
    orphans: tuple[str, ...] = ()  # runs whose launcher died without recording their end

    @property
    def healthy(self) -> bool:
        return self.recorded and not self.problems and not self.orphans

    def table(self) -> str:
        if not self.recorded:
            return f"local cluster at {self.state_dir}: down"
        rows = [("component", "pid", "state")]
        rows += [(d.name, str(d.pid), "alive" if d.alive else "DEAD") for d in self.daemons]
        rows += [(f"node {n}", "", s) for n, s in sorted(self.nodes.items())]
        rows.append(("etcd health", "", self.etcd))
        width = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)).rstrip() for r in rows]
        if self.orphans:
            rows_orphans = [f"orphaned {line}" for line in self.orphans]
            hint = "the next disagg.run or cluster.down stops their jobs and releases their ports"
            lines += [*rows_orphans, f"  ({hint})"]
        problems = [*self.problems, *([f"{len(self.orphans)} orphaned run(s)"] if self.orphans else [])]
        verdict = "healthy" if self.healthy else "UNHEALTHY: " + "; ".join(problems)
        return "\n".join([f"local cluster at {self.state_dir}: {verdict}", *lines])


@dataclass(frozen=True)
class UpResult:
    already_up: bool
    seconds: float
    config: ClusterConfig


@dataclass(frozen=True)
class DownResult:
    was_up: bool
    seconds: float
    killed: tuple[str, ...]  # processes that needed SIGKILL or were found in the namespaces after the daemons
    orphans: tuple[str, ...] = ()  # orphaned runs whose ports and records were cleaned


def missing_tools() -> list[str]:
    return [t for t in REQUIRED_TOOLS if shutil.which(t) is None]


class LocalCluster:
    """One local cluster, identified by its state directory."""

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        shared_dir: Path | None = None,
        project_dir: Path | None = None,
        python_venv: Path | None = None,
        gpus_per_node: int = 2,
        nodes: tuple[str, ...] = ("node1", "node2"),
        owner_pid: int | None = None,
        docker: bool = False,
    ) -> None:
        """``owner_pid``: the cluster belongs to that process (a test session); once it is gone,
        :func:`prune_orphans` may take the cluster down. Without an owner a cluster is never pruned.
        ``docker``: also one Docker daemon per node (own cache and socket; see ``dockerd.py``)."""
        self.state_dir = (state_dir or default_local_state_dir()).resolve()
        self.shared_dir = (shared_dir or self.state_dir.parent).resolve()
        self.project_dir = (project_dir or find_repo_root()).resolve()
        self.python_venv = python_venv or self.project_dir / ".venv"
        self.gpus_per_node = gpus_per_node
        self.nodes = nodes
        self.docker = docker
        self.tag = tag_for(self.state_dir)
        self.owner = procs.identify("owner", owner_pid) if owner_pid is not None else None

    # -- public API --------------------------------------------------------------------------------------

    def up(self, log: Callable[[str], None] = lambda _m: None) -> UpResult:
        """Bring the cluster up, or verify that it already is. Raises LocalClusterError with the reason."""
        start = time.monotonic()
        self._preconditions()
        with self._locked():
            record = self._read_record()
            if record is not None:
                status = self.status()
                same_docker = self.config().docker_host is not None
                if (
                    status.healthy
                    and self.config().gpus_per_node == self.gpus_per_node
                    and same_docker == self.docker
                    and self.config().podman_config_dir is not None  # a cluster from before RUNTIME=podman
                    and record[0].nodes == self.nodes
                ):
                    config = self.config()
                    if (config.shared_dir, config.project_dir, config.python_venv) != (
                        self.shared_dir,
                        self.project_dir,
                        self.python_venv,
                    ):  # paths live only in cluster.env: no restart needed
                        log(f"updating {record[0].env_file} (shared dir, project dir or venv changed)")
                        config = self._write_config(record[0])
                    self._ensure_model(config, log)
                    return UpResult(True, time.monotonic() - start, config)
                reason = "; ".join(status.problems) or "node count, GPUS_PER_NODE or docker daemons changed"
                log(f"cluster was partly up or differently shaped ({reason}): restarting it")
                self._teardown()
            self._teardown_strays()
            layout = Layout(self.state_dir, self.tag, pick_subnet(self.tag, host_networks()), self.nodes)
            try:
                self._write_files(layout)
                netns.create(layout)
                self._write_record(layout, [])
                self._start_daemons(layout)
                config = self._write_config(layout)
            except BaseException:
                self._teardown()
                raise
        self._ensure_model(config, log)
        return UpResult(False, time.monotonic() - start, config)

    def status(self) -> ClusterStatus:
        record = self._read_record()
        if record is None:
            return ClusterStatus(self.state_dir, recorded=False)
        layout, started = record
        problems: list[str] = []
        daemons = tuple(DaemonStatus(p.name, p.pid, procs.alive(p)) for p in started)
        problems += [f"{d.name} (pid {d.pid}) is not running" for d in daemons if not d.alive]
        nodes: dict[str, str] = {}
        if any(d.alive for d in daemons if d.name == "slurmctld"):  # else sinfo would wait out its timeouts
            try:
                nodes = self._node_states(layout)
            except LocalClusterError as exc:
                problems.append(str(exc))
            for node in layout.nodes:
                state = nodes.get(node, "missing")
                if not state.startswith(("idle", "mixed", "alloc", "completing")) or state.endswith("*"):
                    problems.append(f"node {node} is {state}")
        etcd = _etcd_health(layout.etcd_endpoint)
        if etcd != "healthy":
            problems.append(f"etcd at {layout.etcd_endpoint}: {etcd}")
        found: list[str] = []
        try:
            slurm = Slurm(self.config()) if nodes else None  # None: slurmctld is down, no job to list
            found = [o.describe() for o in orphans.find(self.shared_dir, slurm)]
        except (ports.PortError, SlurmError, LocalClusterError) as exc:
            problems.append(f"orphaned runs could not be listed: {exc}")
        return ClusterStatus(self.state_dir, True, daemons, nodes, etcd, tuple(problems), tuple(found))

    def down(self) -> DownResult:
        """Everything stops, jobs included; the leases of orphaned runs are released with a note in their run
        directories (their jobs were cancelled with the rest)."""
        start = time.monotonic()
        with self._locked():
            was_up = self._read_record() is not None
            try:
                found = orphans.find(self.shared_dir, None)
            except ports.PortError:
                found = []
            killed = self._teardown()
            cleaned = [o.run_id for o in found]
            for orphan in found:
                ports.release(self.shared_dir, orphan.run_id)
                note = {
                    "cleaned_at": time.time(),
                    "by": "cluster.down",
                    "launcher": orphan.lease.launcher.to_json(),
                }
                orphans.record_cleanup(
                    orphan, note, "its jobs were stopped with the cluster (cluster.down); ports released"
                )
        return DownResult(was_up, time.monotonic() - start, tuple(killed), tuple(cleaned))

    def config(self) -> ClusterConfig:
        """The cluster's configuration, read through the same loader as any cluster.env."""
        if self._read_record() is None:
            raise LocalClusterError(f"the local cluster at {self.state_dir} is not up")
        return load_cluster_config(self.state_dir / "cluster.env")

    def layout(self) -> Layout:
        record = self._read_record()
        if record is None:
            raise LocalClusterError(f"the local cluster at {self.state_dir} is not up")
        return record[0]

    def node_command(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` prefixed to run inside ``node`` as its jobs do (its network, mounts and hostname)."""
        for proc in self._read_record_or_fail()[1]:
            if proc.name == f"slurmd-{node}":
                return ["nsenter", "-t", str(proc.pid), "--net", "--mount", "--uts", "--", *argv]
        raise LocalClusterError(f"no node {node!r} in the local cluster at {self.state_dir}")

    # -- bring-up ----------------------------------------------------------------------------------------

    def _preconditions(self) -> None:
        if os.geteuid() != 0:
            raise LocalClusterError("the local cluster needs root (network namespaces, mounts, slurmd)")
        missing = missing_tools()
        if self.docker and find_dockerd() is None:
            missing.append("dockerd")
        if missing:
            raise LocalClusterError(
                "missing tools: " + ", ".join(missing) + " (Debian: slurmctld slurmd slurm-client munge "
                "etcd-server etcd-client iproute2 util-linux)"
            )

    def _write_files(self, layout: Layout) -> None:
        for d in (layout.log_dir, self.state_dir / "run", layout.munge_socket.parent):
            d.mkdir(parents=True, exist_ok=True)
        layout.munge_socket.parent.chmod(0o755)
        # Fresh controller state: restored node states would read "idle" before any slurmd registered.
        shutil.rmtree(layout.ctld_state, ignore_errors=True)
        layout.ctld_state.mkdir(parents=True)
        conf = slurmconf.slurm_conf(layout, self.gpus_per_node, self._next_job_id())
        atomic_write_text(layout.slurm_conf, conf)
        atomic_write_text(layout.gres_conf, slurmconf.gres_conf(layout, self.gpus_per_node))
        atomic_write_text(layout.hosts_path, layout.hosts_file())
        atomic_write_text(layout.resolv_path, "# local cluster: names come from /etc/hosts only\n")
        key = layout.munge_key_dir / "munge.key"
        layout.munge_key_dir.mkdir(mode=0o700, exist_ok=True)
        layout.munge_key_dir.chmod(0o700)
        if not key.is_file():
            atomic_write_bytes(key, os.urandom(1024), mode=0o400)
        for node in layout.nodes:
            (layout.node_dir(node) / "spool").mkdir(parents=True, exist_ok=True)
            if self.docker:
                layout.docker_dir(node).mkdir(parents=True, exist_ok=True)
            podman.write_config(layout.podman_dir(node), layout.podman_run_dir(node), node)
            for dev in layout.gpu_devices(node, self.gpus_per_node):
                dev.parent.mkdir(parents=True, exist_ok=True)
                if not dev.exists():
                    os.mknod(
                        dev, 0o666 | 0o020000, os.makedev(1, 3)
                    )  # a character device, /dev/null's numbers
        # etcd starts empty on every up: keys of an earlier cluster would only mislead the launchers.
        shutil.rmtree(layout.etcd_dir, ignore_errors=True)

    def _start_daemons(self, layout: Layout) -> None:
        started: list[Proc] = []

        def spawn(name: str, argv: list[str]) -> Proc:
            proc = procs.spawn(name, argv, layout.log_dir / f"{name}.out")
            started.append(proc)
            self._write_record(layout, started)
            return proc

        key_dir = layout.munge_key_dir
        munged = spawn(
            "munged",
            [
                "munged", "--foreground", "--force", f"--socket={layout.munge_socket}",
                f"--key-file={key_dir / 'munge.key'}", f"--seed-file={key_dir / 'munge.seed'}",
                f"--pid-file={self.state_dir / 'run' / 'munged.pid'}",
                f"--log-file={layout.log_dir / 'munged.log'}",
            ],
        )  # fmt: skip
        head_net = f"--net={layout.netns_path(HEAD)}"
        head = layout.head_addr
        # Ahead of the engines in the scheduler (nice -5): on a 2-core machine compiling vLLM workers, a starved
        # etcd answers lease refreshes late enough for the launcher to count it lost.
        etcd = spawn(
            "etcd",
            [
                "nsenter", head_net, "--", "nice", "-n", "-5",
                "etcd", f"--name={layout.tag}", f"--data-dir={layout.etcd_dir}",
                f"--listen-client-urls=http://{head}:{ETCD_CLIENT_PORT}",
                f"--advertise-client-urls=http://{head}:{ETCD_CLIENT_PORT}",
                f"--listen-peer-urls=http://{head}:{ETCD_PEER_PORT}",
                f"--initial-advertise-peer-urls=http://{head}:{ETCD_PEER_PORT}",
                f"--initial-cluster={layout.tag}=http://{head}:{ETCD_PEER_PORT}",
                "--initial-cluster-state=new", "--logger=zap", "--log-outputs=stderr",
            ],
        )  # fmt: skip
        self._wait(lambda: layout.munge_socket.exists(), "munged's socket", [munged], layout)
        ctld = spawn(
            "slurmctld", self._in_host(layout, HEAD, ["slurmctld", "-D", "-f", str(layout.slurm_conf)])
        )
        self._wait(
            lambda: self._ctld_ping(layout), "slurmctld to answer scontrol ping", [munged, ctld], layout
        )
        slurmds = [
            spawn(
                f"slurmd-{node}",
                self._in_host(layout, node, ["slurmd", "-D", "-N", node, "-f", str(layout.slurm_conf)]),
            )
            for node in layout.nodes
        ]
        watch = [munged, etcd, ctld, *slurmds]
        if self.docker:
            binary = find_dockerd() or "dockerd"
            for node in layout.nodes:
                run_dir = dockerd.exec_root(layout.tag, node)
                run_dir.mkdir(parents=True, exist_ok=True)
                data = layout.docker_dir(node) / "data"
                argv = dockerd.argv(binary, data, layout.docker_socket(node), run_dir)
                watch.append(spawn(f"dockerd-{node}", self._in_host(layout, node, argv)))
        self._wait(lambda: _etcd_health(layout.etcd_endpoint) == "healthy", "etcd /health", watch, layout)
        self._wait(lambda: self._nodes_ready(layout), "both slurmd nodes idle in sinfo", watch, layout)
        for node in layout.nodes if self.docker else ():
            sock = layout.docker_socket(node)
            self._wait(partial(dockerd.ping, sock), f"{node}'s docker daemon at {sock}", watch, layout)

    def _in_host(self, layout: Layout, host: str, argv: list[str]) -> list[str]:
        """argv run as host ``host`` of the cluster: its network namespace, own mounts and hostname."""
        return [
            "nsenter", f"--net={layout.netns_path(host)}", "--",
            "unshare", "--mount", "--uts", "--propagation", "private", "--",
            "sh", "-c", NODE_SHELL, "sh", host, str(layout.hosts_path), str(layout.resolv_path), *argv,
        ]  # fmt: skip

    def _write_config(self, layout: Layout) -> ClusterConfig:
        config = ClusterConfig(
            slurm_account=ACCOUNT,
            slurm_partition=PARTITION,
            slurm_qos=QOS,
            primary_node=layout.nodes[0],
            prefill_node=layout.nodes[0],
            decode_node=layout.nodes[-1],
            shared_dir=self.shared_dir,
            model_path=self.shared_dir / "models" / "atomdyn-mock",
            engine_profile="mocker",
            runtime="venv",
            project_dir=self.project_dir,
            python_venv=self.python_venv,
            gpus_per_node=self.gpus_per_node,
            etcd_endpoints=(layout.etcd_endpoint,),
            slurm_conf=layout.slurm_conf,
            node_addrs=tuple((n, layout.node_addr(n)) for n in layout.nodes),
            docker_host=layout.docker_host_template if self.docker else None,
            podman_config_dir=layout.podman_config_template,
        )
        config.write(
            layout.env_file, header=f"Local cluster {layout.tag} (generated by cluster.up; do not edit)"
        )
        loaded = load_cluster_config(layout.env_file)
        if loaded != config:
            raise LocalClusterError(f"{layout.env_file} does not read back as written: {loaded} != {config}")
        return loaded

    def _ensure_model(self, config: ClusterConfig, log: Callable[[str], None]) -> None:
        """MODEL_PATH of the local cluster is the mock engine's generated model directory (no downloads)."""
        try:
            from atomdyn_launchers.profiles import mockmodel

            if not mockmodel.is_complete(config.model_path):
                mockmodel.generate(config.model_path)
        except (ImportError, RuntimeError) as exc:
            log(f"MODEL_PATH {config.model_path} not generated ({exc}); the launchers will refuse to run")

    # -- waiting and probing -------------------------------------------------------------------------------

    def _wait(self, ready: Callable[[], bool], what: str, watch: list[Proc], layout: Layout) -> None:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not ready():
            dead = [p for p in watch if not procs.alive(p)]
            if dead:
                out = layout.log_dir / f"{dead[0].name}.out"
                raise LocalClusterError(
                    f"{dead[0].name} exited while waiting for {what}; last lines of {out}:\n"
                    + tail(out, 15, missing="(no log)")
                )
            if time.monotonic() >= deadline:
                raise LocalClusterError(f"timed out after {UP_TIMEOUT_S:.0f} s waiting for {what}")
            time.sleep(_POLL_S)

    def _slurm(self, layout: Layout, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SLURM_CONF": str(layout.slurm_conf)}
        return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=15, check=False)

    def _ctld_ping(self, layout: Layout) -> bool:
        done = self._slurm(layout, "scontrol", "ping")
        return done.returncode == 0 and "is UP" in done.stdout

    def _node_states(self, layout: Layout) -> dict[str, str]:
        done = self._slurm(layout, "sinfo", "-h", "-N", "-o", "%N %T")
        if done.returncode != 0:
            raise LocalClusterError(f"sinfo failed: {done.stderr.strip()}")
        return dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)

    def _nodes_ready(self, layout: Layout) -> bool:
        states = self._node_states(layout)
        return all(states.get(n) == "idle" for n in layout.nodes)

    # -- teardown -----------------------------------------------------------------------------------------

    def _teardown(self) -> list[str]:
        """Cancel jobs, stop the daemons by PID, stop anything else in the namespaces, delete them."""
        killed: list[str] = []
        record = self._read_record()
        if record is not None:
            layout, started = record
            ctld = [p for p in started if p.name == "slurmctld" and procs.alive(p)]
            inodes = {
                i for i in (procs.netns_inode(layout.netns_path(h)) for h in (HEAD, *layout.nodes)) if i
            }
            if ctld:
                self._save_next_job_id(layout)
                node_inodes = {
                    i for i in (procs.netns_inode(layout.netns_path(n)) for n in layout.nodes) if i
                }
                self._cancel_jobs(layout, node_inodes, started)
            # Nodes first so that slurmctld does not see them vanish mid-job; munged last (the others use it).
            order = sorted(started, key=lambda p: (p.name == "munged", p.name == "slurmctld"))
            killed += [f"{p.name}[{p.pid}]" for p in procs.stop(order)]
            strays = procs.procs_in_netns(inodes)
            killed += [f"{p.name}[{p.pid}]" for p in strays]
            procs.stop(strays)
            netns.destroy(layout.tag, layout.host_if)
            atomic_write_text(self.state_dir / "cluster.last.json", layout.record.read_text())
            layout.record.unlink()
            layout.env_file.unlink(missing_ok=True)
        self._teardown_strays()
        (REGISTRY / f"{self.tag}.json").unlink(missing_ok=True)
        return killed

    def _cancel_jobs(self, layout: Layout, inodes: set[int], daemons: list[Proc]) -> None:
        """scancel every job and wait (bounded) until the nodes hold nothing but their slurmd."""
        done = self._slurm(layout, "squeue", "-h", "-o", "%i")
        ids = done.stdout.split() if done.returncode == 0 else []
        if not ids:
            return
        self._slurm(layout, "scancel", *ids)
        own = {p.pid for p in daemons}
        deadline = time.monotonic() + 15.0
        while any(p.pid not in own for p in procs.procs_in_netns(inodes)) and time.monotonic() < deadline:
            time.sleep(_POLL_S)

    def _save_next_job_id(self, layout: Layout) -> None:
        done = self._slurm(layout, "scontrol", "show", "config")
        for line in done.stdout.splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "NEXT_JOB_ID" and value.strip().isdigit():
                atomic_write_text(self.state_dir / "next_job_id", value.strip() + "\n")

    def _next_job_id(self) -> int:
        try:
            return max(1, int((self.state_dir / "next_job_id").read_text()))
        except (OSError, ValueError):
            return 1

    def _teardown_strays(self) -> None:
        """Namespaces and the host veth of an `up` that crashed before writing its record; the per-node docker
        daemons' runtime state (its mounts lived in the nodes' mount namespaces, gone with them); etcd's data."""
        netns.destroy(self.tag, f"{self.tag}h")
        shutil.rmtree(Path("/dev/shm") / f"atomdyn-{self.tag}-etcd", ignore_errors=True)
        shutil.rmtree(dockerd.exec_root(self.tag, "x").parent, ignore_errors=True)

    # -- record --------------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def _write_record(self, layout: Layout, started: list[Proc]) -> None:
        record = {
            "schema_version": 1,
            "tag": layout.tag,
            "subnet": str(layout.subnet),
            "nodes": list(layout.nodes),
            "gpus_per_node": self.gpus_per_node,
            "procs": [p.to_json() for p in started],
        }
        atomic_write_json(layout.record, record)
        owner = self.owner.to_json() if self.owner else None
        atomic_write_json(
            REGISTRY / f"{layout.tag}.json", {**record, "state_dir": str(self.state_dir), "owner": owner}
        )

    def _read_record(self) -> tuple[Layout, list[Proc]] | None:
        path = self.state_dir / "cluster.json"
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise LocalClusterError(
                f"{path} is unreadable ({exc}); remove it after checking nothing runs"
            ) from exc
        layout = Layout(self.state_dir, raw["tag"], ipaddress.IPv4Network(raw["subnet"]), tuple(raw["nodes"]))
        return layout, [Proc.from_json(p) for p in raw["procs"]]

    def _read_record_or_fail(self) -> tuple[Layout, list[Proc]]:
        record = self._read_record()
        if record is None:
            raise LocalClusterError(f"the local cluster at {self.state_dir} is not up")
        return record


def prune_orphans(log: Callable[[str], None] = lambda _m: None) -> list[str]:
    """Take down every registered cluster whose owner process has exited; return their state directories."""
    pruned: list[str] = []
    for entry in sorted(REGISTRY.glob("*.json")) if REGISTRY.is_dir() else []:
        try:
            raw = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if not raw.get("owner") or procs.alive(Proc.from_json(raw["owner"])):
            continue
        state_dir = Path(raw["state_dir"])
        log(f"taking down the local cluster of exited process {raw['owner']['pid']}: {state_dir}")
        if (state_dir / "cluster.json").is_file():
            LocalCluster(state_dir).down()
        else:  # its state directory is gone: stop what the registry names, then the namespaces
            layout = Layout(state_dir, raw["tag"], ipaddress.IPv4Network(raw["subnet"]), tuple(raw["nodes"]))
            inodes = {i for i in (procs.netns_inode(Path("/run/netns", n)) for n in layout.all_netns) if i}
            procs.stop([Proc.from_json(p) for p in raw["procs"]])
            procs.stop(procs.procs_in_netns(inodes))
            netns.destroy(layout.tag, layout.host_if)
            shutil.rmtree(layout.etcd_dir, ignore_errors=True)
        entry.unlink(missing_ok=True)
        pruned.append(str(state_dir))
    return pruned


def _etcd_health(endpoint: str) -> str:
    try:
        with DIRECT.open(f"{endpoint}/health", timeout=1.0) as response:
            body = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"unreachable ({getattr(exc, 'reason', exc)})"
    return "healthy" if isinstance(body, dict) and body.get("health") == "true" else f"unhealthy: {body}"
