"""Run recipes: one YAML file that says what a run is (engine, model, run kind, layout, router, Slurm time limit,
smoke traffic, the serving benchmark); the cluster it runs on stays in cluster.env.

The schema is one JSON Schema document, :data:`SCHEMA`, published as ``recipes/schema.json``
(``python -m atomdyn_launchers.config.recipes --write-schema PATH``; a test keeps the published file equal). The
reference implementation, jsonschema, validates every recipe against it (strictly: an unknown key is an error
naming it and its path); its errors are worded here.
:func:`load_recipe` returns a typed :class:`Recipe`; :func:`atomdyn_launchers.run.options.resolve` turns it into
the launcher's options, with the command line's explicit flags applied over it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import reprlib
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs in the project venv
from jsonschema.exceptions import ValidationError  # type: ignore[import-untyped]  # no stubs either
from jsonschema.validators import extend, validator_for  # type: ignore[import-untyped]

from atomdyn_core.atomic import atomic_write_text
from atomdyn_core.bounded import MIB, FileReadError, read_text
from atomdyn_launchers.config.console import quiet_stdout
from atomdyn_launchers.engines import ENGINE_NAMES
from atomdyn_launchers.profiles.accuracy_tasks import TASK_NAMES, TASKS

SCHEMA_VERSION = 1
RECIPE_MAX_BYTES = 1 * MIB  # a recipe is a page of YAML; a device or a runaway file is refused, named
SCHEMA_ID = "https://atomdyn.invalid/recipe.schema.json"  # a name, not a location: nothing fetches it

ROUTER_MODES = ["kv", "round-robin", "random"]
_TIME = r"^([0-9]+-)?[0-9]{1,2}:[0-9]{2}:[0-9]{2}$"  # Slurm's --time: [days-]hours:minutes:seconds
_NAME = r"^[a-z0-9][a-z0-9._-]*$"


def _obj(properties: dict[str, Any], required: Sequence[str] = (), description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": properties}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    return out


def _int(minimum: int, description: str, maximum: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer", "minimum": minimum, "description": description}
    if maximum is not None:
        out["maximum"] = maximum
    return out


def _num(minimum: float, description: str, maximum: float) -> dict[str, Any]:
    return {"type": "number", "minimum": minimum, "maximum": maximum, "description": description}


# Bounds of the numbers (a recipe's numbers become loop counts, sbatch and aiperf arguments): generous for any
# run the launchers make, far below what would hang or overflow one.
MAX_REQUESTS = 10_000  # smoke requests
MAX_CONCURRENCY = 1024  # smoke requests in flight
MAX_BENCH_CONCURRENCY = 4096  # one aiperf level
MAX_BENCH_REQUESTS = 100_000  # requests per aiperf level
MAX_TOKENS = 131_072  # tokens per smoke response
MAX_BENCH_TOKENS = 1_048_576  # synthetic prompt or output length
MAX_SLO_MS = 3_600_000  # a goodput bound: one hour
MAX_SPEEDUP = 1_000_000  # the mock engine's --speedup-ratio
MAX_KV_GBPS = 1_000_000  # the mock engine's --kv-transfer-bandwidth (1 PB/s: no delay)
MAX_KV_BYTES_PER_TOKEN = 1 << 30
MAX_ACCURACY_ITEMS = 100_000  # GSM8K's test split has 1,319, capitals 237; a user's own file may hold more
MAX_FEW_SHOT = 32


def _workers(description: str) -> dict[str, Any]:
    return _obj(
        {
            "workers": _int(1, "how many workers of this role (one Slurm job each)", 64),
            "nodes_per_worker": _int(1, "nodes one worker spans (the launchers run one node per worker)", 1),
            "gpus_per_worker": _int(0, "GPUs one worker uses: 0 for the mock engine, else the model's", 64),
        },
        required=["workers"],
        description=description,
    )


SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": SCHEMA_ID,
    "title": "atomdyn run recipe",
    **_obj(
        {
            "schema_version": {"const": SCHEMA_VERSION, "description": "recipe format version"},
            "name": {"type": "string", "pattern": _NAME, "description": "short name, used in reports"},
            "description": {"type": "string"},
            "engine": {"enum": list(ENGINE_NAMES), "description": "engine profile"},
            "model": {"type": "string", "description": "model profile (profiles/models.json)"},
            "kind": {"enum": ["agg", "disagg"], "description": "aggregated or disaggregated prefill/decode"},
            "layout": _obj(
                {
                    "agg": _workers("aggregated workers (kind agg): 1 or 2"),
                    "prefill": _workers("prefill workers (kind disagg)"),
                    "decode": _workers("decode workers (kind disagg); the first also runs the frontend"),
                    "nodes": {
                        "type": "array",
                        "items": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*$"},
                        "minItems": 1,
                        "uniqueItems": True,
                        "description": "nodes in placement order (prefill first, then decode); default: "
                        "PREFILL_NODE/DECODE_NODE for one of each, else NODE_ADDRS's nodes",
                    },
                },
                description="workers per role, nodes and GPUs per worker",
            ),
            "router": _obj(
                {"mode": {"enum": ROUTER_MODES, "description": "the frontend's --router-mode"}},
                description="Dynamo's frontend router",
            ),
            "slurm": _obj(
                {"time_limit": {"type": "string", "pattern": _TIME, "description": "each job's --time"}},
            ),
            "smoke": _obj(
                {
                    "requests": _int(1, "smoke requests, each verified", MAX_REQUESTS),
                    "concurrency": _int(1, "smoke requests in flight at once", MAX_CONCURRENCY),
                    "max_tokens": _int(1, "tokens per smoke response", MAX_TOKENS),
                },
                description="the verified smoke traffic every run sends first",
            ),
            "mocker": _obj(
                {
                    "speedup_ratio": _num(0, "the mock engine's --speedup-ratio", MAX_SPEEDUP),
                    "kv_transfer_bandwidth_gbps": {
                        "type": "number",
                        "exclusiveMinimum": 0,
                        "maximum": MAX_KV_GBPS,
                        "description": "--kv-transfer-bandwidth in GB/s; above 0 (with 0, Dynamo 1.3's mocker "
                        "answers every P/D request with HTTP 500; a very large value means no delay)",
                    },
                    "kv_bytes_per_token": _int(1, "--kv-bytes-per-token", MAX_KV_BYTES_PER_TOKEN),
                    "kv_transfer_source": {
                        "type": "string",
                        "description": "where the two figures above were measured (evidence directory)",
                    },
                },
                description="the mock engine's timing model (engine mocker only)",
            ),
            "benchmark": _obj(
                {
                    "tool": {"enum": ["aiperf"]},
                    "concurrency": {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 1, "maximum": MAX_BENCH_CONCURRENCY},
                        "minItems": 1,
                        "description": "the sweep: one aiperf profile per concurrency",
                    },
                    "requests_per_level": _int(1, "requests per concurrency level", MAX_BENCH_REQUESTS),
                    "input_tokens": _int(1, "mean synthetic prompt length", MAX_BENCH_TOKENS),
                    "output_tokens": _int(1, "output tokens per request (ignore_eos)", MAX_BENCH_TOKENS),
                    "streaming": {"type": "boolean"},
                    "slo": _obj(
                        {
                            "ttft_ms": _num(0, "time to first token, goodput bound", MAX_SLO_MS),
                            "itl_ms": _num(0, "inter-token latency, goodput bound", MAX_SLO_MS),
                            "request_latency_ms": _num(0, "request latency, goodput bound", MAX_SLO_MS),
                        },
                        description="goodput counts requests within every bound given",
                    ),
                },
                required=["tool", "concurrency"],
                description="a serving benchmark after the smoke traffic",
            ),
            "accuracy": _obj(
                {
                    "task": {
                        "enum": list(TASK_NAMES),
                        "description": "the accuracy task (profiles/accuracy_tasks.py): its data, prompt and "
                        "scoring; " + "; ".join(f"{t.name}: {t.description}" for t in TASKS.values()),
                    },
                    "items": _int(1, "test items scored (the data's first N)", MAX_ACCURACY_ITEMS),
                    "few_shot": _int(
                        0,
                        "examples before each question (the data's last N); default: the task's ("
                        + ", ".join(f"{t.name} {t.few_shot}" for t in TASKS.values())
                        + ")",
                        MAX_FEW_SHOT,
                    ),
                    "threshold": _num(
                        0,
                        "the least accuracy (by the task's gated filter: "
                        + ", ".join(f"{t.name} {t.gated_filter}" for t in TASKS.values())
                        + ") that passes",
                        1,
                    ),
                    "threshold_source": {
                        "type": "string",
                        "description": "where the threshold comes from (a published score, a measured floor)",
                    },
                    "max_pd_difference": _num(
                        0, "the largest |P/D - aggregated| accuracy on the same items that passes", 1
                    ),
                    "max_differing_items": _int(
                        0,
                        "the most items whose P/D answer may differ from the aggregated one",
                        MAX_ACCURACY_ITEMS,
                    ),
                    "max_tokens": _int(
                        1,
                        "tokens per answer; default: the task's ("
                        + ", ".join(f"{t.name} {t.max_tokens}" for t in TASKS.values())
                        + ")",
                        MAX_TOKENS,
                    ),
                    "concurrency": _int(1, "questions in flight", MAX_CONCURRENCY),
                    "data": {
                        "type": "string",
                        "minLength": 1,
                        "description": "a data file of your own for the task (its sha256 is recorded): "
                        + "; ".join(f"{t.name}: {t.data_format}" for t in TASKS.values())
                        + "; default: the task's pinned data (the lock's)",
                    },
                },
                required=["task", "items", "threshold", "max_pd_difference"],
                description="an accuracy check after the smoke traffic, greedy, against the frontend",
            ),
        },
        required=["schema_version", "name", "engine", "kind", "layout"],
    ),
}


class RecipeError(ValueError):
    """A recipe is unreadable or invalid; the message names the file, the key path and the problem."""


# -- validation against SCHEMA by the reference implementation (jsonschema) ----------------------------------


_QUOTE = reprlib.Repr()
_QUOTE.maxlevel, _QUOTE.maxstring, _QUOTE.maxother, _QUOTE.maxlong = 2, 60, 60, 60
_QUOTE.maxlist = _QUOTE.maxtuple = _QUOTE.maxset = _QUOTE.maxdict = 4


def shown(value: object) -> str:
    """``repr(value)`` cut short: what an error quotes stays a line, whatever the recipe holds."""
    return _QUOTE.repr(value)


def _path(parts: Sequence[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = part if len(part) <= 60 else shown(part)
            out += f".{name}" if out else name
    return out or "(top level)"


def _is_integer(_checker: object, value: object) -> bool:
    # From draft 6, 1000.0 is an integer; a recipe's integers become counts and sbatch arguments, so a float
    # is refused as it was (YAML tells 1000 from 1000.0).
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_checker: object, value: object) -> bool:
    # JSON has no NaN or infinity, YAML has (.nan, .inf): a number here is what JSON could hold.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _full_match(_validator: object, pattern: str, value: object, _schema: object) -> Iterator[Any]:
    # jsonschema searches (re.search), and Python's $ also matches before a final newline: "02:00:00\n" would
    # pass ^...$ and break the job script. Every pattern is ^...$, which ECMA-262 (editors) reads as the whole
    # string; re.fullmatch reads it the same way.
    if isinstance(value, str) and not re.fullmatch(pattern, value):
        yield ValidationError(f"does not match {pattern}")


def _recipe_validator() -> Any:
    """The validator of the draft SCHEMA's ``$schema`` names, with the two refinements above."""
    draft = validator_for(SCHEMA)
    types = draft.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
    return extend(draft, validators={"pattern": _full_match}, type_checker=types)(SCHEMA)


_VALIDATOR = _recipe_validator()


def _article(kind: str) -> str:
    return "an" if kind[0] in "aeio" else "a"


def _wording(error: Any) -> list[str]:
    """One jsonschema error in the project's words, each naming its key path; the values quoted cut short."""
    at, rule, value = list(error.absolute_path), error.validator_value, error.instance
    where = _path(at)
    match error.validator:
        case "additionalProperties":
            known = ", ".join(error.schema["properties"])
            extra = [key for key in value if key not in error.schema["properties"]]
            return [f"{_path([*at, key])}: unknown key {shown(key)} (known here: {known})" for key in extra]
        case "required":  # jsonschema reports each missing key; the message is the same for each
            return [f"{_path([*at, key])}: required key missing" for key in rule if key not in value]
        case "const":
            return [f"{where}: must be {rule!r}, not {shown(value)}"]
        case "enum":
            return [f"{where}: {shown(value)} is not one of {', '.join(map(str, rule))}"]
        case "type" if rule == "number" and isinstance(value, float):  # a float fails "number" as NaN or inf
            return [f"{where}: must be a finite number, not {value}"]
        case "type":
            return [f"{where}: must be {_article(rule)} {rule}, not {type(value).__name__}"]
        case "minItems":
            return [f"{where}: needs at least {rule} item(s)"]
        case "uniqueItems":
            return [f"{where}: items must be unique"]
        case "exclusiveMinimum":
            return [f"{where}: {value} must be above {rule}"]
        case "minimum":
            return [f"{where}: {value} is below the minimum {rule}"]
        case "maximum":
            return [f"{where}: {value} is above the maximum {rule}"]
        case "pattern":
            return [f"{where}: {shown(value)} does not match {rule}"]
    return [f"{where}: fails {error.validator} {shown(rule)}"]  # a keyword SCHEMA does not use yet


def validate(value: object) -> list[str]:
    """Every problem of ``value`` against :data:`SCHEMA`, each naming its key path, in the schema's order."""
    problems = (line for error in _VALIDATOR.iter_errors(value) for line in _wording(error))
    return list(dict.fromkeys(problems))


# -- reading YAML strictly -------------------------------------------------------------------------------------


MAX_DEPTH = 32  # nesting a recipe may have (it needs 4); deeper input exhausted the composer's recursion


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]
    """SafeLoader that refuses what a recipe never needs: aliases (a few hundred bytes of them expand into
    gigabytes: the "billion laughs"), nesting deeper than :data:`MAX_DEPTH`, keys that are not strings, and a key
    given twice in one mapping (PyYAML keeps the last silently)."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise RecipeError(
                f"line {event.start_mark.line + 1}: alias *{shown(event.anchor)[1:-1]}: a recipe does not use "
                "YAML anchors and aliases (write the value out)"
            )
        if self._depth >= MAX_DEPTH:
            raise RecipeError(f"line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[object, object]:
    seen: dict[str, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise RecipeError(f"line {line}: key {shown(key)} is not a name (recipe keys are words)")
        if key in seen:
            raise RecipeError(f"line {line}: key {shown(key)} given twice (first on line {seen[key]})")
        seen[key] = line
    return dict(loader.construct_pairs(node))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


# -- the typed recipe ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workers:
    workers: int
    nodes_per_worker: int = 1
    gpus_per_worker: int = 0


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None
    itl_ms: float | None = None
    request_latency_ms: float | None = None

    def aiperf_goodput(self) -> str:
        """aiperf's --goodput text: metric:bound pairs in milliseconds."""
        pairs = [
            ("time_to_first_token", self.ttft_ms),
            ("inter_token_latency", self.itl_ms),
            ("request_latency", self.request_latency_ms),
        ]
        return " ".join(f"{name}:{bound:g}" for name, bound in pairs if bound is not None)


@dataclass(frozen=True)
class Benchmark:
    tool: str
    concurrency: tuple[int, ...]
    requests_per_level: int = 64
    input_tokens: int = 256
    output_tokens: int = 64
    streaming: bool = True
    slo: Slo = field(default_factory=Slo)


@dataclass(frozen=True)
class Accuracy:
    """A recipe's ``accuracy:`` section. The defaults of ``few_shot`` and ``max_tokens`` here are GSM8K's; a parsed
    recipe takes its task's (profiles/accuracy_tasks.py)."""

    task: str
    items: int
    threshold: float
    max_pd_difference: float
    few_shot: int = 5
    threshold_source: str = ""
    max_differing_items: int | None = None
    max_tokens: int = 256
    concurrency: int = 8
    data: str | None = None

    def settings(self) -> dict[str, Any]:
        """What the answers depend on (the aggregated reference's key): not the gates' bounds."""
        return {
            "task": self.task,
            "items": self.items,
            "few_shot": self.few_shot,
            "max_tokens": self.max_tokens,
        }


@dataclass(frozen=True)
class MockerTiming:
    speedup_ratio: float = 10.0
    kv_transfer_bandwidth_gbps: float | None = None
    kv_bytes_per_token: int | None = None
    kv_transfer_source: str = ""


@dataclass(frozen=True)
class Recipe:
    name: str
    engine: str
    kind: str  # agg | disagg (the recipe's word; run_kind() is the launcher's)
    model: str | None = None
    description: str = ""
    agg: Workers | None = None
    prefill: Workers | None = None
    decode: Workers | None = None
    nodes: tuple[str, ...] = ()
    router_mode: str = "kv"
    time_limit: str | None = None
    requests: int | None = None
    concurrency: int | None = None
    max_tokens: int | None = None
    mocker: MockerTiming | None = None
    benchmark: Benchmark | None = None
    accuracy: Accuracy | None = None
    source: str = ""

    def run_kind(self) -> str:
        """The launcher's run kind: agg-single, agg-two or disagg."""
        if self.kind == "disagg":
            return "disagg"
        assert self.agg is not None
        return "agg-single" if self.agg.workers == 1 else "agg-two"

    def layout_text(self) -> str:
        if self.kind == "disagg":
            assert self.prefill is not None and self.decode is not None
            return f"{self.prefill.workers}P{self.decode.workers}D"
        assert self.agg is not None
        return f"agg x{self.agg.workers}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _workers_of(raw: Mapping[str, Any] | None) -> Workers | None:
    if raw is None:
        return None
    return Workers(
        int(raw["workers"]), int(raw.get("nodes_per_worker", 1)), int(raw.get("gpus_per_worker", 0))
    )


def _semantic_problems(raw: Mapping[str, Any]) -> list[str]:
    """What the schema cannot say: which layout keys go with which kind, and engine-only sections."""
    problems: list[str] = []
    layout = raw["layout"]
    if raw["kind"] == "disagg":
        problems += [
            f"layout.{r}: required for kind disagg" for r in ("prefill", "decode") if r not in layout
        ]
        if "agg" in layout:
            problems.append("layout.agg: only for kind agg (disagg has layout.prefill and layout.decode)")
    else:
        if "agg" not in layout:
            problems.append("layout.agg: required for kind agg")
        elif layout["agg"]["workers"] > 2:
            problems.append(f"layout.agg.workers: {layout['agg']['workers']} is above the maximum 2")
        problems += [f"layout.{r}: only for kind disagg" for r in ("prefill", "decode") if r in layout]
    acc = raw.get("accuracy")
    task = TASKS[acc["task"]] if acc is not None else None  # the schema admits only the registry's names
    if acc is not None and task is not None and "data" not in acc:
        shots = acc.get("few_shot", task.few_shot)
        if acc["items"] + shots > task.pinned_items:
            problems.append(
                f"accuracy: {acc['items']} items and {shots} few-shot examples are more than {task.data_name}'s "
                f"{task.pinned_items} test items (the examples are the last ones, never scored)"
            )
    if "mocker" in raw and raw["engine"] != "mocker":
        problems.append(f"mocker: only for engine mocker, not {raw['engine']}")
    return problems


def _accuracy_of(raw: Mapping[str, Any]) -> Accuracy:
    """The recipe's accuracy section, ``few_shot`` and ``max_tokens`` defaulting to its task's."""
    task = TASKS[raw["task"]]
    return Accuracy(**{"few_shot": task.few_shot, "max_tokens": task.max_tokens, **raw})


def parse_recipe(text: str, source: str = "<recipe>") -> Recipe:
    try:
        raw = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass: no arbitrary objects
    except RecipeError as exc:
        raise RecipeError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise RecipeError(f"{source}: a recipe is a mapping of keys, not {type(raw).__name__}")
    # Another version's recipe is named as such; true (== 1 in Python) passes here and the schema's const refuses it.
    if raw.get("schema_version") not in (None, SCHEMA_VERSION):
        raise RecipeError(
            f"{source}: schema_version {shown(raw['schema_version'])} is not supported (this launcher reads "
            f"{SCHEMA_VERSION})"
        )
    problems = validate(raw)
    if not problems:
        problems = _semantic_problems(raw)
    if problems:
        raise RecipeError(f"{source}: " + "; ".join(problems))
    layout = raw["layout"]
    bench = raw.get("benchmark")
    acc = raw.get("accuracy")
    mocker = raw.get("mocker")
    smoke = raw.get("smoke", {})
    return Recipe(
        name=raw["name"],
        engine=raw["engine"],
        kind=raw["kind"],
        model=raw.get("model"),
        description=raw.get("description", ""),
        agg=_workers_of(layout.get("agg")),
        prefill=_workers_of(layout.get("prefill")),
        decode=_workers_of(layout.get("decode")),
        nodes=tuple(layout.get("nodes", ())),
        router_mode=raw.get("router", {}).get("mode", "kv"),
        time_limit=raw.get("slurm", {}).get("time_limit"),
        requests=smoke.get("requests"),
        concurrency=smoke.get("concurrency"),
        max_tokens=smoke.get("max_tokens"),
        mocker=None if mocker is None else MockerTiming(**mocker),
        benchmark=None
        if bench is None
        else Benchmark(
            tool=bench["tool"],
            concurrency=tuple(bench["concurrency"]),
            requests_per_level=bench.get("requests_per_level", 64),
            input_tokens=bench.get("input_tokens", 256),
            output_tokens=bench.get("output_tokens", 64),
            streaming=bench.get("streaming", True),
            slo=Slo(**bench.get("slo", {})),
        ),
        accuracy=None if acc is None else _accuracy_of(acc),
        source=source,
    )


def load_recipe(path: Path) -> Recipe:
    try:
        text = read_text(path, RECIPE_MAX_BYTES, "recipe")
    except FileReadError as exc:
        raise RecipeError(f"recipe {exc}") from None
    return parse_recipe(text, str(path))


# -- recipe + command-line flags -------------------------------------------------------------------------------


def resource_problems(recipe: Recipe, needs_gpus: bool, model_gpus: int) -> list[str]:
    """Where the recipe's layout disagrees with the engine and the model profile (checked at preflight)."""
    problems = []
    for role, workers in (("agg", recipe.agg), ("prefill", recipe.prefill), ("decode", recipe.decode)):
        if workers is None:
            continue
        want = model_gpus if needs_gpus else 0
        if workers.gpus_per_worker != want:
            why = f"the model profile's gpus_per_worker is {model_gpus}" if needs_gpus else "it uses no GPU"
            problems.append(
                f"layout.{role}.gpus_per_worker is {workers.gpus_per_worker}; engine {recipe.engine} "
                f"needs {want} ({why})"
            )
    return problems


def schema_text() -> str:
    return json.dumps(SCHEMA, indent=2) + "\n"


@quiet_stdout
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atomdyn_launchers.config.recipes", description=__doc__)
    parser.add_argument("--write-schema", metavar="PATH", help="write the recipe JSON Schema to PATH")
    parser.add_argument("check", nargs="*", help="recipe files to validate")
    args = parser.parse_args(argv)
    if args.write_schema:
        atomic_write_text(Path(args.write_schema), schema_text())
    failed = 0
    for name in args.check:
        try:
            recipe = load_recipe(Path(name))
        except RecipeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"{name}: ok ({recipe.engine}, {recipe.layout_text()})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
