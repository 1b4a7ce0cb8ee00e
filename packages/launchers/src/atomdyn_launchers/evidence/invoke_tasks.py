"""The invoke collection ``evidence``: collect | verify | report | sanitize | bench.

Each task calls the CLI in atomdyn_launchers.evidence.cli and fails (non-zero exit) where it does; a refusal
is a message and exit 2, never a traceback. A path argument of ``-h`` or ``--help`` shows the task's help
(invoke would take it as the path: a positional argument swallows the next word).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from pathlib import Path

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

# The evidence's modules (cli, bench) are imported when a task runs, not here: every `invoke` call loads this one.


def _done(command: Callable[[], int]) -> None:
    from atomdyn_launchers.evidence.cli import USAGE_ERRORS

    try:
        code = command()
    except OSError as exc:  # a path given on the command line that cannot be read or written
        raise Exit(f"error: {exc.filename}: {exc.strerror}", code=2) from None
    except USAGE_ERRORS as exc:
        raise Exit(f"error: {exc}", code=2) from None
    if code:
        raise Exit(code=code)


def _asked_for_help(name: str, value: str) -> bool:
    """Show the help of ``evidence.<name>`` when its path argument is ``-h``/``--help``; True if shown."""
    if value not in ("-h", "--help"):
        return False
    full = f"evidence.{name}"
    try:
        from invoke.main import program

        program.print_task_help(full)  # the running program's help, as `invoke --help TASK` shows it
    except (AttributeError, KeyError):  # called from Python, not from the invoke command line
        found = ns.tasks[name]
        print(f"Usage: inv[oke] [--core-opts] {full} [--options] [other tasks here ...]\n")
        print(f"Docstring:\n  {inspect.getdoc(found.body)}\n")
        print("Options:\n" + "\n".join(f"  --{k.replace('_', '-')}: {v}" for k, v in found.help.items()))
    sys.stdout.flush()
    return True


@task(
    help={
        "run_dir": "a runs/<run-id> directory",
        "evidence": "evidence root (default: beside the runs, <SHARED_DIR>/evidence, where a user's runs go; "
        "'evidence' publishes into the project's committed evidence/)",
        "sign": "an ssh key to sign the evidence with, where the run ran (ssh-keygen -Y sign; default: unsigned)",
        "replace": "replace an existing bundle of the run that says something else (recorded in the new one; "
        "default: refuse)",
    }
)
def collect(c: Context, run_dir: str, evidence: str = "", sign: str = "", replace: bool = False) -> None:
    """Write sanitized <evidence>/<run-id>/ (summary.json, summary.md, excerpts, PNGs) for a run."""
    if _asked_for_help("collect", run_dir):
        return
    from atomdyn_launchers.evidence import cli

    _done(
        lambda: cli.collect(
            Path(run_dir), Path(evidence) if evidence else None, Path(sign) if sign else None, replace
        )
    )


@task(
    help={
        "path": "a run directory or an evidence/<run-id> directory",
        "signer": "require the evidence to be signed by a key in this file (public keys or allowed signers; "
        "default: the signature is not checked)",
    }
)
def verify(c: Context, path: str, signer: str = "") -> None:
    """Judge a run's validity gates, or check collected evidence; fails naming each failed gate."""
    if _asked_for_help("verify", path):
        return
    from atomdyn_launchers.evidence import cli

    _done(lambda: cli.verify([Path(path)], Path(signer) if signer else None))


@task(
    help={
        "evidence": "evidence root",
        "results": "the RESULTS.md to append",
        "readme": "README to update ('' for none)",
        "allowed_signers": "the allowed-signers file whose keys make a hardware row a result (default: "
        "evidence/allowed_signers; an unsigned hardware row goes to the unverified claims' table)",
    }
)
def report(
    c: Context,
    evidence: str = "evidence",
    results: str = "results/RESULTS.md",
    readme: str = "README.md",
    allowed_signers: str = "evidence/allowed_signers",
) -> None:
    """Append new runs to results/RESULTS.md and merge them into the README's "Result at a glance"."""
    from atomdyn_launchers.evidence import cli

    _done(
        lambda: cli.report(
            Path(evidence),
            Path(results),
            Path(readme) if readme else None,
            Path(allowed_signers) if allowed_signers else None,
        )
    )


@task(help={"path": "any text file (a log, a job script, run.json)"})
def sanitize(c: Context, path: str) -> None:
    """Print the sanitized text of a file."""
    if _asked_for_help("sanitize", path):
        return
    from atomdyn_launchers.evidence import cli

    _done(lambda: cli.print_sanitized(Path(path)))


@task(help={"size_mb": "size of the generated log in MiB"})
def bench(c: Context, size_mb: int = 512) -> None:
    """Parsing bench: MB/s and peak memory over a generated log."""
    from atomdyn_launchers.evidence.bench import main

    _done(lambda: main(["--size-mb", str(size_mb)]))


ns = Collection("evidence")
for _task in (collect, verify, report, sanitize, bench):
    ns.add_task(_task)
