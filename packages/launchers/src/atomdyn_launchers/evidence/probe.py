"""What a cross-node NIXL probe run proves: its two sides' reports, and the KV path's gates on its logs.

A probe run (``nixl.cross_node``, the ladder's NIXL rung) is a P/D pair whose roles ran
``nixl_compat.crossnode`` in the workers' runtime instead of the engine. Its verdict is the probe's own checks
(both sides reported, every byte of every series arrived, the checksums matched) and the rows of the gate
table that concern the KV path, judged with the engine's expectations exactly as for a serving run: no NIXL
error, UCX's protocol rows name the expected transport (zero-copy where the engine asks it), none a forbidden
one, the dma-buf helper's registrations where the engine preloads it, the doctor's report where required.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_launchers.contract.expectations import GateExpectations
from atomdyn_launchers.evidence.expectations import expectations_for
from atomdyn_launchers.evidence.gates import GateResult, evaluate
from atomdyn_launchers.evidence.jsonfile import read_json, read_whole_text
from atomdyn_launchers.evidence.signals import collect_signals

PROBE_DIR = "nixl"
SIDES = {"prefill": "target", "decode": "initiator"}
# The gate table's rows that a probe run can show: the KV path, not serving.
PROBE_GATES = (
    "jobs_clean",
    "placement_verified",
    "distinct_nodes",
    "nixl_err_records",
    "kv_transport_rows",
    "kv_forbidden_transport_rows",
    "kv_rows_not_zero_copy",
    "dmabuf_registrations_min_per_worker",
    "host_vram_registrations_min_per_worker",
    "dmabuf_short_of_host_vram_workers",
    "dmabuf_failures",
    "doctor_missing_roles",
    "doctor_failed_selftests",
    "nixl_backend_missing_roles",
)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class ProbeVerdict:
    passed: bool
    checks: list[Check] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    diagnosis: str | None = None

    def lines(self) -> list[str]:
        out = [f"{'PASS' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in self.checks]
        if self.diagnosis:
            out.append(f"diagnosis: {self.diagnosis}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks],
            "figures": self.figures,
            "diagnosis": self.diagnosis,
        }


def _reports(run_dir: Path) -> dict[str, dict[str, Any] | None]:
    out: dict[str, dict[str, Any] | None] = {}
    for role in SIDES:
        try:
            loaded = read_json(run_dir / PROBE_DIR / f"{role}.json", expect=None)
        except (OSError, ValueError):
            loaded = None
        out[role] = loaded if isinstance(loaded, dict) else None
    return out


def _ucx_errors(run_dir: Path, limit: int = 3) -> list[str]:
    """UCX's own error lines from the probe's logs (what it tried and why it refused)."""
    found: list[str] = []
    for path in sorted((run_dir / "logs").glob("*.probe.log")):
        try:
            text = read_whole_text(path, "probe log", errors="replace")
        except (OSError, ValueError):
            continue
        for line in text.splitlines():
            if " UCX  ERROR " in line or " UCX  WARN " in line or "NIXL_ERR" in line:
                found.append(f"{path.name}: {line.strip()[:300]}")
                if len(found) >= limit:
                    return found
    return found


def _figures(initiator: dict[str, Any]) -> dict[str, Any]:
    series = initiator.get("series") or []
    figures: dict[str, Any] = {
        "per_block_p50_us": {str(s.get("blocks")): s.get("p50_us_per_block") for s in series},
        "read_p50_us": {str(s.get("blocks")): s.get("p50_us") for s in series},
    }
    large = initiator.get("large") or {}
    if large:
        figures["large_bytes"] = large.get("bytes")
        figures["large_gbps_p50"] = large.get("gbps_p50")
    rate = initiator.get("line_rate") or {}
    if rate:
        figures["line_rate_gbit"] = rate.get("gbit")
        figures["line_rate_devices"] = rate.get("devices")
        figures["large_fraction_of_line_rate"] = rate.get("large_fraction")
    return figures


def _side_checks(reports: dict[str, dict[str, Any] | None]) -> list[Check]:
    checks = []
    for role, side in SIDES.items():
        report = reports[role]
        if report is None:
            checks.append(
                Check(f"{side}_report", False, f"no {PROBE_DIR}/{role}.json: the {side} never reported")
            )
            continue
        detail = (
            "verified" if report.get("ok") else f"stopped at {report.get('stage')}: {report.get('error')}"
        )
        checks.append(Check(f"{side}_report", bool(report.get("ok")), detail))
    initiator = reports["decode"] or {}
    series = initiator.get("series") or []
    large = initiator.get("large") or {}
    bad = [str(s.get("blocks")) for s in series if not s.get("verified")]
    moved = bool(series) and not bad and bool(large.get("verified"))
    what = ", ".join(f"{s.get('blocks')} block(s)" for s in series) or "nothing"
    detail = (
        f"SHA-256 of every READ matched the target's ({what}; {large.get('bytes', 0)} bytes in one)"
        if moved
        else f"series not verified: {', '.join(bad) or 'none ran'}; large: {large.get('verified', 'not run')}"
    )
    checks.append(Check("bytes_arrived", moved, detail))
    return checks


def _diagnosis(run_dir: Path, reports: dict[str, dict[str, Any] | None], failed: list[Check]) -> str | None:
    if not failed:
        return None
    initiator = reports["decode"] or {}
    env = initiator.get("environment") or (reports["prefill"] or {}).get("environment") or {}
    parts = [f"{failed[0].name}: {failed[0].detail}"]
    if initiator.get("stage") in ("connect", "transfer", "large"):
        parts.append(
            f"UCX was given UCX_TLS={env.get('UCX_TLS', '(unset: every transport)')}"
            f", UCX_NET_DEVICES={env.get('UCX_NET_DEVICES', '(unset)')}"
        )
    parts += _ucx_errors(run_dir)
    return "; ".join(parts)


def judge_probe(run_dir: Path, expectations: GateExpectations | None = None) -> ProbeVerdict:
    """The probe run's verdict: the sides' reports, then the KV path's gates with the engine's expectations."""
    reports = _reports(run_dir)
    checks = _side_checks(reports)
    signals = collect_signals(run_dir)
    wanted = expectations or expectations_for(signals.get("run.engine"), signals.run.get("config"))
    results: list[GateResult] = [
        r for r in evaluate(signals, wanted) if r.id in PROBE_GATES and r.verdict != "n/a"
    ]
    for result in results:
        shown = f"{result.value!r} ({result.expect})"
        checks.append(Check(result.id, result.verdict == "pass", result.reason or shown))
    # The initiator's own failure first: the target's only echoes it.
    failed = sorted((c for c in checks if not c.ok), key=lambda c: c.name != "initiator_report")
    return ProbeVerdict(
        passed=not failed,
        checks=checks,
        figures=_figures(reports["decode"] or {}),
        diagnosis=_diagnosis(run_dir, reports, failed),
    )
