"""Turn a run directory into ``evidence/<run-id>/``: data/, summary.json, summary.md, excerpts and pictures.

Everything written passes through one :class:`~atomdyn_core.sanitize.Sanitizer` built from the run's own
identities (node names, Slurm account/partition/QoS, shared paths), so a node is the same ``host-N`` in every
file of the evidence. The summary is judged from the collected data (``data/``, evidence/data.py), exactly as
``evidence.verify`` judges it again later, and it carries the sha256 of every other file of the evidence, so
an edit, a truncation or a replaced byte anywhere fails verification naming the file. The directory is built
beside its final place and renamed into it.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from atomdyn_core.fingerprint import collect_fingerprint
from atomdyn_core.sanitize import Sanitizer
from atomdyn_launchers.evidence import mdtext, pictures, secondscan, signature
from atomdyn_launchers.evidence.data import (
    COLLECTOR_FINGERPRINT,
    DATA,
    CollectError,
    check_run_dir,
    json_bytes,
    reduce_run,
)
from atomdyn_launchers.evidence.diagnosis import judged_diagnosis
from atomdyn_launchers.evidence.diagnosis import markdown_lines as diagnosis_lines
from atomdyn_launchers.evidence.expectations import platform_label
from atomdyn_launchers.evidence.gates import GateResult, evaluate, failed_count, overall
from atomdyn_launchers.evidence.jsonfile import read_json
from atomdyn_launchers.evidence.signals import SAFE_RUN_ID as SAFE_RUN_ID
from atomdyn_launchers.evidence.signals import Signals, collect_signals

SCHEMA_VERSION = 2  # of summary.json; 1 had no data/ and no file digests, so its gates cannot be recomputed
EVIDENCE = "evidence"  # the evidence root beside a user's runs/ (SHARED_DIR/evidence), and the project's
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
    # The run's own id and lock digest: values the high-entropy rule must keep, named rather than by their shape.
    safe = [str(run[k]) for k in ("run_id", "lock_digest") if isinstance(run.get(k), str)]
    return Sanitizer(
        hosts=dict.fromkeys(hosts), users=users, paths=dict.fromkeys(paths), accounts=accounts, safe=safe
    )


def local_identities() -> tuple[list[str], list[str]]:
    """This machine's host name and user: they show up in logs collected here (a login node, say).
    Host names shorter than three characters are left to the patterns: as bare words they would hit too much."""
    name = socket.gethostname().split(".")[0]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    return ([name] if len(name) >= 3 else []), ([user] if user else [])


JOBS_FINGERPRINTS = "saved by the run's jobs"  # fingerprint_source when each role saved its own


def _fingerprints(data: Path) -> tuple[dict[str, Any], str]:
    """The fingerprints the jobs saved (``fingerprints/<role>.json``), else the collector's, saying which."""
    found: dict[str, Any] = {}
    for path in sorted((data / "fingerprints").glob("*.json")):
        try:
            found[path.stem] = read_json(path)
        except (OSError, ValueError) as exc:
            found[path.stem] = {"error": f"unreadable: {exc}"}
    if found:
        return found, JOBS_FINGERPRINTS
    try:
        collector = read_json(data / COLLECTOR_FINGERPRINT)
    except (OSError, ValueError):
        return {}, "none (the run saved none and the collector's is missing)"
    return {"collector": collector}, "collected where evidence.collect ran (the run saved none)"


def _platform(signals: Signals, fingerprints: dict[str, Any], source: str) -> tuple[str, str]:
    """The platform label and where it came from: what the jobs' fingerprints show, as the engine object reads
    them, where the workers' logs agree (the vLLM platform each logged, the model it loaded), or without
    fingerprints what the engine alone can say (a mock or CPU engine never ran on a GPU; any
    other is unknown). Never run.json's word: it is checked against this (:func:`platform_contradiction`)."""
    jobs = fingerprints if source.startswith("saved") else {}
    config = signals.run.get("config") if isinstance(signals.run, dict) else None
    label = platform_label(
        signals.get("run.engine"),
        jobs,
        signals.get("workers.engine_probes"),  # what each worker logged of vLLM's platform and its model
        signals.get("run.model_profile"),
        config.get("MODEL_PATH") if isinstance(config, dict) else None,
    )
    if label is None:
        return f"unknown (engine {signals.get('run.engine')!r} is not known)", "nothing (an unknown engine)"
    return label, "the jobs' fingerprints" if jobs else "the engine (the run saved no fingerprint)"


def run_platform(directory: Path, signals: Signals) -> tuple[str, str]:
    """The platform label of a run directory (or collected data) and where it came from."""
    return _platform(signals, *_fingerprints(directory))


def platform_contradiction(
    signals: Signals, platform: str, source: str, where: str = "run.json"
) -> str | None:
    """Why run.json's platform contradicts the one the run's jobs and engine show, or None when it agrees,
    names none (the provenance gate fails that) or the engine is unknown (``engine_known`` fails that)."""
    claimed = signals.get("run.platform")
    if source.startswith("nothing") or not isinstance(claimed, str) or not claimed.strip():
        return None
    if claimed == platform:
        return None
    return (f"{where}: platform {claimed!r} contradicts the engine: {signals.get('run.engine')} reads "
            f"{platform!r} from what the run's jobs measured")  # fmt: skip


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
        "kv_failed_transfers_warming_up": v("kv.failed_transfers_warmup"),
        "kv_answer_differing_tokens": v("kv.answer_differing_tokens"),
        "kv_transport_rows": v("kv.transport_rows"),
        "prefix_decode_hit_rate": v("prefix.decode_hit_rate"),
        "nixl_err_records": v("logs.nixl_err"),
        "host_vram_warnings": v("logs.host_vram"),
        "host_vram_warnings_by_role": v("logs.host_vram_by_role") if v("logs.host_vram") else None,
        "dmabuf_registrations_ok": v("dmabuf.ok"),
        "dmabuf_registrations_ok_by_role": v("dmabuf.ok_by_role") if v("dmabuf.seen") else None,
        "dmabuf_registrations_failed": v("dmabuf.fail") if v("dmabuf.seen") else None,
        "nixl_backends": v("doctor.backends") or None,
        "tracebacks_in_logs": v("logs.tracebacks"),
    }
    if not v("dmabuf.seen"):
        figures["dmabuf_registrations_ok"] = None
    transfers, seconds, size = v("kv.transfers"), v("kv.seconds"), v("kv.bytes")
    if transfers and seconds is not None:
        figures["kv_mean_transfer_ms"] = round(seconds / transfers * 1000, 3)
    if transfers and size is not None:
        figures["kv_mean_transfer_mib"] = round(size / transfers / (1 << 20), 3)
    return {k: val for k, val in figures.items() if val is not None}


def excerpts(summary: dict[str, Any], signals: Signals) -> dict[str, str]:
    """The excerpt files the gates link to, from the collected data's own lines (their line numbers are those
    of the files under data/), so ``evidence.verify`` can draw them again and compare."""
    out = {}
    for rel in sorted({g["excerpt"] for g in summary["gates"] if g["excerpt"]}):
        lines = signals.excerpts.get(Path(rel).stem, [])
        body = [line[:EXCERPT_MAX_CHARS] for line in lines[:EXCERPT_MAX_LINES]]
        if len(lines) > EXCERPT_MAX_LINES:
            body.append(f"... {len(lines) - EXCERPT_MAX_LINES} more line(s) under {DATA}/")
        out[rel] = "\n".join(body) + "\n"
    return out


def markdown(summary: dict[str, Any]) -> str:
    """summary.md: the summary for people, generated from summary.json alone."""
    t, c = mdtext.text, mdtext.code
    rows = [
        ("platform", f"{t(summary['platform'])} (from {t(summary['platform_source'])})"),
        ("run kind", t(summary["kind"])),
        ("engine profile", t(summary["engine_profile"])),
        ("model profile", t(summary["model_profile"])),
        ("runtime", t(summary["runtime"])),
        (
            "lock digest",
            c(summary["lock_digest"])
            + (
                f" (from the {t(summary['lock_digest_source'])})" if summary.get("lock_digest_source") else ""
            ),
        ),
        ("verdict", f"**{t(summary['verdict'].upper())}** ({verdict_words(summary)})"),
    ]
    out = [f"# Evidence: {t(summary['run_id'])}", "", "| | |", "|---|---|"]
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
        value = "no data" if gate["value"] is None else c(gate["value"])
        verdict = t(gate["verdict"].upper()) + (f": {t(gate['reason'])}" if gate["verdict"] == "fail" else "")
        out.append(f"| {gate['id']} | {gate['title']} | {value} | {c(gate['expect'])} | {verdict} | {link} |")
    out += diagnosis_lines(summary.get("diagnosis"))  # why a failed run failed (none for a passed run)
    out += ["", "## Key figures", ""]
    out += [
        f"- {t(k.replace('_', ' '))}: {c(v, in_table=False)}" for k, v in sorted(summary["figures"].items())
    ]
    if summary["pictures"]:
        out += ["", "## Pictures", ""]
        out += [f"![{Path(p).stem.replace('_', ' ')}]({p})" for p in summary["pictures"]]
    if summary["problems"]:
        out += ["", "## Problems met while reading the run", ""]
        out += [f"- {t(p)}" for p in summary["problems"]]
    out += [
        "",
        f"Fingerprint ({summary['fingerprint_source']}) and every value above: `summary.json`; the data the",
        "gates were judged from: `data/` (`invoke evidence.verify` judges them again and checks every file's"
        " sha256).",
        "",
    ]
    return "\n".join(out)


def verdict_words(summary: dict[str, Any]) -> str:
    """``14 of 14 gates passed`` or ``3 of 14 gates failed``."""
    if summary["verdict"] == "pass":
        return f"{int(summary['gates_passed'])} of {int(summary['gates_judged'])} gates passed"
    return f"{int(summary['gates_failed'])} of {int(summary['gates_judged'])} gates failed"


def judged_summary(data: Path, run_name: str) -> tuple[dict[str, Any], Signals]:
    """Everything in summary.json that the collected data decides: identity, platform, gates, figures,
    problems, fingerprint. ``collect`` and ``evidence.verify`` both call it on the (already sanitized) data
    and verify compares. ``run_name``: the run directory's name (the evidence directory's), which the data
    directory does not carry."""
    signals = collect_signals(data, run_name)
    results = evaluate(signals)
    failed, judged = failed_count(results)
    fingerprints, source = _fingerprints(data)
    platform, platform_source = _platform(signals, fingerprints, source)
    v = signals.get
    summary = {
        "schema_version": SCHEMA_VERSION,
        "run_id": v("run.id"),
        "kind": v("run.kind"),
        "engine_profile": v("run.engine"),
        "model_profile": v("run.model_profile"),
        "runtime": v("run.runtime"),
        "platform": platform,
        "platform_source": platform_source,
        "lock_digest": v("run.lock_digest"),
        "lock_digest_source": v("run.lock_digest_source"),
        "launcher_result": v("run.result"),
        "failure": v("run.failure") or None,
        "verdict": overall(results),
        "gates_passed": judged - failed,
        "gates_failed": failed,
        "gates_judged": judged,
        "gates": [
            {
                "id": r.id,
                "title": r.title,
                "signal": r.signal,
                "expect": r.expect,
                "value": r.value,
                "verdict": r.verdict,
                "reason": r.reason,
                "excerpt": f"excerpts/{r.excerpt}.txt" if r.excerpt else None,
            }
            for r in results
        ],
        "figures": _figures(signals),
        "diagnosis": judged_diagnosis(data, signals, results),
        "problems": list(signals.problems),
        "fingerprint_source": source,
        "fingerprint": fingerprints,
    }
    return json.loads(json.dumps(summary)), signals  # as it reads back from summary.json


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digests(evidence_dir: Path) -> dict[str, str]:
    """sha256 of every file of an evidence directory but summary.json, by relative path."""
    return {
        p.relative_to(evidence_dir).as_posix(): sha256_file(p)
        for p in sorted(evidence_dir.rglob("*"))
        if p.is_file() and p.relative_to(evidence_dir).as_posix() != "summary.json"
    }


def _disagreements(raw: list[GateResult], judged: dict[str, Any]) -> list[str]:
    """Gates the run directory judges differently from its collected data: a collection that lost data."""
    mine = {g["id"]: g["verdict"] for g in judged["gates"]}
    return [f"gate {r.id}: {r.verdict} on the run directory, {mine.get(r.id)} on the collected data"
            for r in raw if mine.get(r.id) != r.verdict]  # fmt: skip


def default_evidence_root(run_dir: Path) -> Path:
    """Where a run's evidence goes unless asked elsewhere: beside the runs it came from
    (``<SHARED_DIR>/runs/<run-id>`` -> ``<SHARED_DIR>/evidence``), so a user's runs never land in the project's
    committed ``evidence/``; an evidence's own ``data/`` is collected again in place."""
    path = Path(os.path.abspath(run_dir))
    if path.parent.name == "runs":
        return path.parent.parent / EVIDENCE
    if path.name == DATA and (path.parent / "summary.json").is_file():
        return path.parent.parent
    raise CollectError(
        f"{run_dir} is not in a runs/ directory: say where its evidence goes with --evidence "
        f"(--evidence {EVIDENCE} publishes it into the project's {EVIDENCE}/)"
    )


def second_scan(data: Path) -> list[secondscan.Finding]:
    """detect-secrets over every file of ``data`` (the collected data, sanitized), each span it finds redacted;
    the findings. A JSON file it made invalid raises CollectError (a redaction must keep the data readable)."""
    files = sorted(p for p in data.rglob("*") if p.is_file() and not p.is_symlink())
    found = secondscan.redact_files(files, lambda document: json_bytes(document, str).decode("utf-8"))
    for name in sorted({f.path for f in found}):
        path = Path(name)
        if path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise CollectError(
                    f"{path.name}: the second secret scan's redaction broke its JSON: {exc}"
                ) from exc
    return found


@contextlib.contextmanager
def _collect_lock(evidence_root: Path, run_id: str) -> Iterator[None]:
    """Hold ``<evidence_root>/.<run id>.collect-lock`` (fcntl.flock, released by the kernel if the process
    dies): two collects of one run never interleave; the second is refused, named, instead of waiting."""
    path = evidence_root / f".{run_id}.collect-lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise CollectError(
                f"{evidence_root / run_id}: another evidence.collect of this run is writing it ({path} is "
                "locked); nothing written"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder before us removed it: lock the one that is there now
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)


def _differences(old: Path, new: Path) -> list[str]:
    """The files of two evidence directories that differ (the signature aside: a new one signs new bytes)."""

    def digests(directory: Path) -> dict[str, str]:
        found = {k: v for k, v in file_digests(directory).items() if k != signature.SIGNATURE}
        if (directory / "summary.json").is_file():
            found["summary.json"] = sha256_file(directory / "summary.json")
        return found

    mine, theirs = digests(new), digests(old)
    return sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))


def _replaced_note(old: Path) -> str:
    """The collection note that names the bundle --replace replaced: its verdict and summary.json's sha256."""
    try:
        verdict = read_json(old / "summary.json").get("verdict")
        digest = sha256_file(old / "summary.json")
    except (OSError, ValueError):
        verdict, digest = "unreadable", "none"
    return (f"replaced (--replace) an earlier bundle of this run that said something else: verdict {verdict!r}, "
            f"summary.json sha256 {digest}")  # fmt: skip


def collect(
    run_dir: Path,
    evidence_root: Path | None = None,
    with_pictures: bool = True,
    sign_key: Path | None = None,
    replace: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Write ``evidence_root/<run-id>/`` for ``run_dir`` (default: :func:`default_evidence_root`), signed with
    ``sign_key`` when given (signature.py); return its path and the summary. A run directory collect refuses
    (a link or special file, a run id that is no plain name, a platform its engine contradicts, a key it cannot
    sign with, an existing bundle of the run that says something else without ``replace``, another collect of
    the run going on) raises :class:`CollectError` and writes nothing. With ``replace`` the bundle it replaced
    is named in the new one's collection notes."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CollectError(f"{run_dir} is not a run directory")
    evidence_root = default_evidence_root(run_dir) if evidence_root is None else Path(evidence_root)
    if sign_key is not None:
        signature.check_key(sign_key)
    if not os.path.lexists(run_dir / "run.json"):
        # A run still going or one whose launcher was killed hard has no run.json either: there is nothing
        # to judge yet, and a FAIL bundle of an empty directory would claim a run that never was.
        raise CollectError(
            f"{run_dir} is not a run directory: it has no run.json (a run still going, or none)"
        )
    check_run_dir(run_dir)
    raw = collect_signals(run_dir)  # judged here too: a collection that lost data shows as a disagreement
    raw_results = evaluate(raw)
    sanitizer = sanitizer_for_run(raw.run)
    for path in sorted((run_dir / "fingerprints").glob("*.json")):
        try:
            found = read_json(path)
        except (OSError, ValueError):
            continue
        if isinstance(found, dict) and found.get("hostname"):
            sanitizer.add_known(hosts=[str(found["hostname"])])
    run_id = str(raw.get("run.id") or run_dir.name)
    if not SAFE_RUN_ID.match(run_id):
        raise CollectError(
            f"{run_dir}: the run id {run_id!r} is not a plain name (letters, digits, '.', '_', '-')"
        )
    evidence_root.mkdir(parents=True, exist_ok=True)
    with _collect_lock(evidence_root, run_id):
        return _collect_locked(run_dir, evidence_root, run_id, raw, raw_results, sanitizer, with_pictures,
                               sign_key, replace)  # fmt: skip


def _collect_locked(
    run_dir: Path,
    evidence_root: Path,
    run_id: str,
    raw: Signals,
    raw_results: list[GateResult],
    sanitizer: Sanitizer,
    with_pictures: bool,
    sign_key: Path | None,
    replace: bool,
) -> tuple[Path, dict[str, Any]]:
    final = evidence_root / run_id
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=evidence_root))
    try:
        data = staging / DATA
        reduce_run(run_dir, data, sanitizer.sanitize)
        if not any((data / "fingerprints").glob("*.json")) and not (data / COLLECTOR_FINGERPRINT).exists():
            mine = collect_fingerprint()
            atomic_write_bytes(data / COLLECTOR_FINGERPRINT, json_bytes(mine, sanitizer.sanitize))
        second = second_scan(data)  # before anything is judged from data/: what it redacts is gone everywhere
        # Judged from the sanitized copy alone, exactly as verify will judge it again.
        summary, signals = judged_summary(data, final.name)
        contradiction = platform_contradiction(signals, summary["platform"], summary["platform_source"])
        if contradiction is not None:
            raise CollectError(f"{run_dir}/{contradiction}")
        summary["collection_notes"] = _disagreements(raw_results, summary)
        if second:
            summary["collection_notes"].append(
                f"the second secret scan (detect-secrets) redacted {len(second)} span(s) in {DATA}/ that the "
                f"sanitizer's patterns left: {', '.join(sorted({f.plugin for f in second}))}"
            )
        shown = excerpts(summary, signals)
        for rel, text in shown.items():
            atomic_write_text(staging / rel, text)
        summary["excerpts"] = sorted(shown)
        summary["pictures"] = pictures.draw(signals, staging) if with_pictures else []
        summary["collection_notes"] += [p for p in signals.problems if p.startswith("pictures not drawn")]
        atomic_write_text(staging / "summary.md", markdown(summary))
        summary["files"] = file_digests(staging)
        atomic_write_json(staging / "summary.json", summary)
        if os.path.lexists(final):
            differing = _differences(final, staging) if final.is_dir() and not final.is_symlink() else ["*"]
            if sign_key is None and os.path.lexists(final / signature.SIGNATURE):
                differing.append(signature.SIGNATURE)  # an unsigned collect would drop the signature silently
            if differing and not replace:
                raise CollectError(
                    f"{final} exists and says something else ({', '.join(differing[:8])}"
                    f"{' ...' if len(differing) > 8 else ''} differ): pass --replace to replace it (recorded "
                    "in the new bundle's collection notes); nothing written"
                )
            if differing:
                summary["collection_notes"].append(_replaced_note(final))
                summary["files"] = file_digests(staging)
                atomic_write_json(staging / "summary.json", summary)
        if sign_key is not None:
            signature.sign(staging / "summary.json", sign_key)
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
