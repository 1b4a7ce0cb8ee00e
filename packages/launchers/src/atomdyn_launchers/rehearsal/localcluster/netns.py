"""The cluster's network: one namespace per node plus a head namespace holding the bridge.

The bridge lives in the head namespace, not on the host: once a Docker daemon has set the host's FORWARD
policy to DROP, a host bridge drops node-to-node traffic. The host joins the bridge through one veth
(``<tag>h``) with an address on the cluster's /24, so the submit host reaches etcd and the nodes directly on
the link, while the nodes have no route anywhere else.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from atomdyn_launchers.rehearsal.localcluster.layout import HEAD, Layout


def _ip(*args: str, stdin: str | None = None) -> None:
    done = subprocess.run(["ip", *args], input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def create(layout: Layout) -> None:
    prefix = layout.subnet.prefixlen
    for name in layout.all_netns:
        _ip("netns", "add", name)
    head = layout.netns(HEAD)
    _ip("link", "add", layout.host_if, "type", "veth", "peer", "name", "host", "netns", head)
    for node in layout.nodes:
        _ip(
            "-n",
            head,
            "link",
            "add",
            node,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            layout.netns(node),
        )
    head_cmds = [
        "link add br0 type bridge",
        f"addr add {layout.head_addr}/{prefix} dev br0",
        "link set br0 up",
    ]
    head_cmds += [f"link set {port} master br0 up" for port in ("host", *layout.nodes)]
    head_cmds.append("link set lo up")
    _ip("-n", head, "-batch", "-", stdin="\n".join(head_cmds) + "\n")
    for node in layout.nodes:
        cmds = [f"addr add {layout.node_addr(node)}/{prefix} dev eth0", "link set eth0 up", "link set lo up"]
        _ip("-n", layout.netns(node), "-batch", "-", stdin="\n".join(cmds) + "\n")
    _ip("addr", "add", f"{layout.host_addr}/{prefix}", "dev", layout.host_if)
    _ip("link", "set", layout.host_if, "up")


def existing_netns(tag: str) -> list[str]:
    """Namespaces named with this tag (also those a crashed `up` left behind)."""
    netns_dir = Path("/run/netns")
    if not netns_dir.is_dir():
        return []
    return sorted(p.name for p in netns_dir.iterdir() if p.name.startswith(f"{tag}-"))


def host_link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def destroy(tag: str, host_if: str) -> None:
    """Delete the host veth (which removes its peer) and every namespace with the tag."""
    if host_link_exists(host_if):
        _ip("link", "del", host_if)
    for name in existing_netns(tag):
        _ip("netns", "del", name)
