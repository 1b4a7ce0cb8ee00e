"""The climb's report as evidence: ``<evidence>/certify-<id>/README.md`` and ``certify.json``, sanitized like every
evidence file (hosts, users, addresses become stable placeholders), written atomically; ``evidence.verify``
recomputes the README and the verdict from certify.json (evidence/certify_report.py)."""

from __future__ import annotations

from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.certify.ladder import Certification
from atomdyn_launchers.evidence.certify_report import BUNDLE_PREFIX, REPORT_FILE, STATE_FILE, published_texts


def publish(cert: Certification, evidence: Path) -> Path:
    target = evidence / f"{BUNDLE_PREFIX}{cert.certify_id}"
    target.mkdir(parents=True, exist_ok=True)
    state_text, readme = published_texts(cert.to_json())
    atomic_write_text(target / STATE_FILE, state_text)
    atomic_write_text(target / REPORT_FILE, readme)
    return target
