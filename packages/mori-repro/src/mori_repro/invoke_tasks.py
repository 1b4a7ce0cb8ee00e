"""The invoke collection ``mori``: ``invoke mori.run`` and ``invoke mori.report`` (the CLI's exit codes).

Nothing here imports the package at load time: `invoke --list` works in a checkout where it is not built.
"""

from __future__ import annotations

from invoke.collection import Collection
from invoke.context import Context
from invoke.exceptions import Exit
from invoke.tasks import task

_HELP = {
    "backend": "auto | hsa | cuda",
    "device": "RDMA device, e.g. ionic_0 (default: the first)",
    "gid_index": "GID index: the port's IPv4 RoCE v2 GID (ibv_devinfo -v lists them; default 1)",
    "mode": "both | bug | fix",
}


def _main(argv: list[str]) -> None:
    try:
        from mori_repro.cli import main
    except ImportError as exc:
        raise Exit(
            f"mori-repro is not built here ({exc}): `pip install ./packages/mori-repro` builds and installs it",
            code=2,
        ) from None
    code = main(argv)
    if code != 0:
        raise Exit(code=code)


def _options(backend: str, device: str, gid_index: int, mode: str) -> list[str]:
    args = [f"--backend={backend}", f"--gid-index={gid_index}", f"--mode={mode}"]
    return args + ([f"--device={device}"] if device else [])


@task(help={**_HELP, "json": "print the JSON report"})
def run(
    c: Context,
    backend: str = "auto",
    device: str = "",
    gid_index: int = 1,
    mode: str = "both",
    json: bool = False,
) -> None:
    """Register a sub-allocation with offset 0 and with the exporter's offset; check where the bytes land."""
    _main(["run", *(["--json"] if json else []), *_options(backend, device, gid_index, mode)])


@task(
    help={
        **_HELP,
        "out": "bundle directory (default: ./mori-repro-report-<UTC time>)",
        "result": "reuse this `mori-repro run --json` output instead of running (default: run)",
    }
)
def report(
    c: Context,
    backend: str = "auto",
    device: str = "",
    gid_index: int = 1,
    mode: str = "both",
    out: str = "",
    result: str = "",
) -> None:
    """Write the sanitized bug-report bundle (report.md, result.json, system.json)."""
    extra = [*([f"--out={out}"] if out else []), *([f"--result={result}"] if result else [])]
    _main(["report", *extra, *_options(backend, device, gid_index, mode)])


ns = Collection("mori")
ns.add_task(run)
ns.add_task(report)
