"""Backend resolution: the real code, in fresh interpreters, with a constructed torch / nixl_rocm / env."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nixl_helpers import env_for, make_fake_torch, make_nixl_rocm, run_ok, run_py

from nixl_compat.resolve import probe_host

SHOW = """
    import json
    from nixl_compat.resolve import resolve_backend
    r = resolve_backend()
    print(json.dumps({"module": r.module_name, "host": r.host.kind, "version": r.version,
                      "meta": r.meta_choice, "candidates": [c.__dict__ for c in r.candidates]}))
"""


def resolve(env: dict[str, str]) -> dict[str, object]:
    out = run_ok(SHOW, env).strip().splitlines()[-1]
    result: dict[str, object] = json.loads(out)
    return result


def status(result: dict[str, object], module: str) -> dict[str, str]:
    cands = result["candidates"]
    assert isinstance(cands, list)
    return next(c for c in cands if c["module"] == module)


def test_cpu_host_takes_installed_cuda_build() -> None:
    r = resolve(env_for())
    assert (r["module"], r["host"], r["version"]) == ("nixl_cu13", "cpu", "1.5.1")


def test_rocm_host_prefers_nixl_rocm_and_rejects_cuda_builds(tmp_path: Path) -> None:
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip="6.4.43482", cuda=None))
    r = resolve(env_for(root))
    assert (r["module"], r["host"]) == ("nixl_rocm", "rocm")
    assert "CUDA build on a ROCm host" in status(r, "nixl_cu13")["reason"]
    assert r["meta"] == "nixl_cu13", "the meta package would have picked the CUDA build here"


def test_rocm_host_without_nixl_rocm_fails_with_every_reason(tmp_path: Path) -> None:
    root = make_fake_torch(tmp_path, hip="6.4.43482", cuda=None)
    proc = run_py("import rixl", env_for(root))
    assert proc.returncode != 0
    err = proc.stderr
    assert "BackendResolutionError" in err and "no NIXL backend usable on this rocm host" in err
    assert "nixl_rocm: missing: not installed" in err
    assert "nixl_cu13: rejected: CUDA build on a ROCm host" in err
    assert "NIXL_COMPAT_BACKEND" in err


def test_broken_nixl_rocm_is_rejected_with_its_import_error(tmp_path: Path) -> None:
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip="6.4.43482", cuda=None), broken=True)
    proc = run_py("import rixl", env_for(root))
    assert proc.returncode != 0
    assert "nixl_rocm: rejected: import failed: libamdhip64.so.7" in proc.stderr


def test_cuda_host_prefers_torch_major_then_other_cuda_build(tmp_path: Path) -> None:
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip=None, cuda="12.8"))
    r = resolve(env_for(root))
    assert (r["module"], r["host"]) == ("nixl_cu13", "cuda")
    assert status(r, "nixl_cu12")["status"] == "missing"
    assert "ROCm build on a CUDA host" in status(r, "nixl_rocm")["reason"]


def test_env_var_forces_a_backend_even_against_the_host(tmp_path: Path) -> None:
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip="6.4.43482", cuda=None))
    r = resolve(env_for(root, NIXL_COMPAT_BACKEND="nixl_cu13"))
    assert r["module"] == "nixl_cu13"
    assert "forced by NIXL_COMPAT_BACKEND" in status(r, "nixl_cu13")["reason"]


def test_env_var_through_meta_package_and_bad_values() -> None:
    r = resolve(env_for(NIXL_COMPAT_BACKEND="nixl"))
    assert r["module"] == "nixl_cu13"
    bad = run_py("import rixl", env_for(NIXL_COMPAT_BACKEND="rixl"))
    assert bad.returncode != 0
    assert "NIXL_COMPAT_BACKEND='rixl' is not one of nixl_rocm, nixl_cu13, nixl_cu12, nixl" in bad.stderr
    missing = run_py("import rixl", env_for(NIXL_COMPAT_BACKEND="nixl_cu12"))
    assert "nixl_cu12: missing: not installed" in missing.stderr


def test_kfd_device_alone_marks_a_rocm_host(tmp_path: Path) -> None:
    kfd = tmp_path / "kfd"
    assert probe_host(kfd).kind in ("cpu", "cuda")
    kfd.write_text("")
    host = probe_host(kfd)
    assert host.kind == "rocm" and str(kfd) in host.reasons[-1]


@pytest.mark.parametrize(
    "hip,cuda,kind", [("6.4.1", None, "rocm"), (None, "13.0", "cuda"), (None, None, "cpu")]
)
def test_torch_version_is_read_without_importing_torch(
    tmp_path: Path, hip: str, cuda: str, kind: str
) -> None:
    root = make_fake_torch(tmp_path, hip=hip, cuda=cuda)
    (root / "torch" / "__init__.py").write_text("raise RuntimeError('torch must not be imported')\n")
    out = run_ok(
        """
        import sys
        from pathlib import Path
        from nixl_compat.resolve import probe_host
        print(probe_host(Path("/nonexistent-kfd")).kind, "torch" in sys.modules)
        """,
        env_for(root),
    )
    assert out.split() == [kind, "False"]
