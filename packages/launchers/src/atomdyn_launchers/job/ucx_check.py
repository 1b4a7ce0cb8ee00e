"""UCX's own ``ucx_info`` on a worker's exact UCX variables, before any model loads: a UCP context and an
endpoint to a peer on another node are made with them, and what UCX printed is judged
(:mod:`atomdyn_launchers.job.ucx_info`). A problem names the variable to change.

Two callers: the node check (:mod:`atomdyn_launchers.job.node_check`, the ``ucx`` row: it runs ``ucx_info``
itself, in the venv or the image) and the cross-node NIXL probe's jobs, whose prelude runs ``ucx_info`` in the
worker's runtime with the worker's environment and then judges the captured output with
``python -m atomdyn_launchers.job.ucx_check OUTPUT --json REPORT --env NAME=VALUE ...`` (exit 3 on a problem).
Standard library only: it runs with the node's Python.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_launchers.job import ucx_info
from atomdyn_launchers.job.rdmaports import SYSFS_IB, rdma_ports

MODULE = "atomdyn_launchers.job.ucx_check"
TOOL = "ucx_info"
# -v the version, -c UCX's configuration as it read it, -p the UCP context's resources after UCX_TLS and the
# device lists filtered them, -e -u t -P inter an endpoint (tag matching) to a peer on another node.
ARGS = ("-v", "-c", "-p", "-e", "-u", "t", "-P", "inter")
TIMEOUT_S = 60.0
# The kernel configuration UCX reads ROCm dma-buf support from (src/uct/rocm/base/rocm_base.c at the pin).
BOOT_CONFIG = "/boot/config-{release}"


def roce_v2_map(root: Path = SYSFS_IB) -> dict[str, list[int]]:
    """``device:port`` -> the indexes of its RoCE v2 GIDs, every RDMA port of the node."""
    return {f"{p.device}:{p.port}": [i for i, _, _ in p.roce_v2] for p in rdma_ports(root)}


@dataclass(frozen=True)
class UcxVerdict:
    ok: bool
    summary: str
    problems: tuple[ucx_info.Problem, ...]
    env: Mapping[str, str]

    def detail(self) -> str:
        if self.ok:
            return self.summary
        return "; ".join(p.text() for p in self.problems) + f" [{self.summary}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "summary": self.summary,
            "problems": [{"variable": p.variable, "message": p.message} for p in self.problems],
            "env": dict(self.env),
        }


def judge_output(
    text: str, env: Mapping[str, str], roce_v2: Mapping[str, Sequence[int]] | None = None
) -> UcxVerdict:
    info = ucx_info.parse(text)
    if info.version is None and not info.config and not info.resources and not info.logs:
        # ucx_info did not run (not installed where the workers run, or it hung): nothing of UCX to judge.
        problems = [ucx_info.Problem("PATH", "ucx_info printed nothing UCX prints: " + _tail(text))]
    else:
        problems = ucx_info.judge(info, env, roce_v2)
    return UcxVerdict(not problems, ucx_info.summary(info), tuple(problems), dict(env))


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-3:]) or "(no output)"


def run_ucx_info(
    command: Sequence[str], env: Mapping[str, str], timeout_s: float = TIMEOUT_S
) -> tuple[int | None, str]:
    """``command`` (a ucx_info with ARGS, possibly inside a container) with ``env`` added: its exit status (None:
    it could not start or hung) and its output, both streams in order."""
    try:
        done = subprocess.run(
            list(command), env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
    except FileNotFoundError as exc:
        return None, f"<cannot run {command[0]}: {exc}>"
    except subprocess.TimeoutExpired:
        return None, f"<{command[0]} did not finish in {timeout_s:g} s>"
    return done.returncode, done.stdout


# nixl_compat.ucpinfo: ucx_info's calls through the libucp a NIXL wheel bundles (it ships no ucx_info); exit 2
# when the venv has no such library.
WHEEL_DRIVER = ("-m", "nixl_compat.ucpinfo")
NO_LIBRARY = 2


def venv_commands(venv: str) -> list[tuple[list[str], str]]:
    """How to ask the UCX a venv's workers load, best first, each with what it is: the venv's ucx_info, else
    its NIXL wheel's bundled UCX through ``nixl_compat.ucpinfo``, else the node's ucx_info (the same variables
    on another build of UCX: docs/nixl-path.md says what that proves)."""
    own = Path(venv) / "bin" / TOOL
    python = Path(venv) / "bin" / "python"
    out: list[tuple[list[str], str]] = []
    if os.access(own, os.X_OK):
        out.append(([str(own), *ARGS], f"with {own}"))
    if os.access(python, os.X_OK):
        out.append(([str(python), *WHEEL_DRIVER], f"with {venv}'s NIXL wheel's UCX (nixl_compat.ucpinfo)"))
    out.append(([TOOL, *ARGS], f"with the node's ucx_info ({venv} has none)"))
    return out


# In an image: its ucx_info (on PATH, or where the NIXL overlay installs UCX), else its NIXL wheel's UCX; a
# marker line and status 127 when it has neither. Run as ``sh -c IN_IMAGE ucx_info ARGS...``.
NO_TOOL = "<no ucx_info>"
IN_IMAGE = (
    'for t in ucx_info /opt/ucx/bin/ucx_info; do if command -v "$t" >/dev/null 2>&1; then exec "$t" "$@"; fi; '
    "done; if python3 -c 'import nixl_compat.ucpinfo' 2>/dev/null; then exec python3 -m nixl_compat.ucpinfo; fi; "
    f"echo '{NO_TOOL}'; exit 127"
)


def in_image() -> list[str]:
    """The command a container runs for the UCX check (see IN_IMAGE)."""
    return ["sh", "-c", IN_IMAGE, TOOL, *ARGS]


@dataclass(frozen=True)
class Answer:
    text: str  # what UCX printed
    where: str  # which UCX answered, in words
    found: bool  # False: no ucx_info (nor a wheel's UCX) where the workers run; nothing was asked


def run_first(candidates: Sequence[tuple[Sequence[str], str]], env: Mapping[str, str]) -> Answer:
    """The output of the first candidate that reaches a UCX (the wheel driver exits 2 without a library)."""
    text, label = NO_TOOL, "nothing"
    for command, label in candidates:
        code, text = run_ucx_info(command, env)
        if code == NO_LIBRARY and list(command[-2:]) == list(WHEEL_DRIVER):
            continue
        found = code is not None and not (code == 127 and NO_TOOL in text)
        return Answer(text, label, found)
    return Answer(text, label, False)


def boot_config() -> tuple[str | None, str]:
    """(the kernel configuration file a job would mount, or None; the path UCX reads): UCX reads ROCm dma-buf
    support only from /boot/config-$(uname -r), and the ROCm path's jobs mount the node's file there, taking
    /lib/modules/<release>/config where /boot has none."""
    release = os.uname().release
    wanted = BOOT_CONFIG.format(release=release)
    for path in (wanted, f"/lib/modules/{release}/config"):
        if os.path.isfile(path):
            return path, wanted
    return None, wanted


def _env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--env takes NAME=VALUE, not {pair!r}")
        env[name] = value
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=MODULE, description="judge a ucx_info output against the worker's UCX"
    )
    parser.add_argument("output", type=Path, help="what ucx_info " + " ".join(ARGS) + " printed")
    parser.add_argument("--json", type=Path, required=True, help="where the verdict is written")
    parser.add_argument("--env", action="append", default=[], help="the worker's UCX variables, NAME=VALUE")
    parser.add_argument("--sysfs", type=Path, default=SYSFS_IB, help="the RDMA ports' sysfs")
    args = parser.parse_args(argv)
    try:
        text = args.output.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        text = f"<no ucx_info output: {exc}>"
    verdict = judge_output(text, _env_pairs(args.env), roce_v2_map(args.sysfs))
    atomic_write_json(args.json, verdict.to_json())
    print(("ucx check passed: " if verdict.ok else "ucx check FAILED: ") + verdict.detail())
    return 0 if verdict.ok else 3


if __name__ == "__main__":
    sys.exit(main())
