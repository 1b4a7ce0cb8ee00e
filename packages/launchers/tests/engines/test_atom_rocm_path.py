"""ATOM_UCX_PATH=rocm in a container (issue 34, defect 2): UCX decides ROCm dma-buf support from
/boot/config-$(uname -r) alone (src/uct/rocm/base/rocm_base.c at b56982d8), and with UCX_ROCM_COPY_DMABUF=y and no
such file it refuses the rocm_copy MD ("ROCm dmabuf support requested but not found", rocm_copy_md.c). So the
variable is "try" and docker, podman and pyxis get the node's kernel configuration read-only at that path."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from atomdyn_launchers.contract.ports import Ports
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.base import RoleContext, RolePlan
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.runtimes import DockerRuntime, PodmanRuntime, PyxisRuntime, VenvRuntime
from atomdyn_launchers.runtimes import devices as runtimes
from atomdyn_launchers.sbatch import render_arg

DOCKER = DockerRuntime("img:1", "atomdyn-r", ["/shared"])
PODMAN = PodmanRuntime("img:1", "atomdyn-r", ["/shared"])
PYXIS = PyxisRuntime("/shared/images/img.sqsh", ["/shared"])
RELEASE = subprocess.run(["uname", "-r"], capture_output=True, text=True, check=True).stdout.strip()


def _ctx(runtime: object, mode: str = "decode", path: str = "rocm") -> RoleContext:
    return RoleContext(
        run_id="20260101T000000Z-disagg-atom",
        role=mode,
        mode=mode,
        with_frontend=False,
        index=0,
        model=get_model("qwen3-8b-bf16"),
        model_path="/shared/models/qwen3-8b",
        etcd_endpoint="http://10.1.2.3:2379",
        namespace="atomdyn-test",
        home_dir="/shared/runs/r/home/x",
        ports=Ports.for_role(0),
        runtime=runtime,  # type: ignore[arg-type]
        run_dir="/shared/runs/r",
        node_python=("/opt/venv/bin/python",),
        ucx_net_devices="ionic_0:1",
        ucx_path=path,
        ucx_aux_netdev="eth0",
    )


def _worker(plan: RolePlan) -> str:
    return " ".join(render_arg(a) for a in plan.processes[0].argv)


def _kernel_lines(plan: RolePlan) -> list[str]:
    start = next(i for i, line in enumerate(plan.prelude) if line.startswith("# UCX decides ROCm dma-buf"))
    end = next(i for i, line in enumerate(plan.prelude) if i > start and line == "fi")
    return plan.prelude[start : end + 1]


def _run(lines: list[str], show: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "kernel.sh"
    script.write_text("\n".join([*lines, show, ""]))
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, check=False)


def test_rocm_path_asks_for_dmabuf_with_try() -> None:
    env = get_engine("atom").plan(_ctx(VenvRuntime(Path("/opt/venv")))).processes[0].env
    assert env["UCX_ROCM_COPY_DMABUF"] == "try"


@pytest.mark.parametrize("runtime", [DOCKER, PODMAN], ids=["docker", "podman"])
def test_docker_and_podman_mount_the_kernel_configuration(
    runtime: DockerRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtimes, "BOOT_DIR", str(tmp_path / "boot"), raising=False)
    monkeypatch.setattr(runtimes, "MODULES_DIR", str(tmp_path / "modules"), raising=False)
    plan = get_engine("atom").plan(_ctx(runtime))
    # The worker and the checks before it (the RDMA check, NIXL's doctor) run with the mount.
    assert '"${KERNEL_CONFIG_ARGS[@]}"' in _worker(plan)
    doctor = next(line for line in plan.prelude if "nixl-compat doctor" in line)
    assert '"${KERNEL_CONFIG_ARGS[@]}"' in doctor
    lines = _kernel_lines(plan)
    show = 'for arg in "${KERNEL_CONFIG_ARGS[@]}"; do echo "$arg"; done'
    # No file on the node: no mount (docker -v would create a directory there), and the job says so.
    none = _run(lines, show, tmp_path)
    assert none.returncode == 0 and none.stdout == ""
    assert "UCX will find no ROCm dma-buf support" in none.stderr
    # /lib/modules/<release>/config (RHEL, Fedora) is mounted where UCX reads it.
    (tmp_path / "modules" / RELEASE).mkdir(parents=True)
    (tmp_path / "modules" / RELEASE / "config").write_text("CONFIG_PCI_P2PDMA=y\n")
    target = f"{tmp_path}/boot/config-{RELEASE}"
    modules = _run(lines, show, tmp_path)
    assert modules.stdout.splitlines() == ["-v", f"{tmp_path}/modules/{RELEASE}/config:{target}:ro"]
    # /boot/config-<release> itself, first.
    (tmp_path / "boot").mkdir()
    Path(target).write_text("CONFIG_DMABUF_MOVE_NOTIFY=y\n")
    assert _run(lines, show, tmp_path).stdout.splitlines() == ["-v", f"{target}:{target}:ro"]


def test_pyxis_mounts_the_kernel_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtimes, "BOOT_DIR", str(tmp_path / "boot"), raising=False)
    plan = get_engine("atom").plan(_ctx(PYXIS))
    mounts = next(a for a in _worker(plan).split() if a.startswith("--container-mounts="))
    assert mounts.endswith('"$KERNEL_CONFIG_MOUNT"')
    (tmp_path / "boot").mkdir()
    target = f"{tmp_path}/boot/config-{RELEASE}"
    Path(target).write_text("CONFIG_DMABUF_MOVE_NOTIFY=y\n")
    done = _run(_kernel_lines(plan), """printf '%s' "$KERNEL_CONFIG_MOUNT\"""", tmp_path)
    assert done.stdout == f",{target}:{target}:ro"


def test_only_the_rocm_path_of_p_d_mounts_it() -> None:
    atom = get_engine("atom")
    for plan in (
        atom.plan(_ctx(DOCKER, path="host-vram")),
        atom.plan(_ctx(DOCKER, mode="agg")),
        atom.plan(_ctx(PYXIS, path="host-vram")),
    ):
        assert "KERNEL_CONFIG" not in _worker(plan)
        assert not any("KERNEL_CONFIG" in line for line in plan.prelude)
    # The venv runtime runs on the node itself, where UCX reads the node's /boot: nothing to mount.
    venv = atom.plan(_ctx(VenvRuntime(Path("/opt/venv"))))
    assert not any("KERNEL_CONFIG" in line for line in venv.prelude)
    # The same holds for the other engines' workers.
    assert "KERNEL_CONFIG" not in _worker(
        get_engine("vllm").plan(replace(_ctx(DOCKER), ucx_path="host-vram"))
    )
