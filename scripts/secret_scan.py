"""A second secret scan over the committed evidence, by a scanner others maintain (detect-secrets).

`atomdyn_core.sanitize` turns what its own patterns recognise into placeholders before evidence is written; a
pattern it lacks lets a secret through silently. detect-secrets (every plugin it ships: cloud and service keys,
private keys, tokens, passwords by keyword, public addresses, high-entropy strings) looks again at every file
`git ls-files evidence/` lists, never over the network (`--no-verify`: no plugin asks a vendor whether a key is
live), without a baseline. Each finding is printed as `path:line: plugin` (never the value) and the exit status
is 1. `nox -s lint` runs it; `python scripts/secret_scan.py [--root DIR] [FILE...]` runs it alone.

The evidence is rich in hashes and long sanitized paths, which the high-entropy plugins flag by design. Rather
than switch those plugins off, the forms of secondscan.KNOWN_SAFE_LINES and KNOWN_SAFE_VALUES are the only ones
let through, each with its reason: whole lines that can hold nothing but a digest, and values that are nothing but
a placeholder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The allow-list (whole lines that hold nothing but a digest the project computed, values that are nothing but
# the sanitizer's own placeholders), each with its reason: the one the evidence tools' second scan uses
# (atomdyn_launchers/evidence/secondscan.py), so collect, report and lint let through the same forms.
from atomdyn_launchers.evidence.secondscan import KNOWN_SAFE_LINES, KNOWN_SAFE_VALUES  # noqa: E402


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    plugin: str


@dataclass(frozen=True)
class Scan:
    files: tuple[str, ...]  # what was given to detect-secrets
    not_text: tuple[str, ...]  # of those, the files it skips: not UTF-8 text (pictures)
    plugins: tuple[str, ...]  # the plugins it ran
    findings: tuple[Finding, ...]


def tracked_evidence(root: Path) -> list[str]:
    """The regular files under evidence/ that git tracks, relative to root."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "evidence/"], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return sorted(name for name in listed.split("\0") if name and (root / name).is_file())


def is_text(path: Path) -> bool:
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return False
    return True


def scan(root: Path, files: Sequence[str]) -> Scan:
    """Run detect-secrets with every plugin over files (relative to root: it skips a file outside its cwd)."""
    command = [sys.executable, "-m", "detect_secrets", "scan", "--no-verify"]
    for pattern, _why in KNOWN_SAFE_LINES:
        command += ["--exclude-lines", pattern]
    for pattern, _why in KNOWN_SAFE_VALUES:
        command += ["--exclude-secrets", pattern]
    # It reads files with the locale's encoding and skips, unreported, any file that does not decode.
    env = {**os.environ, "PYTHONUTF8": "1"}
    done = subprocess.run(
        [*command, "--", *files], cwd=root, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"detect-secrets failed (exit {done.returncode}): {done.stderr.strip()}")
    report = json.loads(done.stdout)
    findings = sorted(
        Finding(path, int(result["line_number"]), str(result["type"]))
        for path, results in report["results"].items()
        for result in results
    )
    return Scan(
        files=tuple(files),
        not_text=tuple(name for name in files if not is_text(root / name)),
        plugins=tuple(str(plugin["name"]) for plugin in report["plugins_used"]),
        findings=tuple(findings),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    parser.add_argument("files", nargs="*", help="files relative to --root (default: git ls-files evidence/)")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    files: list[str] = args.files or tracked_evidence(root)
    if not files:
        print(f"secret scan: no evidence files under {root}", file=sys.stderr)
        return 1
    result = scan(root, files)
    skipped = f"; {len(result.not_text)} not text, not scanned" if result.not_text else ""
    summary = f"{len(result.files)} evidence files ({len(result.plugins)} detect-secrets plugins{skipped})"
    if not result.findings:
        print(f"secret scan: no finding in {summary}")
        return 0
    for finding in result.findings:
        print(f"{finding.path}:{finding.line}: {finding.plugin}", file=sys.stderr)
    print(
        f"secret scan: {len(result.findings)} finding(s) in {summary}: remove each (or make the "
        "sanitizer replace it and collect again); a form that is never a secret goes into KNOWN_SAFE_LINES "
        "or KNOWN_SAFE_VALUES of atomdyn_launchers/evidence/secondscan.py with its reason",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
