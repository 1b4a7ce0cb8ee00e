"""Console-script plumbing: a reader that goes away (`atomdyn-lock table | head -1`) is not an error to report."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")


def stdout_gone() -> None:
    """Point stdout at /dev/null, so that no later write or the interpreter's final flush fails again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def quiet_broken_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """A console script's ``main`` that ends with status 1 and no traceback when its output pipe closes
    (the Python documentation's recipe for SIGPIPE)."""

    @functools.wraps(main)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            try:
                return main(*args, **kwargs)
            finally:
                sys.stdout.flush()  # also after SystemExit (argparse's --help): the pipe may be closed
        except BrokenPipeError:
            stdout_gone()
            return 1

    return wrapper
