"""``invoke diagnose RUN_DIR`` (or ``invoke diagnose --log FILE``, any log): the catalog's findings, the first
cause first, with the line, its file and line number, the cause, the fix and the command that reruns the failed
step; ``--json`` for tools. Exit 0 when it read what it was given (whether or not a signature matched), 2 when it
could not."""

from __future__ import annotations

import json as jsonlib
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

if TYPE_CHECKING:  # the catalog is read when the task runs: every `invoke` call loads this module
    from atomdyn_launchers.diagnose.scan import Diagnosis


def _diagnosis(path: str, log: bool) -> Diagnosis:
    from atomdyn_launchers.diagnose.scan import diagnose_log, diagnose_run

    target = Path(path)
    try:
        mode = target.stat().st_mode
    except OSError as exc:
        raise Exit(f"error: {path}: {exc.strerror or exc}", code=2) from None
    if stat.S_ISDIR(mode) and not log:
        return diagnose_run(target)
    if not stat.S_ISREG(mode):
        raise Exit(f"error: {path}: not a {'regular file' if log else 'run directory or a log file'}", code=2)
    try:
        return diagnose_log(target)
    except OSError as exc:
        raise Exit(f"error: {path}: {exc.strerror or exc}", code=2) from None


@task(
    help={
        "path": "a runs/<run-id> directory (its run.json, timeline and every log under logs/ and nixl/), or a log",
        "log": "PATH is one log file of any origin",
        "json": "print the diagnosis as JSON",
    }
)
def diagnose(c: Context, path: str, log: bool = False, json: bool = False) -> None:
    """Why a run failed: known failure signatures matched in its logs, ranked, each with cause and fix."""
    found = _diagnosis(path, log)
    if json:
        print(jsonlib.dumps(found.to_json(), indent=2))
    else:
        print(found.text(), end="")
