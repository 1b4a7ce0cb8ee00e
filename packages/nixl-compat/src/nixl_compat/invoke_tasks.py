"""The invoke collection ``nixl``: ``invoke nixl.doctor`` and ``invoke nixl.bench`` (the CLI's exit codes)."""

from __future__ import annotations

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task


def _run(argv: list[str]) -> None:
    from nixl_compat.cli import main  # at run time: listing the tasks loads no NIXL

    code = main(argv)
    if code != 0:
        raise Exit(code=code)


@task(
    help={
        "json": "print the JSON report",
        "device": "auto | cpu | cuda",
        "expect": "interface UCX should use (default: no expectation)",
    }
)
def doctor(c: Context, json: bool = False, device: str = "auto", expect: str = "") -> None:
    """Which NIXL backend serves `rixl`, which UCX, which transports it used, and the known traps."""
    _run(
        [
            "doctor",
            f"--device={device}",
            *(["--json"] if json else []),
            *([f"--expect-net-device={expect}"] if expect else []),
        ]
    )


@task(
    help={
        "quick": "correctness run (seconds)",
        "device": "cpu | cuda",
        "out": "directory for bench.json and bench.png (default: print only)",
    }
)
def bench(c: Context, quick: bool = False, device: str = "cpu", out: str = "") -> None:
    """KV-transfer bench: naive vs best NIXL path vs raw copy, NIXL's defaults against the tuned settings."""
    args = ["bench", f"--device={device}", *(["--quick"] if quick else [])]
    if out:
        args += [f"--json={out}/bench.json", f"--plot={out}/bench.png"]
    _run(args)


ns = Collection("nixl", doctor, bench)
