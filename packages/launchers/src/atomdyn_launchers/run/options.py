"""What a run is asked to do, typed from the command line to the stages.

The invoke flags arrive as :class:`Flags` (numbers parsed here, once, naming the flag that was bad), a recipe
(if any) gives the rest, and :func:`resolve` merges them into one frozen :class:`LaunchOptions`: a flag given
explicitly wins over the recipe's value, and the recipe is kept in the options so the run records it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from atomdyn_launchers.config.recipes import (
    MAX_CONCURRENCY,
    MAX_REQUESTS,
    MockerTiming,
    Recipe,
    RecipeError,
)
from atomdyn_launchers.slurm.client import AllocationFlagError
from atomdyn_launchers.slurm.client import parse_allocation as slurm_allocation

DEFAULT_REQUESTS = {"agg-single": 8, "agg-two": 32, "disagg": 32}
DEFAULT_CONCURRENCY = 8
DEFAULT_MAX_TOKENS = 32


class OptionError(ValueError):
    """A flag's value, or a flag against the recipe, is wrong; the message names the flag."""


@dataclass(frozen=True)
class LaunchOptions:
    kind: str
    engine: str | None = None  # default: the config's ENGINE_PROFILE
    model: str | None = None  # default: the engine's default model profile
    requests: int | None = None  # default: DEFAULT_REQUESTS[kind]
    concurrency: int = DEFAULT_CONCURRENCY
    max_tokens: int = DEFAULT_MAX_TOKENS
    prompt_groups: int = 4
    ready_timeout_s: float | None = None  # default: the engine's timeouts.ready_s
    # From the frontend listing every worker to the first verified response; default: the engine's
    # timeouts.first_response_s (None there: the readiness budget alone).
    first_response_timeout_s: float | None = None
    settle_timeout_s: float | None = None  # default: the engine's timeouts.settle_s
    request_timeout_s: float = 120.0
    time_limit: str | None = None  # default: the engine's timeouts.time_limit (Slurm's --time)
    speedup_ratio: float = 10.0
    runs_root: Path | None = None  # default: <SHARED_DIR>/runs
    lock_path: Path | None = None
    node_check: bool = True  # nodes.check on the run's nodes before submitting (--skip-node-check)
    # xPyD: workers per role of a disaggregated run, each its own job on its own node.
    prefill_workers: int = 1
    decode_workers: int = 1
    nodes: tuple[str, ...] = ()  # placement order (prefill, then decode); default: from the config
    router_mode: str = "kv"  # the frontend's --router-mode
    kv_transfer_bandwidth_gbps: float | None = None  # the mock engine's KV transfer model
    kv_bytes_per_token: int | None = None
    recipe: Recipe | None = None  # the recipe these options came from (recorded in recipe.json)
    offline: bool = False  # dry run only: skip the preflight (an offline review; nothing checked)
    # Set: every role starts as a job step of this allocation (srun --jobid), not as a batch job of its own.
    allocation: int | None = None
    allocation_detected: bool = False  # the allocation came from the environment (salloc), not --allocation

    def resolved_requests(self) -> int:
        return self.requests if self.requests is not None else DEFAULT_REQUESTS[self.kind]


@dataclass(frozen=True)
class Flags:
    """The run options a command line gave explicitly; None: not given (the recipe's value or the default)."""

    engine: str | None = None
    model: str | None = None
    requests: int | None = None
    concurrency: int | None = None
    ready_timeout_s: float | None = None
    first_response_timeout_s: float | None = None
    node_check: bool = True
    offline: bool = False
    allocation: int | None = None
    allocation_detected: bool = False

    @classmethod
    def parse(
        cls,
        *,
        engine: str | None = None,
        model: str | None = None,
        requests: object = None,
        concurrency: object = None,
        ready_timeout: object = None,
        first_response_timeout: object = None,
        node_check: bool = True,
        offline: bool = False,
        allocation: object = None,
        environ: Mapping[str, str] | None = None,
    ) -> Flags:
        """The flags from text or numbers (invoke hands an option whose default is None over as text), within
        the bounds the recipe's smoke section has. ``environ``: where an allocation is detected when
        ``--allocation`` is not given (:func:`parse_allocation`); None detects none."""
        job, detected = parse_allocation(allocation, environ or {})
        return cls(
            engine=engine or None,
            model=model or None,
            requests=_within("requests", parse_int("requests", requests), MAX_REQUESTS),
            concurrency=_within("concurrency", parse_int("concurrency", concurrency), MAX_CONCURRENCY),
            ready_timeout_s=_seconds("ready-timeout", parse_seconds("ready-timeout", ready_timeout)),
            first_response_timeout_s=_seconds(
                "first-response-timeout", parse_seconds("first-response-timeout", first_response_timeout)
            ),
            node_check=node_check,
            offline=offline,
            allocation=job,
            allocation_detected=detected,
        )


def parse_allocation(value: object, environ: Mapping[str, str]) -> tuple[int | None, bool]:
    """:func:`atomdyn_launchers.slurm.client.parse_allocation` (the nodes' tasks share it), a bad value an
    OptionError."""
    try:
        return slurm_allocation(value, environ)
    except AllocationFlagError as exc:
        raise OptionError(str(exc)) from None


def parse_int(flag: str, value: object) -> int | None:
    """``value`` as an integer (None stays None); an error naming ``--flag`` when it is not one."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    try:
        return int(str(value))
    except ValueError:
        raise OptionError(f"--{flag} must be a number, not {value!r}") from None


def parse_seconds(flag: str, value: object) -> float | None:
    """``value`` as seconds (None stays None); an error naming ``--flag`` when it is not a number."""
    if value is None or isinstance(value, float):
        return value
    try:
        return float(str(value))
    except ValueError:
        raise OptionError(f"--{flag} must be a number, not {value!r}") from None


def _within(flag: str, value: int | None, maximum: int) -> int | None:
    if value is not None and not 1 <= value <= maximum:
        raise OptionError(f"--{flag} must be 1 to {maximum}, not {value}")
    return value


def _seconds(flag: str, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise OptionError(f"--{flag} must be a finite number of seconds above 0, not {value}")
    return value


def _given(flag: int | None, recipe: int | None, default: int) -> int:
    if flag is not None:
        return flag
    return recipe if recipe is not None else default


def resolve(command: str, kind: str | None, flags: Flags, recipe: Recipe | None = None) -> LaunchOptions:
    """The options of ``invoke <command>.run``: ``kind`` (None: the recipe's, else ``command``), the recipe's
    values under the flags given explicitly. ``command`` is ``agg`` or ``disagg``: a recipe of the other kind is
    refused (the command is how the run is asked for)."""
    if recipe is None:
        return LaunchOptions(
            kind=kind or command,
            engine=flags.engine,
            model=flags.model,
            requests=flags.requests,
            concurrency=_given(flags.concurrency, None, DEFAULT_CONCURRENCY),
            ready_timeout_s=flags.ready_timeout_s,
            first_response_timeout_s=flags.first_response_timeout_s,
            node_check=flags.node_check,
            offline=flags.offline,
            allocation=flags.allocation,
            allocation_detected=flags.allocation_detected,
        )
    if recipe.kind != command:
        raise RecipeError(
            f"{recipe.source}: a kind {recipe.kind} recipe; run it with `invoke {recipe.kind}.run --recipe`"
        )
    if kind is not None and kind != recipe.run_kind():
        raise OptionError(f"--nodes asks for {kind}, the recipe {recipe.source} for {recipe.run_kind()}")
    mocker = recipe.mocker or MockerTiming()
    return LaunchOptions(
        kind=recipe.run_kind(),
        engine=flags.engine or recipe.engine,
        model=flags.model or recipe.model,
        requests=flags.requests if flags.requests is not None else recipe.requests,
        concurrency=_given(flags.concurrency, recipe.concurrency, DEFAULT_CONCURRENCY),
        max_tokens=_given(None, recipe.max_tokens, DEFAULT_MAX_TOKENS),
        ready_timeout_s=flags.ready_timeout_s,
        first_response_timeout_s=flags.first_response_timeout_s,
        time_limit=recipe.time_limit,
        speedup_ratio=mocker.speedup_ratio,
        node_check=flags.node_check,
        prefill_workers=recipe.prefill.workers if recipe.prefill is not None else 1,
        decode_workers=recipe.decode.workers if recipe.decode is not None else 1,
        nodes=recipe.nodes,
        router_mode=recipe.router_mode,
        kv_transfer_bandwidth_gbps=mocker.kv_transfer_bandwidth_gbps,
        kv_bytes_per_token=mocker.kv_bytes_per_token,
        recipe=recipe,
        offline=flags.offline,
        allocation=flags.allocation,
        allocation_detected=flags.allocation_detected,
    )
