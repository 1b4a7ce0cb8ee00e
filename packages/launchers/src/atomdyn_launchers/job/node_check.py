"""The node-side half of ``nodes.check`` (``python -m atomdyn_launchers.job.node_check --spec ... --node ...``):
every check a job runs on its node, from the spec the submit side wrote (:mod:`atomdyn_launchers.nodes.check`),
each answering ``pass``, ``fail``, ``not needed`` or ``unknown`` with a detail. It runs with the node's Python."""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_launchers.contract.node_needs import NodeNeeds
from atomdyn_launchers.job import stores, ucx_check
from atomdyn_launchers.job.checks import FAIL, NOT_NEEDED, PASS, UNKNOWN, Check
from atomdyn_launchers.job.rdmaports import SYSFS_IB, RdmaPort, gid_text, rdma_ports

__all__ = [
    "FAIL",
    "NOT_NEEDED",
    "PASS",
    "SYSFS_IB",
    "UNKNOWN",
    "Check",
    "RdmaPort",
    "gid_text",
    "rdma_ports",
    "route_source",
    "run_checks",
]

MODULE = "atomdyn_launchers.job.node_check"


def _resolve4(name: str) -> str | None:
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET)
    except OSError:
        return None
    return str(infos[0][4][0]) if infos else None


def route_source(target: str) -> tuple[str | None, str | None]:
    """(source address, interface) of this host's route to ``target``, from ``ip -4 route get``."""
    address = target if _is_ip(target) else _resolve4(target)
    if address is None:
        return None, None
    done = subprocess.run(["ip", "-4", "route", "get", address], capture_output=True, text=True, check=False)
    words = done.stdout.split()
    src = words[words.index("src") + 1] if "src" in words else None
    dev = words[words.index("dev") + 1] if "dev" in words else None
    return src, dev


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _needs(spec: dict[str, Any]) -> NodeNeeds:
    raw = spec["needs"]
    return NodeNeeds(
        gpu_devices=tuple(raw["gpu_devices"]),
        rdma=raw["rdma"],
        gpu_memory=raw["gpu_memory"],
        dmabuf_shim=raw["dmabuf_shim"],
    )


def _devices(engine: str, needs: NodeNeeds) -> list[Check]:
    def present(paths: Sequence[str]) -> tuple[bool, str]:
        missing = [p for p in paths if not os.path.exists(p)]
        return not missing, ("missing " + ", ".join(missing)) if missing else "present: " + ", ".join(paths)

    out: list[Check] = []
    if needs.gpu_devices:
        ok, detail = present(needs.gpu_devices)
        out.append(Check("gpu-devices", PASS if ok else FAIL, detail))
    else:
        out.append(Check("gpu-devices", NOT_NEEDED, f"{engine} profile runs on CPU"))
    if needs.rdma == "required":
        ok, detail = present(["/dev/infiniband"])
        out.append(Check("rdma-devices", PASS if ok else FAIL, detail))
    elif needs.rdma == "optional":
        ok, detail = present(["/dev/infiniband"])
        out.append(Check("rdma-devices", PASS if ok else NOT_NEEDED, detail + " (optional: NVLink hosts)"))
    else:
        out.append(Check("rdma-devices", NOT_NEEDED, f"{engine} profile moves no KV over RDMA"))
    return out


def _rdma(needs: NodeNeeds, root: Path) -> Check:
    ports = rdma_ports(root)
    active = [p for p in ports if p.state.endswith("ACTIVE")]
    with_gid = [p for p in active if p.roce_v2]
    detail = (
        "; ".join(
            f"{p.device}/{p.port} {p.state} RoCEv2 "
            + (", ".join(f"[{i}] {g} ({n})" for i, g, n in p.roce_v2) or "none")
            for p in ports
        )
        or f"no RDMA devices in {root}"
    )
    if needs.rdma != "required":
        return Check("rdma-ports", NOT_NEEDED if not with_gid else PASS, detail)
    return Check(
        "rdma-ports",
        PASS if with_gid else FAIL,
        detail if with_gid else "no ACTIVE port with a RoCE v2 GID: " + detail,
    )


def _facts(spec: dict[str, Any]) -> dict[str, Any]:
    """What the runtime says of itself for the node side (``Runtime.node_facts``, written into the spec by the
    submit side): this module asks it, never the runtime's name, and cannot import the runtimes' registry."""
    facts: dict[str, Any] = spec["runtime_facts"]
    return facts


def _store(spec: dict[str, Any], docker_host: str) -> stores.NodeStore:
    """The runtime's image store on this node (its facts name it; images on the shared filesystem live in
    ``spec["images_dir"]``)."""
    return stores.store_for(_facts(spec), docker_host, spec.get("images_dir", ""))


def _rdma_mounts(spec: dict[str, Any], needs: NodeNeeds) -> Check:
    """The verbs provider libraries the worker containers mount (RDMA_PROVIDER_LIBS): a path missing on the node
    would give a container that sees no NIC through the provider the config names."""
    paths = list(spec.get("rdma_mounts", []))
    if needs.rdma != "required" or not _facts(spec)["mounts_rdma_libs"]:
        return Check("rdma-mounts", NOT_NEEDED, "no container mounts the NIC's verbs provider here")
    if not paths:
        return Check(
            "rdma-mounts", NOT_NEEDED, "RDMA_PROVIDER_LIBS names none: the image's own providers are used"
        )
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        return Check("rdma-mounts", FAIL, "missing on this node: " + ", ".join(missing))
    return Check("rdma-mounts", PASS, "present: " + ", ".join(paths))


def _advertise(probe_target: str, root: Path) -> Check:
    src, dev = route_source(probe_target)
    if src is None:
        return Check("advertise", FAIL, f"no route to {probe_target}: the management address is unknown")
    rdma_netdevs = {n for p in rdma_ports(root) for _, _, n in p.roce_v2 if n}
    hostname = socket.gethostname()
    named = _resolve4(hostname)
    detail = f"side channel {src} ({dev}); Dynamo advertises {hostname} -> {named}"
    if dev in rdma_netdevs:
        return Check("advertise", FAIL, f"{detail}: {dev} is an RDMA interface, not the management network")
    if named != src:
        return Check("advertise", FAIL, f"{detail}: the hostname does not resolve to the management address")
    return Check("advertise", PASS, detail)


def _shared(spec: dict[str, Any]) -> Check:
    path = Path(spec["token_path"])
    shared = spec.get("shared_dir") or path.parent.parent.parent
    seen = _read(path)
    if seen == spec["token"]:
        return Check("shared-dir", PASS, f"SHARED_DIR {shared} visible at the same path")
    if not seen:
        why = f"SHARED_DIR {shared} is not visible on this node ({path}, written by the submit host, is missing)"
    else:
        why = f"SHARED_DIR {shared} is another directory on this node ({path} holds another token)"
    return Check("shared-dir", FAIL, why)


def _model(spec: dict[str, Any]) -> Check:
    path = Path(spec["model_path"])
    if not path.exists():
        return Check("model-path", FAIL, f"{path} does not exist on this node")
    if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
        return Check("model-path", FAIL, f"{path} is not readable")
    entries = len(os.listdir(path)) if path.is_dir() else 1
    return Check("model-path", PASS, f"{path} readable ({entries} entries)")


def gpu_free_memory() -> tuple[str, str] | None:
    """(tool, free memory per GPU) from the first GPU tool present; None when none is installed."""
    if shutil.which("nvidia-smi"):
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        return "nvidia-smi", "; ".join(done.stdout.split("\n")).strip("; ") or done.stderr.strip()
    for tool, args in (
        ("amd-smi", ["metric", "--mem-usage", "--json"]),
        ("rocm-smi", ["--showmeminfo", "vram", "--json"]),
    ):
        if shutil.which(tool):
            done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, check=False)
            return tool, (done.stdout or done.stderr).strip()[:400]
    return None


def _gpu_memory(engine: str, needs: NodeNeeds) -> Check:
    if not needs.gpu_memory:
        return Check("gpu-memory", NOT_NEEDED, f"{engine} profile uses no GPU")
    found = gpu_free_memory()
    if found is None:
        return Check("gpu-memory", UNKNOWN, "no amd-smi, rocm-smi or nvidia-smi on this node")
    return Check("gpu-memory", PASS, f"{found[0]}: {found[1]}")


def _shim(spec: dict[str, Any], needs: NodeNeeds, host: str) -> Check:
    if not needs.dmabuf_shim:
        return Check("dmabuf-shim", NOT_NEEDED, f"{spec['engine']} profile does not preload it here")
    if _facts(spec)["in_image"] and spec["shim_image"]:
        store = _store(spec, host)
        argv = store.one_shot(spec["shim_image"], ["dmabuf-shim", "env", "--check"])
        env = store.env()
        where = f"in {spec['shim_image']}"
    else:
        argv = [str(Path(spec["python_venv"]) / "bin" / "dmabuf-shim"), "env", "--check"]
        env = dict(os.environ)
        where = f"in {spec['python_venv']}"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)
    except OSError as exc:
        return Check("dmabuf-shim", FAIL, f"cannot run dmabuf-shim {where}: {exc}")
    last = (done.stdout + done.stderr).strip().splitlines()[-1:] or ["(no output)"]
    return Check("dmabuf-shim", PASS if done.returncode == 0 else FAIL, f"{where}: {last[0]}")


def _ucx_commands(
    spec: dict[str, Any], needs: NodeNeeds, host: str, env: dict[str, str]
) -> list[tuple[list[str], str]]:
    """ucx_info in the workers' runtime: in the venv (its own, its NIXL wheel's UCX, else the node's), or the
    image's with the workers' devices."""
    argv = ucx_check.in_image()
    devices = [d for d in (*needs.gpu_devices, "/dev/infiniband") if os.path.exists(d)]
    if _facts(spec)["in_image"] and spec["images"]:
        image = spec.get("shim_image") or next(iter(spec["images"]))  # the P/D workers' image
        run = _store(spec, host).one_shot(
            image, argv, network="host", devices=devices, mounts=spec.get("rdma_mounts", []), env=env
        )
        return [(run, f"in {image}")]
    return ucx_check.venv_commands(spec.get("worker_venv") or spec["python_venv"])


def _ucx(spec: dict[str, Any], needs: NodeNeeds, node: str, host: str, sysfs_ib: Path) -> Check:
    """UCX's own ucx_info with the P/D workers' UCX variables for this node: a UCP context and an endpoint to a
    peer on another node, judged (job/ucx_check.py); a problem names the variable to change."""
    ucx = spec.get("ucx")
    if not ucx:
        return Check("ucx", NOT_NEEDED, f"{spec['engine']} workers move no KV through UCX in this check")
    env: dict[str, str] = dict(ucx["env"].get(node, {}))
    env.update(expand_job_values(ucx.get("shell", {}).get(node, {}), env, sysfs_ib))
    candidates = _ucx_commands(spec, needs, host, env)
    extra = _store(spec, host).env() if _facts(spec)["in_image"] else {}
    answer = ucx_check.run_first(candidates, {**extra, **env})
    if not answer.found:
        return Check(
            "ucx", UNKNOWN,
            f"no ucx_info where the workers run ({answer.where}; nor a NIXL wheel's UCX): UCX_* not checked here",
        )  # fmt: skip
    where = answer.where
    verdict = ucx_check.judge_output(answer.text, env, ucx_check.roce_v2_map(sysfs_ib))
    shown = ", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "no UCX variables"
    return Check("ucx", PASS if verdict.ok else FAIL, f"{where}, {shown}: {verdict.detail()}")


def aux_netdevs(devices: str, gid_index: str, sysfs_ib: Path) -> str:
    """What a job's tcp:aux prelude reads on the node (``$UCX_AUX_NETDEV``, engines/atom.py): the netdev under
    the GID of each RDMA port that ``devices`` names (``UCX_IB_GID_INDEX``; ``auto``: the port's first IPv4
    RoCE v2 GID), each once, from sysfs."""
    ports = {f"{p.device}:{p.port}": p for p in rdma_ports(sysfs_ib)}
    found: list[str] = []
    for entry in (e for e in devices.split(",") if ":" in e):
        port = ports.get(entry)
        gids = port.roce_v2 if port else ()
        if gid_index.isdigit():
            chosen = [n for i, _, n in gids if i == int(gid_index)]
        else:
            chosen = [n for _, g, n in gids if _is_ip(g) and ipaddress.ip_address(g).version == 4][:1]
        found += [n for n in chosen if n and n not in found]
    return ",".join(found)


def expand_job_values(shell: dict[str, str], env: dict[str, str], sysfs_ib: Path) -> dict[str, str]:
    """UCX variables a job computes on the node, expanded as its shell would: ``$UCX_AUX_NETDEV`` from sysfs
    (:func:`aux_netdevs`), every other variable as the node's environment has it."""
    out: dict[str, str] = {}
    for name, text in shell.items():

        def expand(extra: dict[str, str], text: str = text) -> str:
            done = subprocess.run(
                ["bash", "-c", f"printf %s {text}"], env={**os.environ, **extra},
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            return done.stdout

        bare = expand({"UCX_AUX_NETDEV": ""})
        gid = env.get("UCX_IB_GID_INDEX", "auto")
        out[name] = expand({"UCX_AUX_NETDEV": aux_netdevs(bare, gid, sysfs_ib)})
    return out


def _boot_config(spec: dict[str, Any], node: str) -> Check:
    """UCX reads ROCm dma-buf support only from /boot/config-$(uname -r) (src/uct/rocm/base/rocm_base.c): a
    worker with a ROCm transport in UCX_TLS (ATOM_UCX_PATH=rocm) gets the node's file mounted there, so there it
    must exist (or /lib/modules/<release>/config, which the job mounts in its place)."""
    found, wanted = ucx_check.boot_config()
    ucx = spec.get("ucx") or {}
    tls = dict(ucx.get("env", {}).get(node, {})).get("UCX_TLS", "")
    rocm = any(t.startswith("rocm") for t in tls.split(","))
    if found == wanted:
        return Check("boot-config", PASS, f"{wanted} present (UCX reads ROCm dma-buf support from it)")
    if found:
        return Check("boot-config", PASS, f"{wanted} absent, {found} present (the ROCm path mounts it there)")
    if rocm:
        return Check(
            "boot-config", FAIL,
            f"{wanted} is missing (and /lib/modules/<release>/config): the workers' UCX_TLS={tls} has ROCm "
            "transports, and UCX reads ROCm dma-buf support only from this file, without which VRAM cannot be "
            "registered on ionic",
        )  # fmt: skip
    return Check("boot-config", NOT_NEEDED, f"{wanted} absent; no ROCm transport in the workers' UCX_TLS")


def run_checks(
    spec: dict[str, Any], docker_host: str, sysfs_ib: Path = SYSFS_IB, node: str = ""
) -> list[Check]:
    engine = spec["engine"]
    needs = _needs(spec)
    checks = _devices(engine, needs)
    checks.append(_rdma(needs, sysfs_ib))
    checks.append(_rdma_mounts(spec, needs))
    checks.append(_advertise(spec["probe_target"], sysfs_ib))
    checks += _store(spec, docker_host).checks(spec)
    checks.append(_shared(spec))
    checks.append(_model(spec))
    checks.append(_gpu_memory(engine, needs))
    checks.append(_shim(spec, needs, docker_host))
    checks.append(_ucx(spec, needs, node, docker_host, sysfs_ib))
    checks.append(_boot_config(spec, node))
    rows = spec.get("rows")
    return [c for c in checks if c.name in rows] if rows else checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE, description="node side of nodes.check (run by its jobs)")
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--docker-host", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    spec = json.loads(args.spec.read_text(encoding="utf-8"))
    checks = run_checks(spec, args.docker_host, node=args.node)
    atomic_write_json(args.out, {"node": args.node, "checks": [c.to_json() for c in checks]})
    for check in checks:
        print(f"{check.name:<14} {check.status:<10} {check.detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
