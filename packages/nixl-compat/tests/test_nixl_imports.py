"""Every way vLLM (0.10 to 0.33) imports NIXL, against the shim on this host's real nixl_cu13."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest
from nixl_helpers import env_for, make_fake_torch, make_nixl_rocm, run_ok, run_py

# (vLLM releases, the statements they run); each must leave upstream's own objects behind.
FORMS = {
    "0.14-0.20 from-import": """
        from rixl._api import nixl_agent as NixlWrapper
        from rixl._bindings import nixlXferTelemetry
        from rixl._api import nixl_agent_config
        api = NixlWrapper.__module__
    """,
    "0.21-0.26 import_module": """
        import importlib
        api_mod = importlib.import_module("rixl._api")
        bindings = importlib.import_module("rixl._bindings")
        NixlWrapper = api_mod.nixl_agent
        nixl_agent_config = api_mod.nixl_agent_config
        nixlXferTelemetry = bindings.nixlXferTelemetry
    """,
    "0.22+ find_spec then import_module": """
        import importlib, importlib.util, sys
        assert "rixl" not in sys.modules
        assert importlib.util.find_spec("rixl") is not None, "find_spec('rixl') found nothing"
        NixlWrapper = importlib.import_module("rixl._api").nixl_agent
        nixl_agent_config = importlib.import_module("rixl._api").nixl_agent_config
        nixlXferTelemetry = importlib.import_module("rixl._bindings").nixlXferTelemetry
    """,
    "package attributes": """
        import rixl
        NixlWrapper = rixl.nixl_agent
        nixl_agent_config = rixl._api.nixl_agent_config
        nixlXferTelemetry = rixl._bindings.nixlXferTelemetry
        from rixl.logging import get_logger
        import rixl._utils
        assert rixl.logging.get_logger is get_logger
    """,
}

CHECK = """
    import sys
    real_api = sys.modules["{backend}._api"]
    real_bindings = sys.modules["{backend}._bindings"]
    assert NixlWrapper is real_api.nixl_agent, (NixlWrapper, real_api)
    assert nixl_agent_config is real_api.nixl_agent_config
    assert nixlXferTelemetry is real_bindings.nixlXferTelemetry
    for sub in ("_api", "_bindings", "_utils", "logging"):
        assert sys.modules["rixl." + sub] is sys.modules["{backend}." + sub], sub
    print("backend", sys.modules["rixl"].backend_name)
"""


@pytest.mark.parametrize("form", list(FORMS))
def test_vllm_import_form_gets_upstream_objects(form: str) -> None:
    out = run_ok(dedent(FORMS[form]) + dedent(CHECK.format(backend="nixl_cu13")), env_for())
    assert "backend nixl_cu13" in out


@pytest.mark.parametrize("form", list(FORMS))
def test_vllm_import_form_on_rocm_host_gets_nixl_rocm(form: str, tmp_path: Path) -> None:
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip="6.4.43482", cuda=None))
    out = run_ok(dedent(FORMS[form]) + dedent(CHECK.format(backend="nixl_rocm")), env_for(root))
    assert "backend nixl_rocm" in out


def test_vllm_010_nixl_import_is_upstream_and_untouched_by_shim() -> None:
    """vLLM 0.10-0.13 imported `nixl._api` itself; the shim must neither shadow nor alter it."""
    run_ok(
        """
        from nixl._api import nixl_agent as NixlWrapper, nixl_agent_config
        import rixl, sys
        assert NixlWrapper is rixl._api.nixl_agent
        assert sys.modules["nixl._api"] is sys.modules["nixl_cu13._api"]
        """,
        env_for(),
    )


def test_vllm_027_nixl_rocm_import_and_030_alias(tmp_path: Path) -> None:
    """vLLM >= 0.27 imports nixl_rocm itself and (0.30+) aliases sys.modules["nixl"] to it; 0.33 checks the
    version of the distribution that provides nixl_rocm. The shim must agree on the objects, never provide
    or replace `nixl_rocm`, and leave that distribution's metadata readable."""
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip="6.4.43482", cuda=None))
    out = run_ok(
        """
        import importlib, importlib.metadata, sys
        nixl_rocm_api = importlib.import_module("nixl_rocm._api")
        sys.modules["nixl"] = sys.modules["nixl_rocm"]
        import rixl
        assert rixl._api is nixl_rocm_api
        assert sys.modules["nixl"] is sys.modules["nixl_rocm"], "the shim replaced vLLM's alias"
        assert importlib.import_module("rixl._bindings") is sys.modules["nixl_rocm._bindings"]
        dists = importlib.metadata.packages_distributions()["nixl_rocm"]
        print("dist", dists, importlib.metadata.version(dists[0]))
        assert "nixl-compat" not in dists
        """,
        env_for(root),
    )
    assert "dist ['nixl-rocm'] 1.5.1" in out


def test_rocm_host_shim_avoids_meta_package_trap(tmp_path: Path) -> None:
    """The real `nixl` meta package picks nixl_cu13 on a ROCm host; rixl picks nixl_rocm in the same env."""
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip="6.4.43482", cuda=None))
    out = run_ok(
        """
        import nixl, sys
        print("meta", sys.modules["nixl._api"].__name__)
        import rixl
        print("shim", rixl._api.__name__)
        assert rixl._api is not sys.modules["nixl._api"]
        """,
        env_for(root),
    )
    assert "meta nixl_cu13._api" in out
    assert "shim nixl_rocm._api" in out


def test_rixl_import_names_its_backend_once_for_the_evidence(tmp_path: Path) -> None:
    """The run evidence's nixl_rocm_init gate counts this line; NIXL_COMPAT_QUIET=1 silences it."""
    root = make_nixl_rocm(make_fake_torch(tmp_path, hip="6.4.43482", cuda=None))
    loud = run_py("import rixl, rixl._api", env_for(root))
    assert loud.returncode == 0, loud.stderr
    lines = [line for line in loud.stderr.splitlines() if line.startswith("nixl-compat: rixl using")]
    assert lines == [f"nixl-compat: rixl using nixl_rocm 1.5.1 ({root / 'nixl_rocm'})"]
    quiet = run_py("import rixl", env_for(root, NIXL_COMPAT_QUIET="1"))
    assert quiet.returncode == 0 and "nixl-compat:" not in quiet.stderr
