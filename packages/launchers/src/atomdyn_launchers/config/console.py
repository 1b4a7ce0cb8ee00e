"""The config CLIs' standard output: a reader that goes away (``| head -0``) ends the command with status 1
and no traceback, ``--help`` included, as the invoke tasks do (``tasks.py``); a stdout closed from the start
(``>&-``, ``sys.stdout`` is None) is not written to at all."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec

from atomdyn_core.console import stdout_gone

P = ParamSpec("P")


def quiet_stdout(main: Callable[P, int]) -> Callable[P, int]:
    """``main`` that flushes its output before returning (also after argparse's SystemExit) and returns 1,
    quietly, when the pipe it writes into has closed."""

    @functools.wraps(main)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:
                if sys.stdout is not None:
                    sys.stdout.flush()
        except BrokenPipeError:
            stdout_gone()  # the interpreter's last flush then writes what is left to /dev/null
            return 1

    return wrapper
