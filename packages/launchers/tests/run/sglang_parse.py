"""Parse worker command lines with the pinned SGLang's and Dynamo's own parsers; run by .venv-sglang's Python.

stdin: a JSON list of argument lists (what follows ``-m dynamo.sglang`` in a job script). stdout: a JSON list, one
object per argument list:

- ``sglang``: SGLang 0.5.14's parser (``ServerArgs.add_cli_args`` on an ``argparse`` parser, then ``parse_args``,
  strict: an unknown flag or a value outside a flag's choices exits 2), with the values of the fields in
  ``FIELDS`` as parsed, or the parser's error;
- ``server_args``: ``ServerArgs.from_cli_args`` on that namespace: how far SGLang's own validation went (its
  ``__post_init__`` checks the disaggregation flags before anything needs a model or a device), as the exception
  it stopped with and the functions it stopped in;
- ``dynamo``: Dynamo 1.3.0.post1's ``dynamo.sglang.args.parse_args`` on the same list (its own and the runtime's
  flags, then SGLang's parser, the bootstrap port, the endpoint), likewise.

Nothing is stubbed: on a machine without an accelerator ``from_cli_args`` stops where SGLang asks for the
device (``get_device``), which the caller checks is the first step that needs one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import sys
import traceback
from typing import Any

FIELDS = (
    "model_path",
    "served_model_name",
    "tp_size",
    "max_running_requests",
    "enable_metrics",
    "kv_events_config",
    "disaggregation_mode",
    "disaggregation_transfer_backend",
    "disaggregation_bootstrap_port",
    "disaggregation_ib_device",
    "kv_canary",
    "kv_canary_real_data",
    "cuda_graph_backend_prefill",
)


def _stopped(exc: BaseException) -> dict[str, Any]:
    frames = [frame.name for frame in traceback.extract_tb(exc.__traceback__)]
    return {"exception": type(exc).__name__, "message": str(exc), "frames": frames}


def _sglang(argv: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang")
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            namespace = parser.parse_args(argv)
    except SystemExit as exc:
        return {
            "sglang": {"ok": False, "status": exc.code, "error": err.getvalue().strip().splitlines()[-1:]}
        }
    out: dict[str, Any] = {"sglang": {"ok": True, **{f: getattr(namespace, f) for f in FIELDS}}}
    try:
        ServerArgs.from_cli_args(namespace)
        out["server_args"] = {"exception": None}
    except BaseException as exc:  # reported: the caller judges where it stopped
        out["server_args"] = _stopped(exc)
    return out


def _dynamo(argv: list[str]) -> dict[str, Any]:
    from dynamo.sglang.args import parse_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            asyncio.run(parse_args(list(argv)))
        return {"exception": None}
    except SystemExit as exc:
        return {
            "exception": "SystemExit",
            "status": exc.code,
            "error": err.getvalue().strip().splitlines()[-1:],
        }
    except BaseException as exc:  # reported: the caller judges where it stopped
        return _stopped(exc)


def main() -> int:
    results = []
    for argv in json.load(sys.stdin):
        result = _sglang(argv)
        result["dynamo"] = _dynamo(argv)
        results.append(result)
    json.dump(results, sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
