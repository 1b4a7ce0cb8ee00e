"""The second secret scan: detect-secrets, a scanner others maintain, over what the evidence tools write.

`atomdyn_core.sanitize` finds secrets by their shape with the standard library alone (it also runs on the nodes,
whose Python has no third-party package). On the submit host, where `evidence.collect`, `evidence.sanitize` and
`evidence.report` run, detect-secrets looks again with every plugin it ships (keywords, high-entropy base64 and hex
strings, the vendor token formats, private keys; never over the network): collect and sanitize redact each span it
finds (``<redacted:second-scan>``), report refuses to publish on a finding. `scripts/secret_scan.py` (`nox -s
lint`) runs the same scan, with the same allow-list, over the committed evidence.

The allow-list names the project's own known-safe fields and values, each with its reason, rather than switching
plugins off: whole lines that can hold nothing but a digest the project computed, and values that are nothing but
the sanitizer's own placeholders.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "KNOWN_SAFE_LINES",
    "KNOWN_SAFE_VALUES",
    "REDACTED",
    "Finding",
    "findings_in_files",
    "findings_in_text",
    "redact_files",
]

REDACTED = "<redacted:second-scan>"
# Plugins whose findings are reported (report refuses, lint fails) but not redacted at collect and sanitize time:
# addresses are the sanitizer's (it maps them to placeholders and keeps four-part versions such as 2.21.5.1,
# which this plugin takes for public addresses).
REPORT_ONLY = frozenset({"Public IP (ipv4)"})

# (regular expression for a whole line, why what it matches is no secret). A finding on a line any of them
# matches is dropped, whichever plugin made it, so each is anchored at both ends.
KNOWN_SAFE_LINES: tuple[tuple[str, str], ...] = (
    (
        r'^\s*"[a-z0-9_.-]+(/[a-z0-9_.-]+)*\.[a-z]+": "[0-9a-f]{64}",?$',
        "summary.json's files table: a bundle file's relative name and the SHA-256 of its bytes",
    ),
    (
        r'^\s*"freeze_sha256": "[0-9a-f]{64}",?$',
        "a machine fingerprint's SHA-256 of the environment's pip freeze",
    ),
    (
        r'^\s*"(lock_digest|sha256)": "(sha256:)?[0-9a-f]{64}",?$',
        "the release lock's digest and the SHA-256 of a file the project hashed",
    ),
    (
        r'^\s*"run_id": "[0-9]{8}T[0-9]{6}Z[A-Za-z0-9_.-]*",?$',
        "a run id: the UTC time the run started and its kind",
    ),
)

# (regular expression for a flagged value itself, why it is no secret): dropped wherever it appears, while
# every other finding on its line stands.
KNOWN_SAFE_VALUES: tuple[tuple[str, str], ...] = (
    (
        r"^/cluster/path-[0-9]+(/[A-Za-z0-9]{1,16}([_.-][A-Za-z0-9]{1,16})*)*$",
        "a path below the sanitizer's own placeholder (/cluster/path-N) made of short plain names (runs, "
        "run ids, benchmark/c4): the high-entropy plugins take a long path for a key",
    ),
    (
        r"^<redacted:[a-z0-9-]+>$",
        "the sanitizer's own marker for what it redacted",
    ),
    (
        r"^(192\.0\.2|198\.51\.100|203\.0\.113)\.[0-9]{1,3}$",
        "the sanitizer's own placeholders for IPv4 addresses: the documentation ranges (RFC 5737), which the "
        "public-address plugin takes for public addresses",
    ),
)


# A flagged value dropped where its own line shows it as a container image's content digest
# (name@sha256:<64 hex>): public, and what a worker's log says it pulled; the same hex anywhere else stands.
# detect-secrets' config-file reading hands the filter such a line as `name@sha256 = "<64 hex>"`.
IMAGE_DIGEST = re.compile(r'[A-Za-z0-9._/:-]@sha256(?::| = ")([0-9a-f]{64})(?![0-9A-Za-z])')


def is_image_digest(secret: str, line: str) -> bool:
    """detect-secrets' filter (it passes the flagged value and its line by these parameter names)."""
    return any(match.group(1) == secret for match in IMAGE_DIGEST.finditer(line))


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    plugin: str
    value: str = ""  # the flagged text (never printed; redact_files replaces it)

    def text(self) -> str:
        return f"{self.path}:{self.line}: {self.plugin}"


def _settings() -> dict[str, Any]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    plugins: list[dict[str, Any]] = []
    classes: dict[str, type[Any]] = get_mapping_from_secret_type_to_class()
    for plugin in classes.values():
        entry: dict[str, Any] = {"name": plugin.__name__}
        if plugin.__name__ == "Base64HighEntropyString":
            entry["limit"] = 4.5  # detect-secrets' own defaults, as its command line sets them
        elif plugin.__name__ == "HexHighEntropyString":
            entry["limit"] = 3.0
        plugins.append(entry)
    return {
        "plugins_used": plugins,
        "filters_used": [
            {
                "path": "detect_secrets.filters.regex.should_exclude_line",
                "pattern": [pattern for pattern, _ in KNOWN_SAFE_LINES],
            },
            {
                "path": "detect_secrets.filters.regex.should_exclude_secret",
                "pattern": [pattern for pattern, _ in KNOWN_SAFE_VALUES],
            },
            {"path": f"{__name__}.is_image_digest"},
        ],
    }


def _scan(paths: Iterable[Path]) -> Iterator[Finding]:
    from detect_secrets.core.scan import scan_file
    from detect_secrets.settings import transient_settings

    with transient_settings(_settings()):
        for path in paths:
            for secret in scan_file(str(path)):
                yield Finding(
                    str(path), int(secret.line_number), str(secret.type), str(secret.secret_value or "")
                )


def findings_in_files(paths: Iterable[Path]) -> list[Finding]:
    """What detect-secrets finds in ``paths`` (text files; one that does not decode is skipped by it)."""
    return sorted(set(_scan(paths)))


def findings_in_text(text: str, name: str) -> list[Finding]:
    """What detect-secrets finds in ``text``, reported under ``name`` (the file it is about to be written to)."""
    with tempfile.TemporaryDirectory(prefix="atomdyn-secondscan-") as tmp:
        staged = Path(tmp) / (Path(name).name or "text")
        staged.write_text(text, encoding="utf-8")
        return [Finding(name, f.line, f.plugin, f.value) for f in findings_in_files([staged])]


def redact_files(paths: Iterable[Path], dump_json: Callable[[Any], str] | None = None) -> list[Finding]:
    """Each span detect-secrets finds in ``paths`` replaced by :data:`REDACTED` (the file rewritten through a
    temporary file and rename); the findings redacted (not those of :data:`REPORT_ONLY`). In a text file the
    value is replaced on its line; with ``dump_json`` (how the caller writes its JSON), a JSON file is parsed,
    the value replaced in its strings and the document written again, so it stays the same JSON."""
    found = [f for f in findings_in_files(paths) if f.value and f.plugin not in REPORT_ONLY]
    by_path: dict[str, list[Finding]] = {}
    for finding in found:
        by_path.setdefault(finding.path, []).append(finding)
    for name, findings in by_path.items():
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        document = _json_or_none(text) if dump_json is not None and path.suffix == ".json" else None
        if dump_json is not None and document is not None:
            values = {v for f in findings for v in (f.value, _unescaped(f.value)) if v}
            text = dump_json(_replace_in_strings(document, values))
        else:
            lines = text.splitlines(keepends=True)
            for finding in findings:
                index = finding.line - 1
                if 0 <= index < len(lines):
                    lines[index] = lines[index].replace(finding.value, REDACTED)
            text = "".join(lines)
        _write(path, text)
    return found


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _unescaped(value: str) -> str:
    """A value as it reads inside a JSON string once decoded (the plugins see the escaped text)."""
    try:
        decoded = json.loads(f'"{value}"')
    except ValueError:
        return ""
    return decoded if isinstance(decoded, str) else ""


def _replace_in_strings(document: Any, values: set[str]) -> Any:
    if isinstance(document, str):
        for value in sorted(values, key=len, reverse=True):
            document = document.replace(value, REDACTED)
        return document
    if isinstance(document, list):
        return [_replace_in_strings(item, values) for item in document]
    if isinstance(document, dict):
        return {_replace_in_strings(k, values): _replace_in_strings(v, values) for k, v in document.items()}
    return document


def _write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
