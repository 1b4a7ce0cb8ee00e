"""The climb's report as evidence: ``<evidence>/certify-<id>/README.md`` and ``certify.json``, sanitized like every
evidence file (hosts, users, addresses become stable placeholders), written atomically."""

from __future__ import annotations

import json
from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_core.sanitize import sanitize
from atomdyn_launchers.certify.ladder import REPORT_FILE, STATE_FILE, Certification, report


def publish(cert: Certification, evidence: Path) -> Path:
    target = evidence / f"certify-{cert.certify_id}"
    target.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target / STATE_FILE, sanitize(json.dumps(cert.to_json(), indent=2) + "\n"))
    atomic_write_text(target / REPORT_FILE, sanitize(report(cert)))
    return target
