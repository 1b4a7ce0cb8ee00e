"""Names, addresses, ports and paths of one local cluster, all derived from its state directory.

The tag (``ad`` + 4 hex digits of the state directory's path) prefixes every namespace and host interface,
so a developer's cluster and a test session's cluster never collide. The /24 is chosen once at ``up`` from
10.64.0.0/10 (hash-seeded, skipping any network the host already routes) and kept in ``cluster.json``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

HEAD = "head"  # the hostname of the namespace holding the bridge, slurmctld and etcd
PARTITION = "local"
ACCOUNT = "rehearsal"
QOS = "normal"
SLURMCTLD_PORT = 6817  # each daemon listens inside its own network namespace: fixed ports cannot collide
SLURMD_PORT = 6818
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380


def tag_for(state_dir: Path) -> str:
    return "ad" + hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:4]


def host_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the host has an address in or a route to."""
    out = subprocess.run(["ip", "-4", "-o", "route", "show", "table", "all"], capture_output=True, text=True)
    nets: list[ipaddress.IPv4Network] = []
    for line in out.stdout.splitlines():
        words = line.split()
        if not words:
            continue
        dest = words[1] if words[0] in ("local", "broadcast", "unicast", "multicast") else words[0]
        if dest == "default":
            continue
        try:
            nets.append(ipaddress.IPv4Network(dest, strict=False))
        except ValueError:
            continue
    return nets


def pick_subnet(tag: str, in_use: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """A /24 inside 10.64.0.0/10 that overlaps nothing the host knows, starting at a tag-derived slot."""
    space = ipaddress.IPv4Network("10.64.0.0/10")
    slots = 2 ** (24 - space.prefixlen)
    start = int(tag[2:], 16) % slots
    for i in range(slots):
        base = int(space.network_address) + ((start + i) % slots) * 256
        net = ipaddress.IPv4Network((base, 24))
        if not any(net.overlaps(other) for other in in_use):
            return net
    raise RuntimeError("no free /24 in 10.64.0.0/10 for the local cluster")


@dataclass(frozen=True)
class Layout:
    state_dir: Path
    tag: str
    subnet: ipaddress.IPv4Network
    nodes: tuple[str, ...] = ("node1", "node2")

    # -- network ----------------------------------------------------------------------------------------
    def netns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def netns_path(self, host: str) -> Path:
        return Path("/run/netns") / self.netns(host)

    @property
    def all_netns(self) -> tuple[str, ...]:
        return tuple(self.netns(h) for h in (HEAD, *self.nodes))

    @property
    def host_if(self) -> str:
        return f"{self.tag}h"

    @property
    def head_addr(self) -> str:
        return str(self.subnet[254])

    @property
    def host_addr(self) -> str:
        return str(self.subnet[253])

    def node_addr(self, node: str) -> str:
        return str(self.subnet[self.nodes.index(node) + 1])

    @property
    def etcd_endpoint(self) -> str:
        return f"http://{self.head_addr}:{ETCD_CLIENT_PORT}"

    def hosts_file(self) -> str:
        lines = [
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            f"{self.head_addr}\t{HEAD}",
        ]
        lines += [f"{self.node_addr(n)}\t{n}" for n in self.nodes]
        return "\n".join(lines) + "\n"

    # -- files ------------------------------------------------------------------------------------------
    @property
    def record(self) -> Path:
        return self.state_dir / "cluster.json"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "cluster.env"

    @property
    def slurm_conf(self) -> Path:
        return self.state_dir / "etc" / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.state_dir / "etc" / "gres.conf"

    @property
    def hosts_path(self) -> Path:
        return self.state_dir / "etc" / "hosts"

    @property
    def resolv_path(self) -> Path:
        return self.state_dir / "etc" / "resolv.conf"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def munge_key_dir(self) -> Path:
        return self.state_dir / "munge-key"

    @property
    def munge_socket(self) -> Path:
        return self.state_dir / "munge" / "munge.socket"

    @property
    def ctld_state(self) -> Path:
        return self.state_dir / "slurmctld"

    def node_dir(self, node: str) -> Path:
        return self.state_dir / "nodes" / node

    def gpu_devices(self, node: str, count: int) -> list[Path]:
        return [self.node_dir(node) / "dev" / f"gpu{i}" for i in range(count)]

    # -- per-node docker daemons (optional) -----------------------------------------------------------------
    def docker_dir(self, node: str) -> Path:
        """The node's own image cache: it outlives down/up, as a real node's would."""
        return self.node_dir(node) / "docker"

    def docker_socket(self, node: str) -> Path:
        return self.docker_dir(node) / "docker.sock"

    @property
    def docker_host_template(self) -> str:
        """DOCKER_HOST for the generated config: ``%n`` is replaced by the node a job runs on."""
        return f"unix://{self.state_dir / 'nodes' / '%n' / 'docker' / 'docker.sock'}"

    # -- per-node podman configuration (RUNTIME=podman: daemonless, each node its own image store) -------------
    def podman_dir(self, node: str) -> Path:
        """The node's podman configuration files and image store (which outlives down/up, as docker's)."""
        return self.node_dir(node) / "podman"

    def podman_run_dir(self, node: str) -> Path:
        """podman's runtime state: under /run, removed with the per-node docker daemons' on down."""
        return Path("/run") / f"atomdyn-{self.tag}" / node / "podman"

    @property
    def podman_config_template(self) -> str:
        """PODMAN_CONFIG_DIR for the generated config: ``%n`` is replaced by the node a job runs on."""
        return str(self.state_dir / "nodes" / "%n" / "podman")

    @property
    def etcd_dir(self) -> Path:
        """etcd's data in memory when the machine has /dev/shm: the cluster's etcd starts empty on every up
        anyway, and etcd 3.4 syncs its log to disk on every write (it has no switch for that), which on a busy
        2-core machine took seconds and let the runs' leases expire."""
        shm = Path("/dev/shm")
        if shm.is_dir() and os.access(shm, os.W_OK):
            return shm / f"atomdyn-{self.tag}-etcd"
        return self.state_dir / "etcd"
