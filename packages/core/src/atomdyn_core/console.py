"""Console-script plumbing: a reader that goes away (`atomdyn-lock table | head -1`) is not an error to report,
and neither is a closed stdout (`atomdyn-lock verify >&-`) a reason for a traceback."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")


def _stdout_fd() -> int:
    try:
        return sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # None (fd 1 closed at start-up), or a replaced stream
        return 1


def stdout_closed() -> bool:
    """True when the process started without a stdout (`>&-`): Python then sets ``sys.stdout`` to None."""
    return sys.stdout is None


def stdout_gone() -> None:
    """Point stdout at /dev/null, so that no later write or the interpreter's final flush fails again.

    With no stdout at all (`>&-`) it gives fd 1 a /dev/null and ``sys.stdout`` a stream on it: a file the
    command opens next cannot become fd 1, and a child it starts does not inherit a closed stdout."""
    fd = _stdout_fd()
    devnull = os.open(os.devnull, os.O_WRONLY)
    if devnull != fd:
        os.dup2(devnull, fd)
        os.close(devnull)
    if sys.stdout is None:
        sys.stdout = open(fd, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (lives as long as the process)


def _program() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] not in ("", "-c") else ""
    return name or "python"


def quiet_broken_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """A console script's ``main`` that ends with status 1 and no traceback when its output pipe closes
    (the Python documentation's recipe for SIGPIPE), or when it was started with stdout closed (then with
    one line on stderr saying so, whether it ran a command or printed --help)."""

    @functools.wraps(main)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> int:
        closed = stdout_closed()
        if closed:
            stdout_gone()
        try:
            try:
                code = main(*args, **kwargs)
            finally:
                sys.stdout.flush()  # also after SystemExit (argparse's --help): the pipe may be closed
        except BrokenPipeError:
            stdout_gone()
            return 1
        except SystemExit as exc:
            if not closed or exc.code not in (0, None):
                raise
            code = 0
        if closed:
            if sys.stderr is not None:
                print(f"{_program()}: stdout is closed: the output went nowhere", file=sys.stderr)
            return code or 1
        return code

    return wrapper
