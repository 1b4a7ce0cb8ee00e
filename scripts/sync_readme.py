"""Regenerate the README's pinned-stack table from release-lock.json."""

from __future__ import annotations

import re
from pathlib import Path

from atomdyn_core.atomic import atomic_write_text
from atomdyn_core.cli import pinned_stack_table
from atomdyn_core.lock import load_lock

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    readme = ROOT / "README.md"
    table = pinned_stack_table(load_lock(ROOT / "release-lock.json"))
    text = re.sub(
        r"(<!-- pinned-stack:begin -->\n).*?(<!-- pinned-stack:end -->)",
        lambda m: m.group(1) + table + m.group(2),
        readme.read_text(encoding="utf-8"),
        flags=re.S,
    )
    atomic_write_text(readme, text)


if __name__ == "__main__":
    main()
