"""Realistic raw logs of a disaggregated run, generated: the input of the sanitizer's benchmark and of the test
that compares its fast path with the line-by-line one.

The line formats are those the run's jobs write (Dynamo's frontend and router with and without terminal
colours, vLLM's engine and API server, NIXL, UCX and NCCL with their host prefixes, etcd's JSON, Slurm, Python
tracebacks); most lines hold nothing to hide, a few hold the cluster's hosts, users, paths, addresses and secrets,
in proportions like those of a real run. Deterministic: the same seed gives the same text.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["KNOWN", "generate_lines", "generate_text"]

# The identities the run's config and node list would give the sanitizer.
KNOWN: dict[str, list[str]] = {
    "hosts": ["gpu-mi355x-017", "gpu-mi355x-018", "login-02.cluster.acme.internal"],
    "users": ["jdoe"],
    "paths": ["/lustre/orgs/acme-ml"],
    "accounts": ["acme-ml-prj"],
}

_ESC = "\x1b"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class _State:
    rng: random.Random
    seconds: float = 45_000.0

    def ts(self) -> str:
        self.seconds += self.rng.random() * 0.01
        h, rest = divmod(self.seconds, 3600)
        m, s = divmod(rest, 60)
        return f"2026-11-30T{int(h):02d}:{int(m):02d}:{s:09.6f}Z"

    def hms(self) -> str:
        return self.ts()[11:19]

    def n(self, top: int = 999) -> int:
        return self.rng.randint(0, top)

    def f(self) -> str:
        return f"{self.rng.random() * 100:.1f}"

    def uuid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def host(self) -> str:
        return self.rng.choice(("gpu-mi355x-017", "gpu-mi355x-018"))

    def ip(self) -> str:
        return f"10.42.{self.n(7)}.{self.n(250) + 1}"

    def ip6(self) -> str:
        return f"fe80::{self.rng.getrandbits(16):x}:{self.rng.getrandbits(16):x}ff:fe{self.rng.getrandbits(8):02x}:{self.rng.getrandbits(16):x}"


def _colour(key: str, value: str) -> str:
    return f"{_ESC}[3m{key}{_ESC}[0m{_ESC}[2m={_ESC}[0m{value}"


def _frontend(s: _State) -> str:
    return (
        f"{_ESC}[2m{s.ts()}{_ESC}[0m {_ESC}[32m INFO{_ESC}[0m {_ESC}[1mhttp-request{_ESC}[0m: "
        f"{_ESC}[2mdynamo_llm::http::service::service_v2{_ESC}[0m{_ESC}[2m:{_ESC}[0m http response sent "
        f"{_colour('status', '200')} {_colour('latency_ms', str(s.n(90)))} {_colour('method', 'POST')} "
        f"{_colour('uri', '/v1/chat/completions')} {_colour('version', 'HTTP/1.1')} {_colour('request_id', s.uuid())}"
    )


def _router(s: _State) -> str:
    return (
        f'{s.ts()}  INFO dynamo_kv_router::scheduling::selector: Selected worker router_mode="kv" '
        f"worker_id={s.rng.getrandbits(63)} worker_type=prefill dp_rank=0 logit={s.rng.random():.6f} "
        f"effective_cached_blocks={s.n()}.0 host_pinned_blocks=0 disk_blocks=0 total_blocks={s.n(16384)}"
    )


def _engine_stats(s: _State) -> str:
    return (
        f"(EngineCore_DP0 pid={s.n(9999)}) INFO 11-30 {s.hms()} [loggers.py:123] Engine 000: Avg prompt "
        f"throughput: {s.f()} tokens/s, Avg generation throughput: {s.f()} tokens/s, Running: {s.n(32)} reqs, "
        f"Waiting: 0 reqs, GPU KV cache usage: {s.f()}%, Prefix cache hit rate: {s.f()}%"
    )


def _api_access(s: _State) -> str:
    return f'(APIServer pid={s.n(9999)}) INFO:     127.0.0.1:{s.n(60000)} - "POST /v1/chat/completions HTTP/1.1" 200 OK'


def _nixl_metrics(s: _State) -> str:
    return (
        f"(EngineCore_DP0 pid={s.n(9999)}) INFO 11-30 {s.hms()} [metrics.py:103] KVConnectorType: NIXL, KV Transfer "
        f"metrics: Num successful transfers={s.n(64)}, Avg xfer time (ms)={s.rng.random() * 3:.3f}, "
        f"Avg MB per transfer={s.rng.random() * 4:.2f}"
    )


def _nixl_glog(s: _State) -> str:
    return (
        f"I1130 {s.hms()}.{s.n(999999):06d} {s.n(9999):>8} nixl_ucx_backend.cpp:{s.n(2000)}] postXfer: handle "
        f"0x7f3a2c{s.rng.getrandbits(24):06x} completed {s.n(1152)} descriptors"
    )


def _ucx(s: _State) -> str:
    return (
        f"[{1_796_000_000 + s.seconds:.6f}] [{s.host()}:{s.n(9999)}:{s.n(9)}]     ucp_worker.c:1888 UCX  INFO  "
        f"ep_cfg[{s.n(8)}]: tag(rc_mlx5/mlx5_0:1 tcp/ib0); rma(rc_mlx5/mlx5_0:1); am(rc_mlx5/mlx5_0:1 cuda_ipc/cuda);"
    )


def _nccl(s: _State) -> str:
    return f"{s.host()}:{s.n(9999)}:{s.n(9999)} [0] NCCL INFO Channel {s.n(31):02d}/0 : 0[0] -> 1[1] via P2P/IPC/read"


def _etcd(s: _State) -> str:
    return (
        f'{{"level":"info","ts":"{s.ts()}","caller":"v3rpc/watch.go:{s.n(600)}","msg":"lease keepalive",'
        f'"lease-id":"{s.rng.getrandbits(64):016x}","remote-addr":"{s.ip()}:{s.n(60000)}"}}'
    )


def _side_channel(s: _State) -> str:
    return (
        f"(EngineCore_DP0 pid={s.n(9999)}) INFO 11-30 {s.hms()} [nixl_connector.py:802] side channel "
        f"VLLM_NIXL_SIDE_CHANNEL_HOST={s.ip()} port 20097 on {s.host()}.cluster.acme.internal"
    )


def _ucx_ipv6(s: _State) -> str:
    return f"[{1_796_000_000 + s.seconds:.6f}] UCX  DEBUG connected to [{s.ip6()}%ib0]:{s.n(60000)} from {s.ip6()}"


def _traceback(s: _State) -> str:
    return (
        f'  File "/lustre/orgs/acme-ml/venvs/dynamo/lib/python3.12/site-packages/vllm/v1/engine/core.py", '
        f"line {s.n(900)}, in run_engine_core"
    )


def _weights(s: _State) -> str:
    return f"Loading weights from /home/jdoe/models/Qwen3-8B/model-{s.n(4) + 1:05d}-of-00005.safetensors"


def _slurm(s: _State) -> str:
    return (
        f"slurmstepd: error: *** STEP {48000 + s.n()}.0 ON {s.host()} CANCELLED AT 2026-11-30T{s.hms()} ***"
    )


def _srun(s: _State) -> str:
    return (
        f"srun: Job {48000 + s.n()} step creation temporarily disabled, retrying (Requested nodes are busy)"
    )


def _secret(s: _State) -> str:
    token = "".join(
        s.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") for _ in range(34)
    )
    return f"export HF_TOKEN=hf_{token} ETCD_ENDPOINTS=http://etcdadmin:S3cr3t@{s.ip()}:2379"


def _rust_debug(s: _State) -> str:
    return (
        f"{s.ts()} DEBUG dynamo_runtime::pipeline::network::tcp::server: sent {s.n(4096)} bytes on stream "
        f"{s.n(64)} (std::io::Result<usize> ok, 16:9 split, nixl 1.3.0.post1)"
    )


# (weight, template): most lines hold nothing to hide, as in a real run.
_TEMPLATES: tuple[tuple[float, Callable[[_State], str]], ...] = (
    (30, _frontend),
    (15, _router),
    (10, _engine_stats),
    (12, _api_access),
    (5, _nixl_metrics),
    (4, _nixl_glog),
    (4, _ucx),
    (2, _nccl),
    (1.5, _etcd),
    (8, _rust_debug),
    (0.5, _side_channel),
    (0.3, _ucx_ipv6),
    (0.5, _traceback),
    (0.3, _weights),
    (0.1, _slurm),
    (0.3, _srun),
    (0.02, _secret),
)


def generate_lines(seed: int = 0, colour: bool = True) -> Iterator[str]:
    """An endless stream of log lines (without their newline); ``colour``: Dynamo's terminal colour codes."""
    state = _State(random.Random(seed))
    weights = [w for w, _ in _TEMPLATES]
    templates = [t for _, t in _TEMPLATES]
    while True:
        for template in state.rng.choices(templates, weights, k=1024):
            line = template(state)
            yield line if colour or _ESC not in line else _ANSI.sub("", line)


def generate_text(size: int, seed: int = 0, colour: bool = True) -> str:
    """About ``size`` characters of log (whole lines)."""
    parts: list[str] = []
    held = 0
    for line in generate_lines(seed, colour):
        parts.append(line)
        held += len(line) + 1
        if held >= size:
            break
    return "\n".join(parts) + "\n"
