"""The serving benchmark: an aiperf concurrency sweep against a run's frontend, after its smoke traffic.

aiperf (pinned, every file hash-checked) lives in its own environment, ``.venv-aiperf``, installed from
``requirements/aiperf.txt`` with ``--require-hashes --no-deps`` on first use: it brings ~230 MB the launchers
do not need. Each concurrency level is one ``aiperf profile`` (streaming, synthetic prompts, ``ignore_eos``);
its JSON export stays in the run directory (``benchmark/c<N>/``). The sweep is judged, never just reported:
a level whose generated tokens are 0, or with failed requests, makes the benchmark FAILED; so does a run whose
own checks failed. ``benchmark.json`` holds the figures and the verdict; :func:`write_report` makes the table
and the Pareto plot (output tokens/s per worker against tokens/s per user) for evidence.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.config.recipes import Benchmark
from atomdyn_launchers.progress import Progress

AIPERF_VENV = ".venv-aiperf"
REQUIREMENTS = "requirements/aiperf.txt"
EXPORT = "profile_export_aiperf.json"
_PERCENTILES = ("p50", "p90", "p99")
_LATENCIES = {
    "ttft_ms": "time_to_first_token",
    "itl_ms": "inter_token_latency",
    "latency_ms": "request_latency",
}


class BenchmarkError(RuntimeError):
    """aiperf could not be installed or run, or its export is unusable; the message says which."""


def ensure_aiperf(project_dir: Path, python: str = sys.executable) -> Path:
    """The aiperf executable in <project>/.venv-aiperf, installed from the hash-pinned requirements first
    if missing or installed from other requirements (a stamp records their sha256)."""
    venv = project_dir / AIPERF_VENV
    requirements = project_dir / REQUIREMENTS
    try:
        wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    except OSError as exc:
        raise BenchmarkError(f"{requirements}: {exc}") from None
    stamp = venv / ".atomdyn-installed"
    aiperf = venv / "bin" / "aiperf"
    if aiperf.exists() and stamp.exists() and stamp.read_text(encoding="utf-8").strip() == wanted:
        return aiperf
    steps = [
        [python, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--require-hashes", "--no-deps", "-r", str(requirements)],
    ]  # fmt: skip
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise BenchmarkError(
                f"installing aiperf: {' '.join(argv[:4])} ...: {done.stderr.strip()[-2000:]}"
            )
    atomic_write_text(stamp, wanted + "\n")
    return aiperf


def aiperf_argv(
    aiperf: Path, bench: Benchmark, url: str, model: str, tokenizer: str, concurrency: int, artifacts: Path
) -> list[str]:
    argv = [str(aiperf), "profile", "--model", model, "--url", url, "--endpoint-type", "chat"]
    argv += ["--concurrency", str(concurrency), "--request-count", str(bench.requests_per_level)]
    argv += ["--isl", str(bench.input_tokens), "--isl-stddev", "0"]
    argv += ["--osl", str(bench.output_tokens), "--output-tokens-stddev", "0"]
    argv += ["--extra-inputs", "ignore_eos:true", "--tokenizer", tokenizer, "--artifact-dir", str(artifacts)]
    argv += ["--ui-type", "none", "--random-seed", "1"]
    if bench.streaming:
        argv.append("--streaming")
    goodput = bench.slo.aiperf_goodput()
    if goodput:
        argv += ["--goodput", goodput]
    return argv


@dataclass
class Level:
    """One concurrency level's figures (milliseconds, tokens/s), from aiperf's export."""

    concurrency: int
    requests: int
    errors: int
    output_tokens: float
    output_tps: float
    tps_per_user: float  # end to end: each request's output tokens over its latency, averaged
    goodput_rps: float | None
    request_rps: float
    latency: dict[str, dict[str, float]] = field(default_factory=dict)  # ttft_ms/itl_ms/latency_ms -> pNN
    tps_per_user_decode: float = 0.0  # aiperf's per-user figure over the decode phase (1 / ITL)


def _metric(export: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    found = export.get(name)
    if isinstance(found, Mapping):
        return found
    for record in export.get("records", []) or []:  # some releases list metrics as records with a tag
        if isinstance(record, Mapping) and record.get("tag") == name:
            return record
    return {}


def _value(export: Mapping[str, Any], name: str, stat: str = "avg") -> float | None:
    value = _metric(export, name).get(stat)
    return float(value) if isinstance(value, (int, float)) else None


def parse_export(path: Path, concurrency: int) -> Level:
    try:
        export = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BenchmarkError(f"aiperf export {path}: {exc}") from None
    requests = _value(export, "request_count") or 0.0
    errors = export.get("error_summary") or []  # one entry per kind of error, each with its count
    failed = sum(int(e.get("count", 1)) for e in errors if isinstance(e, Mapping))
    if export.get("was_cancelled") or export.get("is_complete") is False:
        failed = max(failed, 1)  # an interrupted level is not a measurement
    level = Level(
        concurrency=concurrency,
        requests=int(requests),
        errors=failed,
        output_tokens=_value(export, "total_output_tokens") or 0.0,
        output_tps=_value(export, "output_token_throughput") or 0.0,
        tps_per_user=_value(export, "e2e_output_token_throughput") or 0.0,
        tps_per_user_decode=_value(export, "output_token_throughput_per_user") or 0.0,
        goodput_rps=_value(export, "goodput"),
        request_rps=_value(export, "request_throughput") or 0.0,
    )
    for short, name in _LATENCIES.items():
        level.latency[short] = {p: _value(export, name, p) or 0.0 for p in _PERCENTILES}
    return level


@dataclass
class SweepResult:
    levels: list[Level]
    verdict: str  # "PASS" or "FAILED: why"
    workers: int  # decode + prefill workers (the mock engine has no GPU: throughput is per worker)
    gpus: int

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "workers": self.workers,
            "gpus": self.gpus,
            "levels": [asdict(lv) for lv in self.levels],
        }


def judge(levels: list[Level], run_failure: str | None) -> str:
    """FAILED when the run's own checks failed (KV gates, smoke), a level generated no tokens or had errors."""
    if run_failure:
        return f"FAILED: the run failed ({run_failure}); its figures are not a result"
    if not levels:
        return "FAILED: no level was measured"
    for lv in levels:
        if lv.output_tokens <= 0 or lv.output_tps <= 0:
            return f"FAILED: concurrency {lv.concurrency} generated 0 tokens"
        if lv.errors or lv.requests == 0:
            return f"FAILED: concurrency {lv.concurrency}: {lv.errors} failed of {lv.requests + lv.errors} requests"
    return "PASS"


def run_sweep(
    bench: Benchmark,
    *,
    base_url: str,
    model: str,
    tokenizer: str,
    out_dir: Path,
    project_dir: Path,
    workers: int,
    gpus: int,
    progress: Progress,
) -> SweepResult:
    aiperf = ensure_aiperf(project_dir)
    # The frontend is a cluster address: never through a proxy the launcher's environment may name.
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    # The tokenizer is the model directory's. aiperf 0.13.0's offline mode (HF_HUB_OFFLINE) cannot load a local
    # directory (it looks the path up as a hub snapshot), so offline mode stays off and the hub endpoint points
    # at a closed loopback port: a lookup aiperf might still attempt fails at once and goes nowhere.
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    env.update({"HF_ENDPOINT": "http://127.0.0.1:9", "NO_PROXY": "*", "no_proxy": "*"})
    levels: list[Level] = []
    for i, concurrency in enumerate(bench.concurrency):
        artifacts = out_dir / f"c{concurrency}"
        argv = aiperf_argv(aiperf, bench, base_url, model, tokenizer, concurrency, artifacts)
        progress.line(f"benchmark {i + 1}/{len(bench.concurrency)}: concurrency {concurrency}")
        with progress.heartbeat(f"aiperf at concurrency {concurrency}", interval_s=15.0):
            done = subprocess.run(argv, capture_output=True, text=True, env=env)
        artifacts.mkdir(parents=True, exist_ok=True)
        atomic_write_text(artifacts / "aiperf.log", done.stdout + done.stderr)
        if done.returncode != 0:
            raise BenchmarkError(
                f"aiperf at concurrency {concurrency} exited {done.returncode} (see {artifacts}/aiperf.log)"
            )
        exports = sorted(artifacts.rglob(EXPORT))
        if not exports:
            raise BenchmarkError(f"aiperf at concurrency {concurrency} wrote no {EXPORT} under {artifacts}")
        level = parse_export(exports[0], concurrency)
        levels.append(level)
        ttft = level.latency["ttft_ms"]["p50"]
        progress.line(
            f"benchmark c={concurrency}: {level.output_tps:.0f} tok/s, {level.tps_per_user:.1f} tok/s/user, "
            f"TTFT p50 {ttft:.1f} ms, {level.requests} ok, {level.errors} failed"
        )
    return SweepResult(levels, judge(levels, None), workers, gpus)


# -- evidence: the table and the Pareto plot ------------------------------------------------------------------


def table_markdown(result: SweepResult) -> str:
    per = "GPU" if result.gpus else "worker"
    divisor = result.gpus or result.workers
    head = (
        f"| concurrency | requests ok / failed | output tok/s | tok/s per {per} | tok/s per user | goodput req/s "
        "| TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms | latency p50 / p90 / p99 ms |"
    )
    lines = [head, "|" + "---|" * 9]
    for lv in result.levels:

        def pct(short: str, level: Level = lv) -> str:
            return " / ".join(f"{level.latency[short][p]:.1f}" for p in _PERCENTILES)

        goodput = "-" if lv.goodput_rps is None else f"{lv.goodput_rps:.2f}"
        lines.append(
            f"| {lv.concurrency} | {lv.requests} / {lv.errors} | {lv.output_tps:.1f} | "
            f"{lv.output_tps / max(divisor, 1):.1f} | {lv.tps_per_user:.1f} | {goodput} | {pct('ttft_ms')} | "
            f"{pct('itl_ms')} | {pct('latency_ms')} |"
        )
    return "\n".join([f"Verdict: **{result.verdict}**", "", *lines]) + "\n"


def pareto_plot(result: SweepResult, path: Path, title: str) -> bool:
    """Throughput per GPU (per worker for the mock engine) against tokens/s per user; False without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    divisor = max(result.gpus or result.workers, 1)
    xs = [lv.tps_per_user for lv in result.levels]
    ys = [lv.output_tps / divisor for lv in result.levels]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    ax.plot(xs, ys, marker="o")
    for lv, x, y in zip(result.levels, xs, ys, strict=True):
        ax.annotate(f"c={lv.concurrency}", (x, y), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel("output tokens/s per user (end to end: tokens / request latency)")
    ax.set_ylabel(f"output tokens/s per {'GPU' if result.gpus else 'worker'}")
    ax.set_title(title if result.passed else f"{title} [{result.verdict}]", fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return True


def mark_failed(run_dir: Path, failure: str) -> None:
    """A run that failed after its sweep (its jobs, its KV checks): the sweep's verdict says FAILED too."""
    path = run_dir / "benchmark" / "benchmark.json"
    if not path.exists():
        return
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["verdict"] = judge([], failure)
    atomic_write_text(path, json.dumps(raw, indent=2) + "\n")


def read_result(run_dir: Path) -> SweepResult:
    raw = json.loads((run_dir / "benchmark" / "benchmark.json").read_text(encoding="utf-8"))
    levels = [Level(**lv) for lv in raw["levels"]]
    return SweepResult(levels, raw["verdict"], raw["workers"], raw["gpus"])


def gates_failure(evidence_dir: Path) -> str | None:
    """The collected evidence's failed gates (the KV checks among them), or None when every gate passed."""
    try:
        summary = json.loads((evidence_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"no readable evidence summary in {evidence_dir}: {exc}"
    failed = summary.get("gates_failed")
    if failed:
        names = [str(g.get("id", "?")) for g in summary.get("gates", []) if g.get("verdict") == "fail"]
        return f"{failed} evidence gate(s) failed: {', '.join(names) or 'see summary.md'}"
    return None


def write_report(run_dir: Path, out_dir: Path, label: str, evidence_dir: Path | None = None) -> list[Path]:
    """benchmark.md and pareto.png in ``out_dir`` from a run's benchmark/benchmark.json; with the run's
    collected evidence, a failed gate makes the benchmark FAILED."""
    result = read_result(run_dir)
    failure = gates_failure(evidence_dir) if evidence_dir is not None else None
    if failure is not None:
        result.verdict = judge([], failure)
    out_dir.mkdir(parents=True, exist_ok=True)
    table = out_dir / "benchmark.md"
    atomic_write_text(table, f"# Serving benchmark: {label}\n\n" + table_markdown(result))
    written = [table]
    if pareto_plot(result, out_dir / "pareto.png", label):
        written.append(out_dir / "pareto.png")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atomdyn_launchers.run.benchmark", description=__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--label", required=True, help="platform label for the table and plot titles")
    parser.add_argument("--evidence", type=Path, help="the run's collected evidence: a failed gate fails it")
    args = parser.parse_args(argv)
    for path in write_report(args.run_dir, args.out_dir, args.label, args.evidence):
        print(path)
    failure = gates_failure(args.evidence) if args.evidence is not None else None
    return 0 if read_result(args.run_dir).passed and failure is None else 1


if __name__ == "__main__":
    sys.exit(main())
