"""The exit-code contract shared by the native program and the CLI (documented in docs/mori-path.md)."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    FIXED_CONFIRMED = 0  # the exporter's offset landed correctly and offset 0 did no harm (or was not run)
    INTERNAL_ERROR = 1  # an API that should work failed, or the program's output could not be read
    USAGE = 2  # bad arguments
    BUG_REPRODUCED = 10  # offset 0 misdirected the transfer (and the exporter's offset, when run, fixed it)
    FIX_NOT_CONFIRMED = 11  # the exporter's offset itself did not land correctly
    ENVIRONMENT = 20  # no GPU runtime, no usable RDMA device, or no dma-buf support: the message says which

    @property
    def verdict(self) -> str:
        return _VERDICTS[self]


_VERDICTS = {
    ExitCode.FIXED_CONFIRMED: "fixed-behaviour-confirmed",
    ExitCode.INTERNAL_ERROR: "internal-error",
    ExitCode.USAGE: "usage-error",
    ExitCode.BUG_REPRODUCED: "bug-reproduced",
    ExitCode.FIX_NOT_CONFIRMED: "fix-not-confirmed",
    ExitCode.ENVIRONMENT: "environment-cannot-run",
}
