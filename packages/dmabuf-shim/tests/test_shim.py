"""Real programs registering memory under LD_PRELOAD=libdmabuf_shim.so, against the test doubles."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import Programs, Result

from dmabuf_shim.logformat import Registration, parse_registration

MiB = 1024 * 1024
EINVAL, EFAULT = 22, 14
ACCESS_ALL = 0xF  # local write, remote write, remote read, remote atomic


def registrations(r: Result) -> list[Registration]:
    return [reg for reg in (parse_registration(line) for line in r.log) if reg is not None]


def test_without_the_shim_gpu_memory_cannot_be_registered(programs: Programs) -> None:
    r = programs.run(programs.reg_app, "gpu-write", "hsa", "const", "0", preload=False)
    assert (r.int("reg"), r.int("errno")) == (0, EINVAL)
    assert r.int("shim_loaded") == 0


@pytest.mark.parametrize("classify", ["on-failure", "always"])
@pytest.mark.parametrize("backend", ["hsa", "cuda"])
@pytest.mark.parametrize(
    ("form", "delta"),
    [("const", 0), ("var", 100), ("iova", 4096 + 3)],
    ids=["ibv_reg_mr@1.1", "ibv_reg_mr_iova2@1.8-unaligned", "ibv_reg_mr_iova@1.7-unaligned"],
)
def test_interior_sub_allocation_lands_on_its_own_bytes(
    programs: Programs, backend: str, form: str, delta: int, classify: str
) -> None:
    env = {"DMABUF_SHIM_CLASSIFY": classify}
    r = programs.run(programs.reg_app, "gpu-write", backend, form, str(delta), env=env)
    assert r.int("reg") == 1, r.stderr
    assert r.int("write_status") == 0 and r.int("landed") == 1
    assert r.int("sentinel_intact") == 1, "the write reached the pool's base"
    assert r.int("read_status") == 0 and r.int("read_ok") == 1
    assert r.int("mr_addr_is_sub") == 1, "callers of ibv_reg_mr expect mr->addr == addr"
    assert r.int("exports_open") == 0, "the exported fd must be closed after registering"
    assert (r.int("dereg"), r.int("live_mrs_after")) == (0, 0)
    assert (r.int("dmabuf"), r.int("fallback"), r.int("failures")) == (1, 0, 0)
    [reg] = registrations(r)
    sub = 32 * MiB + delta
    expected_offset = sub if backend == "hsa" else sub % 4096  # HSA: from the allocation; CUDA: from the page
    assert reg == Registration(
        ok=True,
        backend=backend,
        path="dmabuf",
        size=MiB,
        offset=expected_offset,
        fd_closed=True,
        addr=reg.addr,
        iova=reg.addr,
        access=ACCESS_ALL,
        errno=None,
        # by default the plain call is made first; the NIC refuses GPU memory there
        detail="plain_errno:22" if classify == "on-failure" else None,
    )
    assert r.log[0].startswith("dmabuf-shim: init version=") and "backends=hsa,cuda" in r.log[0]
    assert r.log[0].endswith(f"classify={classify}")


def test_libibverbs_loaded_locally_by_a_plugin_is_still_found(programs: Programs) -> None:
    # UCX dlopen()s its IB module with RTLD_LOCAL: libibverbs is then outside the global scope
    r = programs.run(programs.plugin_loader, str(programs.plugin), "gpu-write", "hsa", "var", "100")
    assert r.int("reg") == 1 and r.int("landed") == 1 and r.int("sentinel_intact") == 1
    assert r.int("dmabuf") == 1 and r.int("failures") == 0
    assert "ibverbs=1 reg_dmabuf=1" in r.log[0]


@pytest.mark.parametrize("classify", ["on-failure", "always"])
def test_host_memory_passes_through_untouched(programs: Programs, classify: str) -> None:
    r = programs.run(programs.reg_app, "host", "200", env={"DMABUF_SHIM_CLASSIFY": classify})
    assert r.int("ok") == 200 and r.int("write_status") == 0 and r.int("landed") == 1
    # the real call's errno reaches the caller unchanged
    assert (r.int("unmapped_reg"), r.int("errno")) == (0, EFAULT)
    assert (r.int("registrations"), r.int("passthrough"), r.int("dmabuf")) == (203, 203, 0)
    assert r.int("failures") == 1
    assert registrations(r) == [], "host registrations are not logged at the default level"
    # by default only the failed call (unmapped memory) asks the runtimes what the pointer is
    queries = 1 if classify == "on-failure" else 203
    assert (r.int("hsa_queries"), r.int("cuda_queries")) == (queries, queries)


@pytest.mark.parametrize("backend", ["hsa", "cuda"])
def test_no_fd_leak_over_10000_registrations(programs: Programs, backend: str) -> None:
    r = programs.run(programs.reg_app, "leak", backend, "10000", env={"DMABUF_SHIM_LOG": "off"})
    assert r.int("ok") == 10000
    assert r.int("fds_after") == r.int("fds_before")
    assert r.int("exports_open") == 0 and r.int("live_mrs") == 0
    assert (r.int("registrations"), r.int("dmabuf"), r.int("failures")) == (10000, 10000, 0)
    assert r.log == []


@pytest.mark.parametrize("backend", ["hsa", "cuda"])
def test_8_threads_x_10000_registrations_stay_consistent(programs: Programs, backend: str) -> None:
    r = programs.run(programs.reg_app, "threads", backend, "8", "10000", env={"DMABUF_SHIM_LOG": "off"})
    assert r.int("ok") == 80000
    assert r.int("verified") == 8 * 200, "every 50th registration is written through and read back"
    assert r.int("exports_open") == 0 and r.int("live_mrs") == 0
    # 80000 GPU registrations + one host source buffer per thread
    assert (r.int("registrations"), r.int("dmabuf"), r.int("passthrough")) == (80008, 80000, 8)
    assert r.int("failures") == 0


def test_missing_runtimes_mean_passthrough(programs: Programs, verbs_only_dir: Path) -> None:
    r = programs.run(programs.host_app, "500", lib_dir=verbs_only_dir)
    assert r.int("ok") == 500 and r.int("shim_loaded") == 1
    assert (r.int("registrations"), r.int("passthrough"), r.int("dmabuf")) == (500, 500, 0)
    assert r.log == [
        "dmabuf-shim: init version=0.1.0 backends=none ibverbs=1 reg_dmabuf=1 strip=0x0 classify=on-failure"
    ]


def test_backend_none_leaves_gpu_memory_to_the_nic(programs: Programs) -> None:
    r = programs.run(programs.reg_app, "gpu-write", "hsa", "const", "0", env={"DMABUF_SHIM_BACKEND": "none"})
    assert (r.int("reg"), r.int("errno")) == (0, EINVAL)
    assert (r.int("passthrough"), r.int("failures"), r.int("dmabuf")) == (1, 1, 0)


def test_failed_export_falls_back_to_the_plain_call(programs: Programs) -> None:
    env = {"DMABUF_SHIM_HSA_LIB": str(programs.reentrant_hsa), "REENTRY_FAIL_EXPORT": "1"}
    r = programs.run(programs.reg_app, "gpu-write", "hsa", "const", "0", env=env)
    assert (r.int("reg"), r.int("errno")) == (0, EINVAL), "the plain call's error reaches the caller"
    assert (r.int("fallback"), r.int("failures"), r.int("dmabuf")) == (1, 1, 0)
    [reg] = registrations(r)
    assert (reg.ok, reg.backend, reg.path, reg.offset, reg.errno) == (False, "hsa", "plain", -1, EINVAL)
    assert reg.detail == "plain_errno:22,export_status:0x1003"


def test_rdma_core_without_dmabuf_registration_leaves_the_plain_result(programs: Programs) -> None:
    pre34 = programs.doubles["ibverbs_no_dmabuf"].parent
    env = {"LD_LIBRARY_PATH": f"{pre34}:{programs.doubles['lib_dir']}"}
    r = programs.run(programs.reg_app, "gpu-write", "hsa", "const", "0", env=env)
    assert (r.int("reg"), r.int("errno")) == (0, EINVAL)
    assert "reg_dmabuf=0" in r.log[0]
    [reg] = registrations(r)
    assert (reg.ok, reg.path, reg.detail) == (False, "plain", "plain_errno:22,no_ibv_reg_dmabuf_mr")
    assert (r.int("fallback"), r.int("failures")) == (1, 1)


def test_reentrant_runtime_calls_go_straight_to_libibverbs(programs: Programs) -> None:
    # the runtime calls ibv_reg_mr(NULL, ...) from its constructor (during the shim's initialisation)
    # and from inside the export; both must reach libibverbs directly, without deadlock or recursion
    r = programs.run(
        programs.reg_app,
        "gpu-write",
        "hsa",
        "const",
        "0",
        env={"DMABUF_SHIM_HSA_LIB": str(programs.reentrant_hsa)},
    )
    assert r.int("reg") == 1 and r.int("landed") == 1 and r.int("sentinel_intact") == 1
    assert f"reentrant_hsa: calls=2 last_errno={EINVAL}" in r.stderr
    assert (r.int("registrations"), r.int("dmabuf"), r.int("passthrough")) == (2, 1, 1)


def test_firmware_rejecting_atomics_and_the_strip_opt_in(programs: Programs) -> None:
    rejecting = {"IBV_DOUBLE_REJECT_ACCESS": "0x8"}
    r = programs.run(programs.reg_app, "gpu-write", "cuda", "var", "0", env=rejecting)
    assert (r.int("reg"), r.int("errno")) == (0, EINVAL)
    [reg] = registrations(r)
    assert (reg.ok, reg.path, reg.errno, reg.access) == (False, "dmabuf", EINVAL, ACCESS_ALL)
    assert reg.fd_closed, "the fd is closed on failure too"

    r = programs.run(
        programs.reg_app,
        "gpu-write",
        "cuda",
        "var",
        "0",
        env={**rejecting, "DMABUF_SHIM_STRIP_ACCESS": "0x8"},
    )
    assert r.int("reg") == 1 and r.int("landed") == 1
    [reg] = registrations(r)
    assert (reg.ok, reg.access, reg.detail) == (True, ACCESS_ALL & ~0x8, "plain_errno:22,stripped:0x8")


def test_log_file_stats_at_exit_and_log_level_all(programs: Programs, tmp_path: Path) -> None:
    log = tmp_path / "shim.log"
    env = {"DMABUF_SHIM_LOG_FILE": str(log), "DMABUF_SHIM_STATS": "1", "DMABUF_SHIM_LOG": "all"}
    r = programs.run(programs.reg_app, "gpu-write", "hsa", "var", "0", env=env)
    assert r.log == [], "everything goes to the file"
    lines = log.read_text().splitlines()
    regs = [reg for reg in map(parse_registration, lines) if reg is not None]
    assert [(reg.backend, reg.path) for reg in regs] == [("hsa", "dmabuf"), ("none", "plain")]
    assert lines[-1] == "dmabuf-shim: stats registrations=2 dmabuf=1 passthrough=1 fallback=0 failures=0"


def test_bad_configuration_is_named(programs: Programs) -> None:
    env = {
        "DMABUF_SHIM_LOG": "verbose",
        "DMABUF_SHIM_STRIP_ACCESS": "atomics",
        "DMABUF_SHIM_BACKEND": "rocm",
        "DMABUF_SHIM_CLASSIFY": "sometimes",
    }
    r = programs.run(programs.reg_app, "host", "1", env=env)
    joined = "\n".join(r.log)
    assert "config bad DMABUF_SHIM_LOG='verbose' (want off, gpu or all)" in joined
    assert "config bad DMABUF_SHIM_STRIP_ACCESS='atomics'" in joined
    assert "config bad DMABUF_SHIM_BACKEND='rocm'" in joined
    assert "config bad DMABUF_SHIM_CLASSIFY='sometimes' (want on-failure or always)" in joined
    assert r.int("ok") == 1


def test_library_has_no_link_time_dependency_on_verbs_or_gpu_runtimes(programs: Programs) -> None:
    out = subprocess.run(
        ["readelf", "-d", str(programs.shim)], capture_output=True, text=True, check=True
    ).stdout
    needed = {line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line}
    assert needed, "readelf printed no NEEDED entries at all"
    for forbidden in ("libibverbs", "libhsa-runtime64", "libcuda", "libamdhip64", "libstdc++"):
        assert not any(lib.startswith(forbidden) for lib in needed), f"{forbidden} in DT_NEEDED: {needed}"


def test_native_sources_need_no_foreign_headers() -> None:
    native = Path(__file__).resolve().parents[1] / "src" / "native"
    includes = [
        (source.name, line)
        for source in native.iterdir()
        for line in source.read_text().splitlines()
        if line.startswith("#include")
    ]
    assert includes, "no #include lines found: wrong directory?"
    for name, line in includes:
        for header in ("infiniband/", "hsa/", "hsa.h", "cuda.h", "hip/"):
            assert header not in line, f"{name}: {line} needs a foreign header at build time"
