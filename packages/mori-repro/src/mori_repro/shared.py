"""The project's one sanitizer and its atomic writes, as this package ships them.

A node installs the mori-repro wheel alone, so the wheel carries atomdyn_core's modules (the sanitizer, atomic writes, console plumbing, bounded JSON reading)
(standard library only) under `mori_repro/_core`, copied by the build from packages/core (or from the sdist,
which carries them): the bundle is sanitized by the same code as every other piece of evidence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same modules, type-checked where they live
    from atomdyn_core.atomic import atomic_write_text
    from atomdyn_core.console import quiet_broken_pipe
    from atomdyn_core.jsonload import JSONNestingError, loads_bounded
    from atomdyn_core.sanitize import Sanitizer
else:
    from mori_repro._core.atomic import atomic_write_text
    from mori_repro._core.console import quiet_broken_pipe
    from mori_repro._core.jsonload import JSONNestingError, loads_bounded
    from mori_repro._core.sanitize import Sanitizer

__all__ = ["JSONNestingError", "Sanitizer", "atomic_write_text", "loads_bounded", "quiet_broken_pipe"]
