"""A held-out corpus (issue 36): secret forms as cluster and serving logs carry them, written by someone other than
the sanitizer's authors before reading its source (``heldout_corpus/forms.jsonl``, test data, every value made up).
Each entry goes through the sanitizer the way ``evidence.sanitize`` (the whole file, then the second scan) and
``evidence.collect`` (line by line with the run's sanitizer, then the second scan) use it: no listed secret may
survive, and every measurement line must come out byte-identical."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from atomdyn_core.sanitize import Sanitizer, sanitize_file

CORPUS = Path(__file__).parent / "heldout_corpus" / "forms.jsonl"
ROWS: list[dict[str, Any]] = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
RUN: dict[str, list[str]] = next(row["_run"] for row in ROWS if "_run" in row)
ENTRIES = [row for row in ROWS if "line" in row]


def _sanitizer() -> Sanitizer:
    return Sanitizer(hosts=RUN["hosts"], users=RUN["users"], accounts=RUN["accounts"])


def _second_scan(texts: list[str], tmp: Path) -> list[str]:
    """The texts after detect-secrets' pass as both commands run it (each text its own file); where the launchers
    are not installed, the texts as the sanitizer left them (it must then hide every form alone)."""
    try:
        from atomdyn_launchers.evidence import secondscan
    except ImportError:
        return texts
    paths = []
    for i, text in enumerate(texts):
        path = tmp / f"entry-{i}.log"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    secondscan.redact_files(paths)
    return [path.read_text(encoding="utf-8") for path in paths]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    tmp = tmp_path_factory.mktemp("heldout")
    as_sanitize = []
    for i, entry in enumerate(ENTRIES):
        source = tmp / f"source-{i}.log"
        source.write_text(entry["line"] + "\n", encoding="utf-8")
        out = io.StringIO()
        sanitize_file(source, out, _sanitizer())
        as_sanitize.append(out.getvalue())
    as_collect = []
    for entry in ENTRIES:
        sanitizer = _sanitizer()
        as_collect.append("".join(sanitizer.sanitize(line) + "\n" for line in entry["line"].split("\n")))
    (tmp / "sanitize").mkdir()
    (tmp / "collect").mkdir()
    return {
        "sanitize": _second_scan(as_sanitize, tmp / "sanitize"),
        "collect": _second_scan(as_collect, tmp / "collect"),
    }


def test_corpus_is_large_enough() -> None:
    assert sum(1 for e in ENTRIES if e.get("hide")) >= 40
    assert sum(1 for e in ENTRIES if e.get("keep")) >= 10
    assert all(e.get("keep") or all(s and s in e["line"] for s in e["hide"]) for e in ENTRIES)


@pytest.mark.parametrize("command", ["sanitize", "collect"])
@pytest.mark.parametrize("index", range(len(ENTRIES)), ids=[e["line"][:40] for e in ENTRIES])
def test_heldout_entry(outputs: dict[str, list[str]], command: str, index: int) -> None:
    entry = ENTRIES[index]
    got = outputs[command][index]
    if entry.get("keep"):
        assert got == entry["line"] + "\n", "a measurement line changed"
    else:
        leaked = [secret for secret in entry["hide"] if secret in got]
        assert not leaked, f"survived evidence.{command}: {got!r}"
