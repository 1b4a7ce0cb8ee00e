"""The checked-in golden launch snapshots equal what the code renders, and every rendered script is
shellcheck clean. A difference names the file and says how to regenerate (then review the diff)."""

from __future__ import annotations

import difflib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from golden_launch import GOLDEN_DIR, cases, expected, render_case

REGENERATE = "regenerate with `nox -s snapshots` and review the diff before committing"


def test_every_snapshot_matches_the_code() -> None:
    wanted = expected()
    problems: list[str] = []
    for path, text in sorted(wanted.items()):
        name = path.relative_to(GOLDEN_DIR.parent)
        if not path.exists():
            problems.append(f"{name}: missing")
            continue
        have = path.read_text()
        if have != text:
            diff = difflib.unified_diff(
                have.splitlines(),
                text.splitlines(),
                f"{name} (checked in)",
                f"{name} (rendered)",
                lineterm="",
            )
            problems.append("\n".join(list(diff)[:40]))
    extra = sorted(p for p in GOLDEN_DIR.rglob("*") if p.is_file() and p not in wanted)
    problems += [f"{p.relative_to(GOLDEN_DIR.parent)}: no longer rendered" for p in extra]
    assert not problems, f"golden launch snapshots differ ({REGENERATE}):\n" + "\n".join(problems)


def test_snapshots_cover_the_required_cases() -> None:
    covered = set(cases())
    for case in [
        ("atom", "agg-single", "docker"),
        ("atom", "disagg", "docker"),
        ("vllm", "disagg", "docker"),
        ("mocker", "disagg", "venv"),
        ("mocker", "disagg", "docker"),
        ("atom", "disagg", "pyxis"),
        ("vllm", "disagg", "pyxis"),
        *(
            ("sglang", kind, runtime)
            for kind in ("agg-single", "disagg")
            for runtime in ("docker", "podman", "pyxis")
        ),
    ]:
        assert case in covered, case


def test_rendering_is_stable() -> None:
    # Two renderings (two temporary run directories) give the same bytes: nothing machine- or time-bound.
    assert render_case("atom", "disagg", "docker") == render_case("atom", "disagg", "docker")
    text = "\n".join(render_case("mocker", "disagg", "venv").values())
    assert "/tmp" not in text and "atomdyn-golden-" not in text


def test_snapshot_scripts_are_shellcheck_clean(tmp_path: Path) -> None:
    exe = shutil.which("shellcheck")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is not installed (.ci/run must install it)")
        pytest.skip("shellcheck is not installed")
    scripts = sorted(p for p in expected() if p.suffix == ".sbatch")
    assert scripts, "no golden scripts: " + REGENERATE
    # One shellcheck per core, each over its share of the scripts (one process over all of them takes a minute).
    shares = [scripts[i :: os.cpu_count() or 1] for i in range(os.cpu_count() or 1)]
    checks = [
        subprocess.Popen([exe, "--severity=info", *map(str, share)], stdout=subprocess.PIPE, text=True)
        for share in shares
        if share
    ]
    found = [(check.communicate()[0], check.returncode) for check in checks]
    assert all(code == 0 for _, code in found), "".join(out for out, _ in found)
