"""The invoke collection ``evidence``: collect | verify | report | sanitize | bench.

Each task calls the CLI in atomdyn_launchers.evidence.cli and fails (non-zero exit) where it does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

from atomdyn_launchers.evidence import bench as bench_module
from atomdyn_launchers.evidence import cli


def _done(command: Callable[[], int]) -> None:
    try:
        code = command()
    except OSError as exc:  # a path given on the command line that cannot be read or written
        raise Exit(f"error: {exc.filename}: {exc.strerror}", code=2) from None
    if code:
        raise Exit(code=code)


@task(help={"run_dir": "a runs/<run-id> directory", "evidence": "evidence root (default: evidence)"})
def collect(c: Context, run_dir: str, evidence: str = "evidence") -> None:
    """Write sanitized evidence/<run-id>/ (summary.json, summary.md, excerpts, PNGs) for a run."""
    _done(lambda: cli.collect(Path(run_dir), Path(evidence)))


@task(help={"path": "a run directory or an evidence/<run-id> directory"})
def verify(c: Context, path: str) -> None:
    """Judge a run's validity gates, or check collected evidence; fails naming each failed gate."""
    _done(lambda: cli.verify([Path(path)]))


@task(
    help={
        "evidence": "evidence root",
        "results": "the RESULTS.md to append",
        "readme": "README to update ('' for none)",
    }
)
def report(
    c: Context, evidence: str = "evidence", results: str = "results/RESULTS.md", readme: str = "README.md"
) -> None:
    """Append new runs to results/RESULTS.md and regenerate the README's "Result at a glance"."""
    _done(lambda: cli.report(Path(evidence), Path(results), Path(readme) if readme else None))


@task(help={"path": "any text file (a log, a job script, run.json)"})
def sanitize(c: Context, path: str) -> None:
    """Print the sanitized text of a file."""
    _done(lambda: cli.print_sanitized(Path(path)))


@task(help={"size_mb": "size of the generated log in MiB"})
def bench(c: Context, size_mb: int = 512) -> None:
    """Parsing bench: MB/s and peak memory over a generated log."""
    _done(lambda: bench_module.main(["--size-mb", str(size_mb)]))


ns = Collection("evidence")
for _task in (collect, verify, report, sanitize, bench):
    ns.add_task(_task)
