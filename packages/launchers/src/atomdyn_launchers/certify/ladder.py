"""``invoke certify``: the rungs in order, stopping at the first failure with its diagnosis, the time spent so
far and the command that reruns that rung alone; a report that says "certified" only when every rung passed.

State lives in ``<runs>/certify/<id>/certify.json``, rewritten (atomically) after every rung. A later climb with
``--resume`` (or ``--from RUNG``) reuses the rungs that passed for the same key: the lock digest, the config
digest (the cluster config, engine, model and recipe) and the image ids. Rungs 1 and 2 (seconds) always run
again: they establish the image ids of the key.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_text
from atomdyn_launchers.certify.nixl import VERDICT_FILE
from atomdyn_launchers.certify.rungs import (
    REUSED,
    RUNGS,
    Climb,
    Rung,
    RungResult,
    rung_named,
    timed,
)
from atomdyn_launchers.config.cluster import ClusterConfig
from atomdyn_launchers.diagnose.scan import log_safely as diagnose_log_safely
from atomdyn_launchers.diagnose.scan import safely as diagnose_safely
from atomdyn_launchers.engines import get_engine
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.evidence.certify_report import REPORT_FILE, STATE_FILE, certified, render, verdict_line
from atomdyn_launchers.evidence.gates import evaluate
from atomdyn_launchers.evidence.probe import PROBE_DIR
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.profiles.models import get_model
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.options import LaunchOptions

ALWAYS = ("preflight", "images")  # cheap, and they establish the key


class CertifyError(ValueError):
    """What was asked of the ladder cannot be done (an unknown rung, nothing to resume); names the problem."""


@dataclass
class Certification:
    certify_id: str
    directory: str
    engine: str
    model: str
    recipe: str | None
    key: dict[str, Any]
    rungs: list[dict[str, Any]] = field(default_factory=list)
    stopped_at: str | None = None
    rerun: str | None = None
    elapsed_s: float = 0.0

    @property
    def certified(self) -> bool:
        return certified(asdict(self))

    def verdict_line(self) -> str:
        return verdict_line(asdict(self))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "certified": self.certified, "verdict": self.verdict_line()}


def config_digest(config: ClusterConfig, options: LaunchOptions) -> str:
    """What the climb's results depend on besides the lock and the images."""
    engine = get_engine(options.engine or config.engine_profile)
    model = options.model or engine.default_model
    recipe = options.recipe.to_json() if options.recipe is not None else None
    text = json.dumps(
        {"config": config.redacted(), "engine": engine.name, "model": model, "recipe": recipe}, sort_keys=True
    )
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _previous(root: Path, digest: str) -> dict[str, Any] | None:
    """The newest recorded climb with this config digest."""
    for path in sorted(root.glob(f"*/{STATE_FILE}"), reverse=True):
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(state, dict) and state.get("key", {}).get("config_digest") == digest:
            return state
    return None


def _rerun(rung: Rung, config_path: str | None, recipe_path: str | None) -> str:
    flags = "".join(f" --{k} {v}" for k, v in (("config", config_path), ("recipe", recipe_path)) if v)
    return f"invoke certify --from {rung.name}{flags}   (alone: {rung.rerun})"


def plan_lines(config: ClusterConfig, options: LaunchOptions, probe: ProbeOptions) -> list[str]:
    """The dry run: every rung, its nodes and jobs, and the most it can take (from the timeouts it waits on)."""
    climb = Climb(config, options, probe, Path("/nonexistent"), Progress())
    engine = climb.engine
    lines = [f"certify (dry run: nothing submitted): engine {engine.name}, runtime {config.runtime}, "
             f"nodes {', '.join(climb.nodes())}"]  # fmt: skip
    allocation = options.allocation
    if allocation is not None:  # as the run's dry run shows srun lines: no job of the climb is a batch job
        lines.append(f"  inside allocation {allocation}: every job is a step of it (srun --jobid {allocation} "
                     "--nodelist NODE --nodes 1 --ntasks 1 --overlap), no batch job")  # fmt: skip
    total = 0.0
    for rung in RUNGS:
        expected = rung.expected_s(climb)
        total += expected
        jobs = rung.jobs if allocation is None else rung.jobs.replace("job", "step")
        lines.append(f"  {rung.number} {rung.name:<10} {rung.title}; jobs: {jobs}; at most {expected:.0f} s")
    lines.append(f"  at most {total:.0f} s in all ({total / 60:.0f} min), stopping at the first failure")
    return lines


def climb(
    config: ClusterConfig,
    options: LaunchOptions,
    probe: ProbeOptions,
    *,
    root: Path,
    start: str | None = None,
    resume: bool = False,
    progress: Progress | None = None,
    config_path: str | None = None,
    recipe_path: str | None = None,
) -> Certification:
    """Climb every rung in order (reusing what passed for the same key with ``start``/``resume``)."""
    progress = progress or Progress()
    try:
        first = rung_named(start).number if start else None
    except ValueError as exc:
        raise CertifyError(str(exc)) from None
    digest = config_digest(config, options)
    previous = _previous(root, digest) if (resume or start) else None
    if (resume or start) and previous is None:
        raise CertifyError(
            f"nothing to resume: no earlier climb under {root} with this config (digest {digest[:19]})"
        )
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = f"{stamp}-{get_engine(options.engine or config.engine_profile).name}"
    root.mkdir(parents=True, exist_ok=True)
    directory = root / name
    for attempt in range(2, 100):  # two climbs in one second (a resume that reuses everything is quick)
        try:
            directory.mkdir()
            break
        except FileExistsError:
            directory = root / f"{name}-{attempt}"
    engine = get_engine(options.engine or config.engine_profile)
    cert = Certification(
        certify_id=directory.name,
        directory=str(directory),
        engine=engine.name,
        model=get_model(options.model or engine.default_model).name,
        recipe=recipe_path,
        key={"config_digest": digest},
    )
    state = Climb(config, options, probe, directory, progress)
    began = time.monotonic()
    earlier = {r["name"]: r for r in (previous or {}).get("rungs", [])}
    for rung in RUNGS:
        reuse = earlier.get(rung.name)
        skip = rung.name not in ALWAYS and (resume or (first is not None and rung.number < first))
        if skip and reuse is not None and reuse["verdict"] != "fail" and _same_key(previous, cert.key):
            result = RungResult(REUSED, f"passed in {previous['certify_id']}: {reuse['detail']}",  # type: ignore[index]
                                evidence=reuse["evidence"], platform=reuse["platform"])  # fmt: skip
        elif skip and first is not None and rung.number < first:
            raise CertifyError(
                f"rung {rung.number} ({rung.name}) has not passed for this lock, these images and this config: "
                "climb without --from"
            )
        else:
            progress.line(f"certify: rung {rung.number} {rung.name}: {rung.title}")
            result = timed(rung, state)
        state.results[rung.name] = result
        cert.key.update({k: v for k, v in result.facts.items() if k in ("lock_digest", "image_ids")})
        cert.rungs.append({"number": rung.number, "name": rung.name, "title": rung.title, "proves": rung.proves,
                           "verdict": result.verdict, "detail": result.detail, "seconds": result.seconds,
                           "evidence": result.evidence, "platform": result.platform})  # fmt: skip
        cert.elapsed_s = round(time.monotonic() - began, 1)
        progress.line(f"certify: rung {rung.number} {rung.name}: {result.verdict.upper()} ({result.seconds} s) "
                      f"{result.detail}")  # fmt: skip
        if not result.passed:
            diagnosis = diagnose_rung(result)
            if diagnosis is not None:
                cert.rungs[-1]["diagnosis"] = diagnosis
                if diagnosis["first"]:
                    progress.line(
                        f"certify: diagnosis: {diagnosis['first']}: {diagnosis['findings'][0]['cause']}"
                    )
            cert.stopped_at = f"{rung.number} ({rung.name})"
            cert.rerun = _rerun(rung, config_path, recipe_path)
            write(cert, directory)
            return cert
        write(cert, directory)
    return cert


def diagnose_rung(result: RungResult) -> dict[str, Any] | None:
    """A failed rung's diagnosis from its evidence: a run directory (its logs and headline, and the checks that
    failed where the launcher itself passed the run: the probe's verdict, else the evidence gates), another
    directory (a node check's or validation's work directory: every file) or a file (node-check.json); the
    first of several that a known signature explains. None when the rung names no evidence."""
    found: list[dict[str, Any]] = []
    for shown in (part.strip() for part in result.evidence.split(", ") if part.strip()):
        path = Path(shown)
        if path.is_file():
            one = diagnose_log_safely(path)
        elif path.is_dir():
            one = diagnose_safely(path, failed_gates=_failed_checks(path))
        else:
            continue
        if one is not None:
            found.append(one)
    return next((one for one in found if one["known"]), found[0] if found else None)


def _failed_checks(run_dir: Path) -> list[tuple[str, str]]:
    """(gate id, reason) of what failed where the launcher passed the run: the NIXL probe's verdict checks, or
    the evidence gates of a serving run. The rung judged them already: an error here only leaves them out."""
    try:
        run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        if not isinstance(run, dict) or run.get("result") != "pass":
            return []
        if run.get("probe"):
            verdict = json.loads((run_dir / PROBE_DIR / VERDICT_FILE).read_text(encoding="utf-8"))
            return [(str(c["name"]), str(c["detail"])) for c in verdict["checks"] if not c["ok"]]
        return [(r.id, r.reason) for r in evaluate(collect_signals(run_dir)) if r.verdict == "fail"]
    except Exception:
        return []


def _same_key(previous: dict[str, Any] | None, key: dict[str, Any]) -> bool:
    """The earlier climb's key equals this one's as far as this one has established it (after rung 2)."""
    if previous is None:
        return False
    theirs = previous.get("key", {})
    return all(theirs.get(name) == key.get(name) for name in ("config_digest", "lock_digest", "image_ids"))


def write(cert: Certification, directory: Path) -> None:
    atomic_write_text(directory / STATE_FILE, json.dumps(cert.to_json(), indent=2) + "\n")
    atomic_write_text(directory / REPORT_FILE, render(cert.to_json()))
