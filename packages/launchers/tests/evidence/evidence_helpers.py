"""Run directories for the evidence tests (fixtures in conftest.py).

``mocker_run``: a copy of a real disaggregated run recorded from Dynamo 1.3's frontend and mocker engines
(fixtures/record_mocker_run.py). ``atom_run``: a disaggregated run directory with an ATOM run's layout whose
gate-deciding lines come from real runs committed in this repository: dmabuf-shim's lines from the H200 run
(evidence/h200-cuda-dmabuf), nixl-compat doctor's report from the H200 run (evidence/h200-nixl-kv-bench-device),
NIXL_ERR from the H200 bench log, UCX_PROTO_INFO tables from real NIXL transfers on the CPU machine
(fixtures/ucx-proto-info), vLLM's NIXL metrics and "KV Transfer metrics" summary from the real vLLM CPU P/D
rehearsal (fixtures/vllm-cpu-disagg). No MI355X here: the H200's doctor names nixl_cu13, so the atom engine's
own expectations fail it, and ``OBSERVED`` says what those real lines do prove.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from atomdyn_launchers.contract.expectations import GateExpectations

FIXTURES = Path(__file__).parent / "fixtures"
MOCKER_RUN = next((FIXTURES / "mocker-disagg").iterdir())
VLLM_CPU_RUN = next(p for p in (FIXTURES / "vllm-cpu-disagg").iterdir() if p.is_dir())
REPO = Path(__file__).resolve().parents[4]
H200_DOCTOR = REPO / "evidence" / "h200-nixl-kv-bench-device" / "h200-doctor.json"
H200_DMABUF = REPO / "evidence" / "h200-cuda-dmabuf" / "dmabuf-shim-gpu-check.txt"
H200_BENCH_LOG = REPO / "evidence" / "h200-nixl-kv-bench" / "run.log"
UCX_TCP = FIXTURES / "ucx-proto-info" / "tcp.log"
UCX_CMA = FIXTURES / "ucx-proto-info" / "default.log"
REGISTRATIONS = 720  # per worker, as the PoC's P/D run logged

# What the real lines of atom_run prove: the H200's backend (nixl_cu13), 720 dma-buf registrations a worker.
OBSERVED = GateExpectations(
    nixl_transfers=True,
    external_prefix_hits=True,
    dmabuf_registrations_per_worker=REGISTRATIONS,
    nixl_backend="nixl_cu13",
    doctor_required=True,
)


def real_lines(path: Path, needle: str) -> list[str]:
    """The lines of a committed real run's file that hold ``needle``."""
    return [line for line in path.read_text().splitlines() if needle in line]


def dmabuf_lines() -> list[str]:
    """The H200 helper's init line and REGISTRATIONS of its dma-buf registration lines."""
    init = real_lines(H200_DMABUF, "dmabuf-shim: init")[1]
    ok = real_lines(H200_DMABUF, "dmabuf-shim: reg ok")[1]
    return [init] + [ok] * REGISTRATIONS


ATOM_RUN_ID = "20261129T231500Z-disagg-atom"


# What the vllm-cpu engine declares: KV over NIXL, through UCX's TCP and never a same-host shortcut.
REHEARSAL = GateExpectations(
    nixl_transfers=True,
    external_prefix_hits=True,
    kv_transport="tcp",
    forbidden_kv_transports=("cma", "sysv", "posix", "xpmem", "knem"),
)


@pytest.fixture
def vllm_cpu_run(tmp_path: Path) -> Path:
    """A copy of the collected data of a real vLLM CPU P/D rehearsal (fixtures/vllm-cpu-disagg)."""
    target = tmp_path / "runs" / VLLM_CPU_RUN.name
    shutil.copytree(VLLM_CPU_RUN, target)
    return target


@pytest.fixture
def mocker_run(tmp_path: Path) -> Path:
    target = tmp_path / "runs" / MOCKER_RUN.name
    shutil.copytree(MOCKER_RUN, target)
    return target


def atom_logs(role: str) -> list[str]:
    """A worker's gate-deciding lines, each from a real run: NIXL's agent line (the UCX capture), the patch's
    HOST-classification line (the exact text patches/ writes), the H200 helper's dma-buf lines, and on decode
    vLLM's "KV Transfer metrics" summary from the real CPU rehearsal."""
    lines = [
        real_lines(UCX_TCP, "Initialized NIXL agent")[0],
        "W1129 23:15:10.412 1171 ucx_utils.cpp:584] NIXL_COMPAT_HOST_VRAM: VRAM classified as HOST by UCX; "
        "registering as host memory addr=0x7f3a20000000 len=2359296",
    ]
    lines += dmabuf_lines()
    if role == "decode":
        lines += real_lines(VLLM_CPU_RUN / "logs" / "decode.decode.log", "KV Transfer metrics:")
    return lines


def atom_metrics(role: str) -> str:
    """The real CPU rehearsal's vLLM metrics of the same role (prefill, decode)."""
    return (VLLM_CPU_RUN / "metrics" / f"{role}.{role}.prom").read_text()


def frontend_metrics() -> str:
    return (VLLM_CPU_RUN / "metrics" / "decode.frontend.prom").read_text()


def request(index: int, group: str, **over: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "index": index,
        "prompt_group": group,
        "status": 200,
        "ok": True,
        "latency_s": 0.41 + index / 100,
        "content_chars": 180,
        "completion_tokens": 32,
        "prompt_tokens": 371,
        "prefill_worker_id": 7587888281234,
        "decode_worker_id": 7587888282999,
        "worker_id": None,
        "kv_hit_rate": None,
        "error": None,
    }
    record.update(over)
    return record


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


@pytest.fixture
def atom_run(tmp_path: Path) -> Path:
    run = tmp_path / "runs" / ATOM_RUN_ID
    for sub in ("logs", "metrics", "scripts"):
        (run / sub).mkdir(parents=True)
    jobs = [
        {"role": role, "job_id": 48213 + i, "node_requested": node, "node_ran": node, "state": "COMPLETED",
         "exit_code": "0:0", "derived_exit_code": "0:0"}
        for i, (role, node) in enumerate((("prefill", "gpu-mi355x-017"), ("decode", "gpu-mi355x-018")))
    ]  # fmt: skip
    run_json = {
        "schema_version": 1,
        "run_id": ATOM_RUN_ID,
        "kind": "disagg",
        "engine_profile": "atom",
        "model_profile": "qwen3-8b",
        "runtime": "docker",
        "platform": "MI355X",
        "lock_digest": "sha256:" + "ab" * 32,
        "lock_digest_source": "image label io.atomdyn.lock.digest",
        "config": {
            "SLURM_ACCOUNT": "acme-ml-prj",
            "SLURM_PARTITION": "mi355x-prod",
            "SLURM_QOS": "normal",
            "PREFILL_NODE": "gpu-mi355x-017",
            "DECODE_NODE": "gpu-mi355x-018",
            "SHARED_DIR": "/lustre/orgs/acme-ml/dynamo",
            "MODEL_PATH": "/lustre/orgs/acme-ml/models/Qwen3-8B",
        },
        "jobs": jobs,
        "placement_verified": True,
        "result": "pass",
        "failure": None,
        "requests_total": 8,
        "requests_ok": 8,
    }
    (run / "run.json").write_text(json.dumps(run_json, indent=2))
    t0 = 1795994100.0
    events = [
        (0.0, "submitted", "prefill"), (0.1, "submitted", "decode"), (2.0, "running", "prefill"),
        (2.2, "running", "decode"), (61.0, "registered", "prefill"), (64.5, "registered", "decode"),
        (65.0, "healthy", None), (66.2, "first_good_response", None), (90.0, "requests_done", None),
        (93.0, "done", None),
    ]  # fmt: skip
    write_jsonl(
        run / "timeline.jsonl",
        [{"t": t0 + dt, "event": e, **({"role": r} if r else {}), **({"detail": "8/8 ok"} if e == "requests_done" else {})}
         for dt, e, r in events],
    )  # fmt: skip
    (run / "doctor").mkdir()
    for role in ("prefill", "decode"):
        shutil.copy(H200_DOCTOR, run / "doctor" / f"{role}.json")
    write_jsonl(run / "requests.jsonl", [request(i, "long" if i % 2 else f"short-{i}") for i in range(8)])
    for role in ("prefill", "decode"):
        (run / "logs" / f"{role}.worker.log").write_text("\n".join(atom_logs(role)) + "\n")
        (run / "logs" / f"{role}.slurm.out").write_text(
            f"starting {role} on gpu-mi355x-01{7 + (role == 'decode')}\n"
        )
        (run / "metrics" / f"{role}.worker.prom").write_text(atom_metrics(role))
    (run / "metrics" / "decode.frontend.prom").write_text(frontend_metrics())
    (run / "logs" / "decode.frontend.log").write_text(
        "2026-11-29T23:16:01.120931Z  INFO http-request: dynamo_llm::http::service::service_v2: http response "
        "sent status=200 latency_ms=412 method=POST uri=/v1/chat/completions\n"
    )
    return run


MakeRun = Callable[..., Path]
