"""The verdict of a loopback result, recomputed from what the run observed.

`mori-repro report --result FILE` takes a result written elsewhere; its ``verdict``, ``exit_code`` and
``summary`` are claims, the observations (what each registration did, the completions, the bytes found in GPU
memory, what the environment lacked) are the evidence. These are the native program's rules
(``native/main.cpp``: the outcome at the end of ``Repro::run_mode`` and ``Repro::verdict``) in Python; the
tests check every result the program writes against them, so the two cannot drift apart unseen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mori_repro.exitcodes import ExitCode

# Which registrations a --mode runs, in order, and the name each has in the result.
PLANS: Mapping[str, tuple[str, ...]] = {"both": ("bug", "fix"), "bug": ("bug",), "fix": ("fix",)}
MODE_NAMES: Mapping[str, str] = {"bug": "offset-0", "fix": "exporter-offset"}
# How the native program's summary of each verdict begins.
SUMMARY_PREFIXES: Mapping[ExitCode, tuple[str, ...]] = {
    ExitCode.FIXED_CONFIRMED: ("fixed behaviour confirmed: ", "bug not reproduced: "),
    ExitCode.BUG_REPRODUCED: ("bug reproduced: ",),
    ExitCode.FIX_NOT_CONFIRMED: ("fix not confirmed: ",),
    ExitCode.ENVIRONMENT: ("environment cannot run this reproducer: ",),
    ExitCode.INTERNAL_ERROR: ("internal error: ",),
}
SUCCESS = "IBV_WC_SUCCESS"


class ResultError(ValueError):
    """Not what `mori-repro run --json` writes, or a verdict its own observations do not give."""


@dataclass(frozen=True)
class Recomputed:
    code: ExitCode
    reasons: tuple[str, ...]  # why, where the observations disagree with what the result says


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _field(obj: Mapping[str, Any], key: str, path: str, kinds: tuple[type, ...], what: str) -> Any:
    value = obj.get(key)
    if not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool)):
        raise ResultError(f"{path}.{key}: expected {what}, got {_kind(value)} {value!r:.80}")
    return value


def _object(obj: Mapping[str, Any], key: str, path: str, *, optional: bool = False) -> dict[str, Any] | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise ResultError(
            f"{path}.{key}: expected an object{' or null' if optional else ''}, got {_kind(value)}"
        )
    return value


def _objects(obj: Mapping[str, Any], key: str, path: str) -> list[dict[str, Any]]:
    value = _field(obj, key, path, (list,), "a list")
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise ResultError(f"{path}.{key}[{index}]: expected an object, got {_kind(item)} {item!r:.80}")
    return value  # type: ignore[no-any-return]


def _completed_ok(completion: Mapping[str, Any] | None) -> bool:
    return (
        completion is not None and completion.get("completed") is True and completion.get("status") == SUCCESS
    )


def mode_outcome(mode: Mapping[str, Any], path: str) -> str:
    """``run_mode``'s outcome: rejected, a failed completion, or where the bytes went."""
    registration = _field(mode, "registration", path, (str,), "'ok' or 'failed'")
    if registration not in ("ok", "failed"):
        raise ResultError(f"{path}.registration: expected 'ok' or 'failed', got {registration!r:.80}")
    if registration == "failed":
        return "registration-rejected"
    write = _object(mode, "write", path)
    read = _object(mode, "read", path, optional=True)
    if not (_completed_ok(write) and _completed_ok(read)):
        return "completion-error"
    seen = [
        _field(mode, key, path, (bool,), "true or false")
        for key in ("sentinel_intact", "data_at_sub_allocation", "readback_matches")
    ]
    return "correct" if all(seen) else "misdirected"


def _from_outcomes(outcomes: Mapping[str, str]) -> ExitCode:
    """``Repro::verdict``: the exporter's offset must land; offset 0 landing elsewhere is the bug."""
    if "fix" in outcomes and outcomes["fix"] != "correct":
        return ExitCode.FIX_NOT_CONFIRMED
    if "bug" in outcomes and outcomes["bug"] != "correct":
        return ExitCode.BUG_REPRODUCED
    return ExitCode.FIXED_CONFIRMED


def recompute(result: Mapping[str, Any]) -> Recomputed:
    """The verdict the result's observations give; raises `ResultError` where its shape is not a result's."""
    exit_code = _field(result, "exit_code", "$", (int,), "an integer")
    _field(result, "verdict", "$", (str,), "a string")
    summary = _field(result, "summary", "$", (str,), "a string")
    environment = _object(result, "environment", "$")
    assert environment is not None
    missing = _objects(environment, "missing", "$.environment")
    for index, item in enumerate(missing):
        for key in ("component", "detail"):
            _field(item, key, f"$.environment.missing[{index}]", (str,), "a string")
    config = _object(result, "config", "$")
    assert config is not None
    plan_name = _field(config, "mode", "$.config", (str,), "a string")
    if plan_name not in PLANS:
        raise ResultError(f"$.config.mode: expected one of {', '.join(PLANS)}, got {plan_name!r:.80}")
    for key in ("gpu", "rdma", "export", "allocation"):
        _object(result, key, "$", optional=True)
    modes = _objects(result, "modes", "$")

    # An internal error stops the run wherever it happens and is recorded in its summary alone: it claims
    # nothing about the bug, so it is the one verdict taken as written.
    if exit_code == ExitCode.INTERNAL_ERROR and summary.startswith(SUMMARY_PREFIXES[ExitCode.INTERNAL_ERROR]):
        return Recomputed(ExitCode.INTERNAL_ERROR, ())
    if missing:
        return Recomputed(ExitCode.ENVIRONMENT, ())
    roles = []
    for index, mode in enumerate(modes):
        role = _field(mode, "role", f"$.modes[{index}]", (str,), "'bug' or 'fix'")
        name = _field(mode, "name", f"$.modes[{index}]", (str,), "a string")
        if MODE_NAMES.get(role) != name:
            raise ResultError(f"$.modes[{index}]: role {role!r:.40} with name {name!r:.40}")
        roles.append(role)
    planned = PLANS[plan_name]
    if tuple(roles) != planned:
        wanted = " and ".join(MODE_NAMES[r] for r in planned)
        found = " and ".join(MODE_NAMES[r] for r in roles) or "none"
        return Recomputed(
            ExitCode.INTERNAL_ERROR, (f"--mode={plan_name} runs {wanted}, the result holds {found}",)
        )
    outcomes: dict[str, str] = {}
    reasons = []
    for index, mode in enumerate(modes):
        path = f"$.modes[{index}]"
        outcome = mode_outcome(mode, path)
        outcomes[mode["role"]] = outcome
        if mode.get("outcome") != outcome:
            reasons.append(f"{path}.outcome says {mode.get('outcome')}, its observations give {outcome}")
    return Recomputed(_from_outcomes(outcomes), tuple(reasons))


def check_result(result: Mapping[str, Any]) -> ExitCode:
    """The verdict, once the result's own verdict, exit code and summary agree with its observations."""
    recomputed = recompute(result)
    code = recomputed.code
    said = f"{result['verdict']} (exit {result['exit_code']})"
    gives = f"{code.verdict} (exit {int(code)})"
    if result["exit_code"] != code or result["verdict"] != code.verdict or recomputed.reasons:
        raise ResultError(
            "; ".join((f"it says {said}, but its observations give {gives}", *recomputed.reasons))
        )
    summary: str = result["summary"]
    if not summary.startswith(SUMMARY_PREFIXES[code]):
        raise ResultError(
            f"its summary {summary!r:.120} does not go with the verdict its observations give, {gives}"
        )
    return code


__all__ = ["PLANS", "ResultError", "check_result", "mode_outcome", "recompute"]
