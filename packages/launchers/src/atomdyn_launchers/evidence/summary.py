"""Turn a run directory into ``evidence/<run-id>/``: summary.json, summary.md, excerpts and pictures.

Everything written passes through one :class:`~atomdyn_core.sanitize.Sanitizer` built from the run's own
identities (node names, Slurm account/partition/QoS, shared paths), so a node is the same ``host-N`` in every
file of the evidence. The directory is built beside its final place and renamed into it.
"""

from __future__ import annotations

import getpass
import json
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json, atomic_write_text
from atomdyn_core.fingerprint import collect_fingerprint
from atomdyn_core.sanitize import Sanitizer
from atomdyn_launchers.evidence import pictures
from atomdyn_launchers.evidence.gates import GateResult, evaluate, overall
from atomdyn_launchers.evidence.signals import Signals, collect_signals

SCHEMA_VERSION = 1
EXCERPT_MAX_LINES = 16
EXCERPT_MAX_CHARS = 400

_HOST_KEYS = ("PRIMARY_NODE", "PREFILL_NODE", "DECODE_NODE")
_PATH_KEYS = ("SHARED_DIR", "PROJECT_DIR", "PYTHON_VENV", "SLURM_CONF")
_ACCOUNT_KEYS = ("SLURM_ACCOUNT", "SLURM_PARTITION", "SLURM_QOS")


def sanitizer_for_run(run: dict[str, Any]) -> Sanitizer:
    """A sanitizer that knows the identities the run's own record names."""
    raw = run.get("config")
    config: dict[str, Any] = raw if isinstance(raw, dict) else {}
    hosts = [str(config[k]) for k in _HOST_KEYS if config.get(k)]
    for job in run.get("jobs") or []:
        if isinstance(job, dict):
            hosts += [str(job[k]) for k in ("node_requested", "node_ran") if job.get(k)]
    for pair in str(config.get("NODE_ADDRS") or "").split(","):
        if "=" in pair:
            hosts.append(pair.split("=", 1)[0].strip())
    paths = [str(config[k]) for k in _PATH_KEYS if config.get(k)]
    if config.get("MODEL_PATH"):
        paths.append(str(Path(str(config["MODEL_PATH"])).parent))  # keep the model's own name readable
    accounts = [str(config[k]) for k in _ACCOUNT_KEYS if config.get(k)]
    hosts += local_identities()[0]
    users = local_identities()[1]
    return Sanitizer(hosts=dict.fromkeys(hosts), users=users, paths=dict.fromkeys(paths), accounts=accounts)


def local_identities() -> tuple[list[str], list[str]]:
    """This machine's host name and user: they show up in logs collected here (a login node, say).
    Host names shorter than three characters are left to the patterns: as bare words they would hit too much."""
    name = socket.gethostname().split(".")[0]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    return ([name] if len(name) >= 3 else []), ([user] if user else [])


def _sanitize_obj(obj: Any, sanitizer: Sanitizer) -> Any:
    if isinstance(obj, str):
        return sanitizer.sanitize(obj)
    if isinstance(obj, dict):
        return {sanitizer.sanitize(str(k)): _sanitize_obj(v, sanitizer) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_sanitize_obj(v, sanitizer) for v in obj]
    return obj


def _fingerprints(run_dir: Path) -> tuple[dict[str, Any], str]:
    """Fingerprints the jobs saved (``fingerprints/<role>.json``), else this machine's, saying which."""
    found: dict[str, Any] = {}
    for path in sorted((run_dir / "fingerprints").glob("*.json")):
        try:
            found[path.stem] = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        except (OSError, json.JSONDecodeError) as exc:
            found[path.stem] = {"error": f"unreadable: {exc}"}
    if found:
        return found, "saved by the run's jobs"
    return {"collector": collect_fingerprint()}, "collected where evidence.collect ran (the run saved none)"


def _figures(signals: Signals) -> dict[str, Any]:
    v = signals.get
    figures: dict[str, Any] = {
        "requests_ok": v("requests.ok"),
        "requests_total": v("requests.total"),
        "completion_tokens": v("requests.completion_tokens"),
        "startup_to_first_good_response_s": v("timeline.startup_s"),
        "latency_p50_s": v("requests.latency_p50_s"),
        "pd_split_responses": v("requests.pd_split"),
        "repeat_kv_hit_rate_max": v("requests.repeat_hit_max"),
        "frontend_requests_success": v("frontend.requests_success"),
        "kv_transfers": v("kv.transfers"),
        "kv_bytes": v("kv.bytes"),
        "kv_failed_transfers": v("kv.failed_transfers"),
        "prefix_decode_hit_rate": v("prefix.decode_hit_rate"),
        "nixl_err_records": v("logs.nixl_err"),
        "host_vram_warnings": v("logs.host_vram"),
        "dmabuf_registrations_ok": v("dmabuf.ok"),
        "dmabuf_registrations_failed": v("dmabuf.fail"),
        "tracebacks_in_logs": v("logs.tracebacks"),
    }
    transfers, seconds, size = v("kv.transfers"), v("kv.seconds"), v("kv.bytes")
    if transfers and seconds is not None:
        figures["kv_mean_transfer_ms"] = round(seconds / transfers * 1000, 3)
    if transfers and size is not None:
        figures["kv_mean_transfer_mib"] = round(size / transfers / (1 << 20), 3)
    return {k: val for k, val in figures.items() if val is not None}


def _excerpt_text(lines: list[str], sanitizer: Sanitizer) -> str:
    kept = lines[:EXCERPT_MAX_LINES]
    body = [sanitizer.sanitize(line[:EXCERPT_MAX_CHARS]) for line in kept]
    if len(lines) > len(kept):
        body.append(f"... {len(lines) - len(kept)} more line(s) in the run directory")
    return "\n".join(body) + "\n"


def _markdown(summary: dict[str, Any]) -> str:
    rows = [
        ("platform", summary["platform"]),
        ("run kind", summary["kind"]),
        ("engine profile", summary["engine_profile"]),
        ("model profile", summary["model_profile"]),
        ("runtime", summary["runtime"]),
        ("lock digest", f"`{summary['lock_digest']}`"),
        (
            "verdict",
            f"**{summary['verdict'].upper()}** "
            f"({summary['gates_passed']} of {summary['gates_judged']} gates)",
        ),
    ]
    out = [f"# Evidence: {summary['run_id']}", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in rows]
    out += [
        "",
        "## Gates",
        "",
        "| gate | checks | value | expected | verdict | shown by |",
        "|---|---|---|---|---|---|",
    ]
    for gate in summary["gates"]:
        link = f"[excerpt]({gate['excerpt']})" if gate["excerpt"] else ""
        value = "no data" if gate["value"] is None else f"`{gate['value']}`"
        verdict = gate["verdict"].upper() + (f": {gate['reason']}" if gate["verdict"] == "fail" else "")
        out.append(f"| {gate['id']} | {gate['title']} | {value} | `{gate['expect']}` | {verdict} | {link} |")
    out += ["", "## Key figures", ""]
    out += [f"- {k.replace('_', ' ')}: `{v}`" for k, v in summary["figures"].items()]
    if summary["pictures"]:
        out += ["", "## Pictures", ""]
        out += [f"![{Path(p).stem.replace('_', ' ')}]({p})" for p in summary["pictures"]]
    if summary["problems"]:
        out += ["", "## Problems met while reading the run", ""]
        out += [f"- {p}" for p in summary["problems"]]
    out += ["", f"Fingerprint ({summary['fingerprint_source']}) and every value above: `summary.json`.", ""]
    return "\n".join(out)


def build_summary(signals: Signals, results: list[GateResult], sanitizer: Sanitizer) -> dict[str, Any]:
    v = signals.get
    judged = [r for r in results if r.verdict != "n/a"]
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": v("run.id"),
        "kind": v("run.kind"),
        "engine_profile": v("run.engine"),
        "model_profile": v("run.model_profile"),
        "runtime": v("run.runtime"),
        "platform": sanitizer.sanitize(str(v("run.platform") or "unknown (run.json missing)")),
        "lock_digest": v("run.lock_digest"),
        "launcher_result": v("run.result"),
        "failure": sanitizer.sanitize(str(v("run.failure"))) if v("run.failure") else None,
        "verdict": overall(results),
        "gates_passed": sum(1 for r in judged if r.verdict == "pass"),
        "gates_judged": len(judged),
        "gates": [
            {
                "id": r.id,
                "title": r.title,
                "signal": r.signal,
                "expect": r.expect,
                "value": _sanitize_obj(r.value, sanitizer),
                "verdict": r.verdict,
                "reason": sanitizer.sanitize(r.reason),
                "excerpt": f"excerpts/{r.excerpt}.txt" if r.excerpt else None,
            }
            for r in results
        ],
        "figures": _figures(signals),
        "problems": [sanitizer.sanitize(p) for p in signals.problems],
    }


def collect(run_dir: Path, evidence_root: Path, with_pictures: bool = True) -> tuple[Path, dict[str, Any]]:
    """Write ``evidence_root/<run-id>/`` for ``run_dir``; return its path and the summary."""
    run_dir = Path(run_dir)
    signals = collect_signals(run_dir)
    results = evaluate(signals)
    sanitizer = sanitizer_for_run(signals.run)
    evidence_root.mkdir(parents=True, exist_ok=True)
    run_id = str(signals.get("run.id") or run_dir.name)
    final = evidence_root / run_id
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=evidence_root))
    try:
        drawn = pictures.draw(signals, staging) if with_pictures else []
        summary = build_summary(signals, results, sanitizer)
        fingerprints, source = _fingerprints(run_dir)
        sanitizer.add_known(
            hosts=[str(fp.get("hostname")) for fp in fingerprints.values() if fp.get("hostname")]
        )
        summary["fingerprint_source"] = source
        summary["fingerprint"] = _sanitize_obj(fingerprints, sanitizer)
        groups = sorted({g["excerpt"] for g in summary["gates"] if g["excerpt"]})
        for rel in groups:
            atomic_write_text(staging / rel, _excerpt_text(signals.excerpts[Path(rel).stem], sanitizer))
        summary["excerpts"] = groups
        summary["pictures"] = drawn
        atomic_write_json(staging / "summary.json", summary)
        atomic_write_text(staging / "summary.md", _markdown(summary))
        staging.chmod(0o755)
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        staging.rename(final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final, summary
