"""Regenerate docs/diagnose.md's table of failure signatures (and its count) from the catalog
(atomdyn_launchers/diagnose/catalog.py); tests/diagnose/test_catalog.py keeps them equal."""

from __future__ import annotations

import re
from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.diagnose.catalog import CATALOG, table

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- catalog:begin (generated: python scripts/sync_diagnose_doc.py) -->"
END = "<!-- catalog:end -->"


def main() -> None:
    doc = ROOT / "docs" / "diagnose.md"
    text = doc.read_text(encoding="utf-8")
    text = re.sub(
        re.escape(BEGIN) + r"\n.*?" + re.escape(END), lambda m: f"{BEGIN}\n{table()}{END}", text, flags=re.S
    )
    text = re.sub(r"\b\d+ entries\b", f"{len(CATALOG)} entries", text, count=1)
    atomic_write_text(doc, text)


if __name__ == "__main__":
    main()
