"""The invoke collection ``dmabuf``: ``invoke dmabuf.env [--check]`` and ``invoke dmabuf.bench`` (the CLI's exit codes).

Nothing here imports the package at load time: `invoke --list` works in a checkout where it is not built.
"""

from __future__ import annotations

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task


def _run(args: list[str]) -> None:
    try:
        from dmabuf_shim.cli import main
    except ImportError as exc:
        raise Exit(
            f"dmabuf-shim is not built here ({exc}): `pip install ./packages/dmabuf-shim` builds and installs it",
            code=2,
        ) from None
    try:
        code = main(args)
    except SystemExit as exc:  # argparse errors and a broken installation
        if isinstance(exc.code, int):
            code = exc.code
        else:
            raise Exit(message=str(exc.code), code=1) from exc
    if code != 0:
        raise Exit(code=code)


@task(help={"check": "load the library in a child process and report what it finds"})
def env(c: Context, check: bool = False) -> None:
    """Print the LD_PRELOAD=... line for the installed dmabuf-shim library."""
    _run(["env", *(["--check"] if check else [])])


@task(help={"iterations": "calls per round", "rounds": "rounds (the best is reported)"})
def bench(c: Context, iterations: int = 2_000_000, rounds: int = 5) -> None:
    """ns per host-memory registration added by the shim (passthrough), with and without GPU runtimes."""
    _run(["bench", "--iterations", str(iterations), "--rounds", str(rounds)])


ns = Collection("dmabuf", env, bench)
