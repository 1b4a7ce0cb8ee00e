"""``python -m atomdyn_launchers.evidence collect|verify|report|sanitize|bench``: the same commands the invoke
collection ``evidence`` offers, for scripts (nox, job scripts) that do not go through invoke."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from atomdyn_core.sanitize import Sanitizer, sanitize_file
from atomdyn_launchers.evidence import bench, results, secondscan, summary
from atomdyn_launchers.evidence.certify_report import is_certify_bundle, verify_certify
from atomdyn_launchers.evidence.data import CollectError
from atomdyn_launchers.evidence.jsonfile import EvidenceJSONError, read_json
from atomdyn_launchers.evidence.signature import SignatureError
from atomdyn_launchers.evidence.verify import verify_path

# What a command refuses with a message (exit 2) rather than a traceback: bad input, named.
USAGE_ERRORS = (CollectError, SignatureError, results.ReportError, EvidenceJSONError)


def collect(
    run_dir: Path, evidence_root: Path | None = None, sign_key: Path | None = None, replace: bool = False
) -> int:
    """``evidence_root`` None: beside the runs (summary.default_evidence_root)."""
    if not run_dir.is_dir():
        print(f"evidence collect: {run_dir} is not a run directory", file=sys.stderr)
        return 2
    try:
        out, data = summary.collect(run_dir, evidence_root, sign_key=sign_key, replace=replace)
    except USAGE_ERRORS as exc:
        print(f"evidence collect: {exc}", file=sys.stderr)
        return 2
    print(f"{out}: {data['verdict']} ({summary.verdict_words(data)})")
    for gate in data["gates"]:
        if gate["verdict"] == "fail":
            print(f"  FAIL {gate['id']}: {gate['reason']}")
    for note in data["collection_notes"]:
        print(f"  note: {note}")
    return 0 if data["verdict"] == "pass" else 1


def verify(paths: list[Path], signers: Path | None = None) -> int:
    if signers is not None and not signers.is_file():
        print(f"evidence verify: {signers}: no such signers file", file=sys.stderr)
        return 2
    ok = True
    for path in paths:
        try:
            verdict = verify_certify(path) if is_certify_bundle(path) else verify_path(path, signers)
        except SignatureError as exc:
            print(f"evidence verify: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(verdict.text())
        ok = ok and verdict.ok
    return 0 if ok else 1


def report(
    evidence_root: Path, results_md: Path, readme: Path | None, signers: Path | None = results.ALLOWED_SIGNERS
) -> int:
    """Publish: everything is checked (the evidence root, every bundle, the README's markers) before either
    record is written, so a refusal leaves both as they were. ``signers``: the allowed-signers file whose keys
    make a hardware row a result (results.py); without one every hardware row is an unverified claim."""
    try:
        # The README first: a device, a FIFO or a runaway file is refused before any bundle is read.
        existing = results.current_glance(readme) if readme is not None else ""
        if signers is not None and not signers.is_file():
            signers = None  # no allowed signer: no bundle counts as signed
        summaries, skipped = results.load_summaries(evidence_root, signers=signers)
        climbs = results.load_climbs(evidence_root)
        planned = results.plan_results(
            results_md, summaries, _relative(evidence_root, results_md.parent), climbs
        )
        readme_text = table = None
        if readme is not None:
            table = results.glance_table(summaries, _relative(evidence_root, readme.parent), existing)
            readme_text = results.readme_with(readme, table)
    except USAGE_ERRORS as exc:
        print(f"evidence report: {exc}", file=sys.stderr)
        return 2
    # The second scan over everything about to be written (RESULTS.md, the README's table; the rest of the
    # README is the project's own text): a finding stops the report before a byte is written.
    written = [(str(results_md), planned.text)]
    if readme is not None and readme_text is not None:
        written.append((f"{readme} (result at a glance)", table))
    findings = [
        finding
        for name, text in written
        if text is not None
        for finding in secondscan.findings_in_text(text, name)
    ]
    if findings:
        for finding in findings:
            print(f"  {finding.text()}", file=sys.stderr)
        print(
            f"evidence report: the second secret scan (detect-secrets) found {len(findings)} possible secret(s) "
            "in what it would publish; nothing written (collect the run again with the sanitizer fixed, or add "
            "a known-safe form to atomdyn_launchers/evidence/secondscan.py with its reason)",
            file=sys.stderr,
        )
        return 2
    for line in skipped:
        print(f"not published: {line}")
    for found in summaries:
        if found.get("_signature_note"):
            print(f"signature: {found['_signature_note']}")
    added, rewritten = planned.added, planned.rewritten
    planned.write()
    print(f"{results_md}: {len(added)} run(s) added" + (f": {', '.join(added)}" if added else ""))
    if rewritten:
        print(f"{results_md}: rewritten from evidence collected again: {', '.join(rewritten)}")
    if readme is not None:
        changed = readme_text is not None
        if readme_text is not None:
            results.write_readme(readme, readme_text)
        print(f"{readme}: result at a glance {'updated' if changed else 'unchanged'}")
    return 0


def _relative(target: Path, start: Path) -> str:
    import os

    return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()


SECOND_SCAN_MAX_BYTES = 16 << 20  # detect-secrets reads about 0.1 MB/s: larger files get the sanitizer alone


def print_sanitized(path: Path) -> int:
    """The sanitized text of ``path`` on standard output, the second scan's findings redacted in it (for a file
    of up to SECOND_SCAN_MAX_BYTES; a note on standard error says when it was skipped)."""
    if not path.is_file():
        print(f"evidence sanitize: {path} is not a file", file=sys.stderr)
        return 2
    if path.stat().st_size > SECOND_SCAN_MAX_BYTES:
        sanitize_file(path, sys.stdout, _sanitizer_for(path))
        print(
            f"evidence sanitize: {path} is over {SECOND_SCAN_MAX_BYTES >> 20} MiB: the second secret scan "
            "(detect-secrets) was skipped; the sanitizer's own patterns ran",
            file=sys.stderr,
        )
        return 0
    with tempfile.TemporaryDirectory(prefix="atomdyn-sanitize-") as tmp:
        staged = Path(tmp) / "sanitized.txt"
        with open(staged, "w", encoding="utf-8", newline="") as out:
            sanitize_file(path, out, _sanitizer_for(path))
        secondscan.redact_files([staged])
        with open(staged, encoding="utf-8", newline="") as done:
            shutil.copyfileobj(done, sys.stdout)
    return 0


def _sanitizer_for(path: Path) -> Sanitizer:
    """The run's own sanitizer when ``path`` lies in a run directory (it knows the nodes and the account)."""
    for parent in list(path.resolve().parents)[:3]:
        try:
            run = read_json(parent / "run.json")
        except (OSError, ValueError):
            continue
        if isinstance(run, dict):
            return summary.sanitizer_for_run(run)
    hosts, users = summary.local_identities()
    return Sanitizer(hosts=hosts, users=users)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atomdyn_launchers.evidence")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("collect", help="write <evidence>/<run-id>/ for a run directory")
    p.add_argument("run_dir", type=Path)
    p.add_argument(
        "--evidence",
        type=Path,
        default=None,
        help="evidence root (default: beside the runs, <SHARED_DIR>/evidence; 'evidence' publishes into the "
        "project's)",
    )
    p.add_argument("--sign", type=Path, default=None, help="sign with this ssh key (default: unsigned)")
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace an existing bundle of the run that says something else (recorded in the new one)",
    )
    p = sub.add_parser(
        "verify", help="judge run directories or check evidence directories; exit 1 on failure"
    )
    p.add_argument("paths", type=Path, nargs="+")
    p.add_argument("--signer", type=Path, default=None, help="require a signature by a key in this file")
    p = sub.add_parser("report", help="append results/RESULTS.md and regenerate the README's result table")
    p.add_argument("--evidence", type=Path, default=Path("evidence"))
    p.add_argument("--results", type=Path, default=Path("results/RESULTS.md"))
    p.add_argument("--readme", type=Path, default=None)
    p.add_argument(
        "--allowed-signers",
        type=Path,
        default=results.ALLOWED_SIGNERS,
        help="the allowed-signers file whose keys make a hardware row a result (default: %(default)s)",
    )
    p = sub.add_parser("sanitize", help="print the sanitized text of a file")
    p.add_argument("path", type=Path)
    sub.add_parser("bench", help="parsing bench (see --help of the bench module)", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":
        return bench.main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        if args.command == "collect":
            return collect(args.run_dir, args.evidence, args.sign, args.replace)
        if args.command == "verify":
            return verify(args.paths, args.signer)
        if args.command == "report":
            return report(args.evidence, args.results, args.readme, args.allowed_signers)
        return print_sanitized(args.path)
    except USAGE_ERRORS as exc:
        print(f"evidence {args.command}: {exc}", file=sys.stderr)
        return 2
