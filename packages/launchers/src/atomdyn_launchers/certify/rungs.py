"""The rungs of the bring-up ladder, cheapest first, as a table: what each proves, what it costs, how to rerun it.

Every rung is one function ``(Climb) -> RungResult``. The node check (rungs 1 and 2) and every later rung read
only what the cluster configuration, the lock and the recipe say; a rung that does not apply to the runtime (no
image in the venv runtime) answers "not needed", saying why.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from atomdyn_core.atomic import atomic_write_json
from atomdyn_core.lock import find_lock_path, load_lock
from atomdyn_launchers.certify.nixl import cross_node
from atomdyn_launchers.config.cluster import ClusterConfig, PreflightError
from atomdyn_launchers.contract.accuracy import ACCURACY_DIR, SUMMARY_FILE
from atomdyn_launchers.contract.ladder import RUNG_NAMES
from atomdyn_launchers.engines import Engine, get_engine
from atomdyn_launchers.engines.base import ProbeOptions
from atomdyn_launchers.evidence.gates import evaluate, overall
from atomdyn_launchers.evidence.signals import collect_signals
from atomdyn_launchers.job.node_check import FAIL, Check
from atomdyn_launchers.job.stores import STORES
from atomdyn_launchers.nodes.check import CHECK_TIMEOUT_S, CheckReport, check_nodes
from atomdyn_launchers.profiles.accuracy_tasks import get_task
from atomdyn_launchers.progress import Progress
from atomdyn_launchers.run.launch import run
from atomdyn_launchers.run.options import LaunchOptions
from atomdyn_launchers.run.plan import plan_roles
from atomdyn_launchers.run.stages.probe import START_ALLOWANCE_S
from atomdyn_launchers.runtimes import get_runtime
from atomdyn_launchers.slurm.client import Slurm, held_allocation
from atomdyn_launchers.validate.gpu import run_gpu_validation
from atomdyn_launchers.validate.mori import run_mori_repro

PASS, FAILED, NOT_NEEDED, REUSED = "pass", "fail", "not needed", "reused"
# What rung 8 judges and rungs 5 and 7 leave to it: the accuracy gates and the accuracy stage's own failure.
ACCURACY_GATES = "accuracy_"
ACCURACY_FAILURE = "accuracy:"
# The node check's lines that rung 2 answers (the images and the helper); every other line is rung 1's.
IMAGE_CHECKS = (*dict.fromkeys(row for store in STORES.values() for row in store.image_rows), "dmabuf-shim")
VALIDATE_TIMEOUT_S = 900.0
MORI_REPRO_TIMEOUT_S = 600.0


@dataclass
class RungResult:
    verdict: str  # pass | fail | not needed | reused
    detail: str
    seconds: float = 0.0
    evidence: str = ""  # the run directory (or file) that shows it
    platform: str = "n/a (no engine ran)"
    facts: dict[str, Any] = field(default_factory=dict)  # what later rungs and the resume key read

    @property
    def passed(self) -> bool:
        return self.verdict in (PASS, NOT_NEEDED, REUSED)


@dataclass
class Climb:
    """One climb's inputs and what its rungs found so far."""

    config: ClusterConfig
    options: LaunchOptions  # engine, model, recipe, runs_root; the kind is each rung's
    probe: ProbeOptions
    directory: Path  # <runs>/certify/<id>/
    progress: Progress
    node_report: CheckReport | None = None
    results: dict[str, RungResult] = field(default_factory=dict)

    @property
    def engine(self) -> Engine:
        return get_engine(self.options.engine or self.config.engine_profile)

    def nodes(self) -> list[str]:
        """Every node a rung runs on: the P/D nodes and the primary one, in that order."""
        roles = plan_roles("disagg", self.config, nodes=self.options.nodes)
        return list(dict.fromkeys([r.node for r in roles] + [self.config.primary_node]))


@dataclass(frozen=True)
class Rung:
    number: int
    name: str
    title: str
    proves: str
    rerun: str  # the command that reruns this rung alone (the config and recipe flags are added)
    climb: Callable[[Climb], RungResult]
    expected_s: Callable[[Climb], float]
    jobs: str  # what it submits


def _lines(checks: list[tuple[str, Check]]) -> str:
    return "; ".join(f"{node}: {c.name} {c.detail}" for node, c in checks) or "every check passed"


def _node_checks(climb: Climb, wanted: Callable[[str], bool]) -> list[tuple[str, Check]]:
    report = climb.node_report
    assert report is not None
    return [(node, c) for node, checks in sorted(report.nodes.items()) for c in checks if wanted(c.name)]


def preflight(climb: Climb) -> RungResult:
    """The lock verified, then nodes.check on every node of the ladder (one job each; inside an allocation, the
    allocation checked to hold every node, then one step of it each)."""
    try:
        lock = load_lock(climb.options.lock_path or find_lock_path(climb.config.project_dir))
    except (OSError, ValueError, LookupError) as exc:
        return RungResult(FAILED, f"the lock does not verify: {exc}")
    allocation = climb.options.allocation
    if allocation is not None:  # every rung's jobs are steps of it: it must hold every node of the ladder
        try:
            held_allocation(
                Slurm(climb.config), allocation, climb.nodes(), detected=climb.options.allocation_detected
            )
        except PreflightError as exc:
            return RungResult(FAILED, str(exc), facts={"lock_digest": lock.digest, "nodes": climb.nodes()})
    report = check_nodes(
        climb.config, climb.nodes(), engine=climb.engine.name, kind="disagg", allocation=allocation
    )
    climb.node_report = report
    path = climb.directory / "node-check.json"
    atomic_write_json(path, report.to_json())
    failed = [
        (n, c) for n, c in _node_checks(climb, lambda name: name not in IMAGE_CHECKS) if c.status == FAIL
    ]
    failed += [(node, Check("job", FAIL, error)) for node, error in sorted(report.errors.items())]
    facts = {"lock_digest": lock.digest, "nodes": climb.nodes()}
    if failed:
        return RungResult(FAILED, _lines(failed), evidence=str(path), facts=facts)
    return RungResult(
        PASS, f"lock {lock.digest[:19]}; {len(report.nodes)} node(s) checked", evidence=str(path), facts=facts
    )


def images(climb: Climb) -> RungResult:
    """The images present on every node with one id each, and the helper installed where P/D loads it."""
    checks = _node_checks(climb, lambda name: name in IMAGE_CHECKS)
    failed = [(n, c) for n, c in checks if c.status == FAIL]
    if failed:  # the evidence is rung 1's node check, whose image lines failed (diagnosed from it)
        return RungResult(FAILED, _lines(failed), evidence=str(climb.directory / "node-check.json"))
    runtime = get_runtime(climb.config.runtime)
    store = runtime.store()
    if store.shared:
        # One file per image on the shared filesystem, checked against its import record on each node.
        files = sorted({c.detail for _, c in checks if c.name == "image"})
        return RungResult(PASS, f"{store.described}: " + "; ".join(files), facts={"image_ids": {}})
    if not runtime.node_images:
        return RungResult(NOT_NEEDED, f"RUNTIME={climb.config.runtime}: no image; the venv is {climb.config.python_venv}",
                          facts={"image_ids": {}})  # fmt: skip
    ids: dict[str, dict[str, str]] = {}
    for node, check in checks:
        if check.name == "image":
            tag, _, image_id = check.detail.partition(" ")
            ids.setdefault(tag, {})[node] = image_id.split(" ", 1)[0]
    differ = {tag: by_node for tag, by_node in ids.items() if len(set(by_node.values())) > 1}
    if differ:
        shown = "; ".join(
            f"{t}: " + ", ".join(f"{n} {i}" for n, i in sorted(b.items())) for t, b in differ.items()
        )
        return RungResult(
            FAILED, f"the nodes hold different images under one tag ({shown}): run nodes.prepare"
        )
    detail = ", ".join(f"{t} {next(iter(b.values()))}" for t, b in sorted(ids.items()))
    return RungResult(PASS, f"identical on every node: {detail}", facts={"image_ids": ids})


def validate(climb: Climb) -> RungResult:
    """atomdyn-validate in the image on each worker node (validate.gpu's job); for an engine whose KV moves over
    MORI, then mori-repro there (validate.mori's job), before any model loads."""
    if not get_runtime(climb.config.runtime).in_image:
        return RungResult(NOT_NEEDED, f"RUNTIME={climb.config.runtime}: there is no image to validate")
    failed, shown = [], []
    for node in climb.nodes():  # every node a rung runs a worker on
        result = run_gpu_validation(  # the climb's engine, model and recipe: its workers' argv are parsed
            climb.config,
            node=node,
            timeout_s=VALIDATE_TIMEOUT_S,
            allocation=climb.options.allocation,
            options=climb.options,
        )
        shown.append(str(result.run_dir))
        if not result.ok:
            failed.append(f"{node}: " + "; ".join(line for line in result.lines() if line.startswith("FAIL")))
            continue
        if climb.engine.mori_repro:
            if climb.options.allocation is not None:
                failed.append(f"{node}: mori-repro runs as a batch job, not yet as a step of an allocation")
                continue
            repro = run_mori_repro(climb.config, node=node, timeout_s=MORI_REPRO_TIMEOUT_S)
            shown.append(str(repro.run_dir))
            if not repro.ok:
                failed.append(f"{node}: FAIL mori-repro: {repro.detail()}")
    if failed:
        return RungResult(FAILED, " | ".join(failed), evidence=", ".join(shown))
    what = "every check passed in the image on each worker node"
    if climb.engine.mori_repro:
        what += "; mori-repro: the exporter's offset landed correctly on each"
    return RungResult(PASS, what, evidence=", ".join(shown))


def nixl(climb: Climb) -> RungResult:
    """The cross-node NIXL probe (nixl.cross-node); not needed for an engine whose KV does not move over NIXL."""
    if not climb.engine.nixl_probe:
        return RungResult(NOT_NEEDED, f"the {climb.engine.name} engine does not move KV over NIXL")
    result = cross_node(
        climb.config, replace(climb.options, kind="disagg"), climb.probe, progress=climb.progress
    )
    run_json = _run_json(result.run_dir)
    figures = result.verdict.figures
    if not result.passed:
        return RungResult(FAILED, result.failure() or "failed", evidence=str(result.run_dir),
                          platform=str(run_json.get("platform", "unknown")), facts={"figures": figures})  # fmt: skip
    per_block = ", ".join(
        f"{n} block(s) {us} µs/block" for n, us in figures.get("per_block_p50_us", {}).items()
    )
    detail = f"every byte arrived; p50 {per_block}; large {figures.get('large_gbps_p50')} GB/s"
    return RungResult(PASS, detail, evidence=str(result.run_dir), platform=str(run_json.get("platform")),
                      facts={"figures": figures})  # fmt: skip


def _run_json(run_dir: Path) -> dict[str, Any]:
    try:
        loaded = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _serving(
    climb: Climb,
    kind: str,
    *,
    with_benchmark: bool = False,
    with_accuracy: bool = False,
    judge_accuracy: bool = True,
) -> RungResult:
    """A serving run of ``kind``, passed only when the launcher and every evidence gate of its kind pass.
    ``judge_accuracy=False``: the run asks the recipe's accuracy check, but its verdict leaves it to rung 8."""
    recipe = climb.options.recipe
    if recipe is not None and recipe.benchmark is not None and not with_benchmark:
        recipe = replace(recipe, benchmark=None)  # the benchmark is rung 9's, on a deployment of its own
    if recipe is not None and recipe.accuracy is not None and not with_accuracy:
        recipe = replace(recipe, accuracy=None)  # asked by rungs 5 and 7 only, judged by rung 8
    options = replace(climb.options, kind=kind, recipe=recipe)
    outcome = run(options, climb.config, progress=climb.progress)
    return _judged(outcome.run_dir, outcome.passed, outcome.failure, judge_accuracy=judge_accuracy)


def _judged(run_dir: Path, passed: bool, failure: str | None, *, judge_accuracy: bool = True) -> RungResult:
    """A run's verdict: the launcher's and every evidence gate's; without ``judge_accuracy``, a failure of the
    accuracy stage and the accuracy gates are left out (rung 8 judges them, so a KV failure is named first)."""
    platform = str(_run_json(run_dir).get("platform", "unknown"))
    results = evaluate(collect_signals(run_dir))
    if not judge_accuracy:
        results = [r for r in results if not r.id.startswith(ACCURACY_GATES)]
        if not passed and (failure or "").startswith(ACCURACY_FAILURE):
            passed, failure = True, None
    failed = [r for r in results if r.verdict == "fail"]
    if not passed or overall(results) != "pass":
        why = failure or "; ".join(f"{r.id}: {r.reason}" for r in failed[:4])
        return RungResult(FAILED, why, evidence=str(run_dir), platform=platform)
    judged = sum(1 for r in results if r.verdict == "pass")
    return RungResult(PASS, f"{judged} evidence gates pass", evidence=str(run_dir), platform=platform)


def agg_single(climb: Climb) -> RungResult:
    """One aggregated node; where the recipe asks for an accuracy check the run asks it too (its answers are the
    reference of rung 7's P/D run, as the fixed prompt's is), judged by rung 8."""
    return _serving(climb, "agg-single", with_accuracy=True, judge_accuracy=False)


def agg_two(climb: Climb) -> RungResult:
    return _serving(climb, "agg-two")


def disagg(climb: Climb) -> RungResult:
    """P/D; where the recipe asks for an accuracy check the run asks it too, against rung 5's answers, judged by
    rung 8: this rung's verdict leaves the check out, so a KV failure is named by the KV gates first."""
    return _serving(climb, "disagg", with_accuracy=True, judge_accuracy=False)


def _asked(climb: Climb, rung: str) -> RungResult | None:
    """The run rung ``rung`` made in this climb, judged with the accuracy check, where it asked it (it passed
    everything else); None where the rung was reused from an earlier climb or its run holds no answers."""
    earlier = climb.results.get(rung)
    if earlier is None or earlier.verdict != PASS or _accuracy_score(Path(earlier.evidence)) is None:
        return None
    run_dir = Path(earlier.evidence)
    record = _run_json(run_dir)
    return _judged(run_dir, record.get("result") == "pass", record.get("failure") or None)


def accuracy(climb: Climb) -> RungResult:
    """The recipe's accuracy check, judged: rung 5's aggregated answers (the reference) and rung 7's P/D answers
    reach the threshold, every item answered, P/D within the allowed difference of the aggregated run's on the
    same items; every gate of each run passes. Where rung 5 or 7 was reused from an earlier climb, the runs are
    made here (aggregated on one node, then P/D)."""
    recipe = climb.options.recipe
    if recipe is None or recipe.accuracy is None:
        return RungResult(NOT_NEEDED, "the recipe asks for no accuracy check")
    aggregated = _asked(climb, "agg-single")
    pd = _asked(climb, "disagg") if aggregated is not None else None  # compared with these answers
    if aggregated is None:
        aggregated = _serving(climb, "agg-single", with_accuracy=True)
    if not aggregated.passed:
        aggregated.detail = f"aggregated: {aggregated.detail}"
        return aggregated
    if pd is None:
        pd = _serving(climb, "disagg", with_accuracy=True)
    scores = [_accuracy_score(Path(r.evidence)) for r in (aggregated, pd)]
    title = get_task(recipe.accuracy.task).title
    shown = f"{title} aggregated {scores[0]}, P/D {scores[1]} (threshold {recipe.accuracy.threshold})"
    evidence = f"{aggregated.evidence}, {pd.evidence}"
    if not pd.passed:
        return RungResult(FAILED, f"P/D: {pd.detail}; {shown}", evidence=evidence, platform=pd.platform)
    return RungResult(PASS, f"{shown}; {pd.detail}", evidence=evidence, platform=pd.platform,
                      facts={"accuracy": scores})  # fmt: skip


def _accuracy_score(run_dir: Path) -> Any:
    """The run's accuracy score by its task's gated filter, as its accuracy stage recorded it (None: none)."""
    try:
        loaded = json.loads((run_dir / ACCURACY_DIR / SUMMARY_FILE).read_text(encoding="utf-8"))
        return loaded["scores"][get_task(str(loaded["task"])).gated_filter]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def benchmark(climb: Climb) -> RungResult:
    recipe = climb.options.recipe
    if recipe is None or recipe.benchmark is None:
        return RungResult(NOT_NEEDED, "the recipe asks for no serving benchmark")
    return _serving(climb, "disagg", with_benchmark=True)


def _ready(climb: Climb) -> float:
    return climb.options.ready_timeout_s or climb.engine.timeouts.ready_s


def _validate_s(climb: Climb) -> float:
    if not get_runtime(climb.config.runtime).in_image:
        return 0.0
    return (VALIDATE_TIMEOUT_S + (MORI_REPRO_TIMEOUT_S if climb.engine.mori_repro else 0.0)) * 2


def _probe_s(climb: Climb) -> float:
    # UCX's check on both P/D nodes first (node check jobs), then the pair.
    return CHECK_TIMEOUT_S + climb.probe.timeout_s * 2 + START_ALLOWANCE_S


# The ladder. Expected times are upper bounds from the timeouts a rung waits on (the recipe's or the engine's).
RUNGS: tuple[Rung, ...] = (
    Rung(1, "preflight", "config, lock and per-node preflight",
         "the lock verifies; every node has the devices, RDMA ports and GIDs, SRQ, shared paths the engine needs",
         "invoke nodes.check", preflight, lambda c: CHECK_TIMEOUT_S, "one nodes.check job per node"),
    Rung(2, "images", "pinned images identical on every node, the helper installed",
         "the same image id under each pinned tag on every node; dmabuf-shim loads where P/D preloads it",
         "invoke nodes.check", images, lambda c: 0.0, "none (rung 1's jobs)"),
    Rung(3, "validate", "in-image validation on each worker node",
         "inside the image: the GPU stack, vLLM's platform, NIXL and its backend, the Dynamo flags; for an engine "
         "whose KV moves over MORI, mori-repro's dma-buf registration on the node's NIC",
         "invoke validate.gpu --node NODE", validate, _validate_s,
         "one job per worker node (two with mori-repro)"),
    Rung(4, "nixl", "cross-node NIXL transfer before any model",
         "UCX's own ucx_info accepts the workers' UCX variables on both P/D nodes; then KV blocks move between "
         "them with the workers' environment, every byte checked, UCX's rows judged",
         "invoke nixl.cross-node", nixl, _probe_s, "a UCX check job per P/D node, then two one-shot jobs"),
    Rung(5, "agg-single", "single-node aggregated smoke, prefix caching on",
         "the engine serves on one node; its fixed-prompt answer becomes the KV reference (and its answers to "
         "the recipe's accuracy check, when it asks for one, the accuracy reference)",
         "invoke agg.run --nodes 1", agg_single, _ready, "one job"),
    Rung(6, "agg-two", "two-node aggregated",
         "both nodes serve, each pinned, through one frontend and etcd", "invoke agg.run --nodes 2", agg_two,
         _ready, "two jobs"),
    Rung(7, "disagg", "P/D through etcd with the KV gates",
         "prefill and decode on two nodes; KV moved by NIXL passes every KV gate and equals rung 5's answer",
         "invoke disagg.run", disagg, _ready, "two jobs (and etcd's, when the run owns it)"),
    Rung(8, "accuracy", "accuracy before performance (the recipe's accuracy task through the frontend, greedy)",
         "rung 5's aggregated answers reach the recipe's threshold and are the reference; rung 7's P/D answers "
         "reach it, every item answered, within the allowed difference of the aggregated run's on the same items",
         "invoke agg.run --nodes 1 --recipe FILE, then invoke disagg.run --recipe FILE", accuracy,
         lambda c: 2 * _ready(c) if c.options.recipe is not None and c.options.recipe.accuracy is not None else 0.0,
         "none: it judges rungs 5 and 7's runs (one job, then two, where they were reused from an earlier climb)"),
    Rung(9, "benchmark", "the serving benchmark (aiperf sweep)",
         "the recipe's sweep against a P/D deployment, its SLOs met", "invoke disagg.run", benchmark,
         lambda c: _ready(c) if c.options.recipe is not None and c.options.recipe.benchmark is not None else 0.0,
         "two jobs, when the recipe asks for a benchmark"),
)  # fmt: skip
if tuple(r.name for r in RUNGS) != RUNG_NAMES:  # the evidence judges a report by the ladder it names
    raise RuntimeError(f"certify's rungs {[r.name for r in RUNGS]} differ from the contract's {RUNG_NAMES}")


def rung_named(name: str) -> Rung:
    for rung in RUNGS:
        if name in (rung.name, str(rung.number)):
            return rung
    raise ValueError(f"unknown rung {name!r}; the rungs: {', '.join(f'{r.number} {r.name}' for r in RUNGS)}")


def timed(rung: Rung, climb: Climb) -> RungResult:
    start = time.monotonic()
    result = rung.climb(climb)
    result.seconds = round(time.monotonic() - start, 1)
    return result
