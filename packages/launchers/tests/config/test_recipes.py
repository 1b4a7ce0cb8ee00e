"""Run recipes: strict validation (unknown keys named with their path), the published JSON Schema, the shipped
recipes, and how command-line flags combine with a recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema.validators import Draft202012Validator, validator_for  # type: ignore[import-untyped]

from atomdyn_launchers.config import recipes
from atomdyn_launchers.config.cluster import find_repo_root
from atomdyn_launchers.config.recipes import RecipeError, load_recipe, parse_recipe
from atomdyn_launchers.profiles.models import get_model

REPO = find_repo_root(Path(__file__).parent)
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))

MINIMAL = """\
schema_version: 1
name: t
engine: mocker
kind: disagg
layout:
  prefill: {workers: 2}
  decode: {workers: 3}
"""


def test_published_schema_is_the_one_that_validates() -> None:
    published = json.loads((REPO / "recipes" / "schema.json").read_text(encoding="utf-8"))
    assert published == recipes.SCHEMA, (
        "recipes/schema.json is stale: python -m atomdyn_launchers.config.recipes --write-schema recipes/schema.json"
    )


def test_shipped_recipes_parse_and_name_known_models() -> None:
    names = {p.stem for p in RECIPES}
    assert {
        "rehearsal-1p1d",
        "rehearsal-2p4d",
        "qwen3-8b-agg-single",
        "qwen3-8b-agg-two",
        "qwen3-8b-1p1d",
    } <= names
    assert "qwen3.5-397b-mxfp4-agg" in names
    for path in RECIPES:
        recipe = load_recipe(path)
        assert recipe.name == path.stem
        if recipe.model is not None:
            get_model(recipe.model)  # raises for an unknown profile


def test_shipped_recipes_are_listed_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in RECIPES if f"recipes/{p.name}" not in readme]
    assert not missing, f"README.md does not list {missing}"


def test_minimal_recipe_defaults() -> None:
    recipe = parse_recipe(MINIMAL)
    assert recipe.run_kind() == "disagg"
    assert recipe.layout_text() == "2P3D"
    assert recipe.router_mode == "kv"
    assert recipe.benchmark is None


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ("colour: blue\n", "colour: unknown key 'colour'"),
        ("router: {mode: kv, temperature: 1}\n", "router.temperature: unknown key 'temperature'"),
        ("benchmark: {tool: aiperf, concurrency: [1], slo: {ttft: 3}}\n", "benchmark.slo.ttft: unknown key"),
    ],
)
def test_unknown_key_is_refused_naming_its_path(patch: str, named: str) -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe(MINIMAL + patch, "r.yaml")
    assert named in str(err.value)
    assert str(err.value).startswith("r.yaml: ")


def test_unknown_key_inside_the_layout() -> None:
    text = MINIMAL.replace("decode: {workers: 3}", "decode: {workers: 3, gpu: 1}")
    with pytest.raises(RecipeError, match=r"layout\.decode\.gpu: unknown key 'gpu'"):
        parse_recipe(text)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("schema_version: 1", "schema_version: 2", "schema_version 2 is not supported"),
        ("engine: mocker", "engine: trtllm", "engine: 'trtllm' is not one of"),
        ("{workers: 2}", "{workers: 0}", "layout.prefill.workers: 0 is below the minimum 1"),
        ("{workers: 2}", "{workers: two}", "layout.prefill.workers: must be an integer, not str"),
        ("kind: disagg", "kind: agg", "layout.agg: required for kind agg"),
        ("name: t\n", "", "name: required key missing"),
    ],
)
def test_invalid_values_are_named(old: str, new: str, message: str) -> None:
    with pytest.raises(RecipeError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_recipe(MINIMAL.replace(old, new, 1))


def test_a_key_given_twice_is_refused() -> None:
    with pytest.raises(RecipeError, match="key 'engine' given twice"):
        parse_recipe(MINIMAL + "engine: vllm\n")


def test_mocker_section_only_for_the_mock_engine() -> None:
    text = MINIMAL.replace("engine: mocker", "engine: vllm") + "mocker: {speedup_ratio: 5}\n"
    with pytest.raises(RecipeError, match="mocker: only for engine mocker"):
        parse_recipe(text)


def test_slurm_time_limit_format() -> None:
    with pytest.raises(RecipeError, match=r"slurm\.time_limit"):
        parse_recipe(MINIMAL + "slurm: {time_limit: 30min}\n")
    assert parse_recipe(MINIMAL + "slurm: {time_limit: 1-00:30:00}\n").time_limit == "1-00:30:00"


def test_cli_checks_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(MINIMAL + "extra: 1\n", encoding="utf-8")
    assert recipes.main([str(bad)]) == 1
    assert "extra: unknown key 'extra'" in capsys.readouterr().err
    out = tmp_path / "schema.json"
    assert recipes.main(["--write-schema", str(out), str(RECIPES[0])]) == 0
    assert json.loads(out.read_text(encoding="utf-8")) == recipes.SCHEMA


def test_zero_kv_bandwidth_is_refused() -> None:
    """Dynamo 1.3's mocker answers every P/D request with HTTP 500 at --kv-transfer-bandwidth 0 (seen on the
    8-node rehearsal): the recipe refuses it."""
    with pytest.raises(RecipeError, match=r"mocker\.kv_transfer_bandwidth_gbps: 0 must be above 0"):
        parse_recipe(MINIMAL + "mocker: {kv_transfer_bandwidth_gbps: 0}\n")
    assert parse_recipe(MINIMAL + "mocker: {kv_transfer_bandwidth_gbps: 0.5}\n").mocker is not None


# -- hostile input (issue 25): aliases, what errors quote, whole-string patterns, keys, bounds -----------------

BOMB = (
    "a: &a ["
    + ", ".join(["lol"] * 9)
    + "]\n"
    + "".join(
        f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
        for prev, name in zip("abcdefg", "bcdefgh", strict=True)
    )
)


def test_an_alias_bomb_is_refused_before_it_expands() -> None:
    """Nine lists of nine, eight deep (a few hundred bytes): quoting the value expanded it into a message of
    tens of megabytes. A recipe has no use for aliases: the first one is refused, naming its line."""
    text = MINIMAL.replace("kind: disagg", "kind: *h") + BOMB
    assert len(text.encode()) < 700
    with pytest.raises(RecipeError) as err:
        parse_recipe(text, "r.yaml")
    message = str(err.value)
    assert len(message) < 300, len(message)
    assert message.startswith("r.yaml: line 4: alias *h: a recipe does not use YAML anchors and aliases")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("decode: {workers: 3}", "decode: *p"),  # a harmless-looking alias is refused too
        ("decode: {workers: 3}", "decode: {<<: *p}"),  # and so is a merge key, which is one
    ],
)
def test_aliases_and_merge_keys_are_refused(old: str, new: str) -> None:
    text = MINIMAL.replace("prefill: {workers: 2}", "prefill: &p {workers: 2}").replace(old, new)
    with pytest.raises(
        RecipeError, match=r"line 7: alias \*p: a recipe does not use YAML anchors and aliases"
    ):
        parse_recipe(text)


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ("router: {mode: " + "x" * 1_000_000 + "}\n", "router.mode: 'xxxx"),
        ("name2: " + "y" * 1_000_000 + "\n", "name2: unknown key"),
        ('? "' + "k" * 1_000_000 + '"\n: 1\n', "unknown key 'kkkk"),
        # 20,000 items quote 100 times past the bound and parse in a tenth of the time 200,000 take.
        ("description: [" + ", ".join(["1"] * 20_000) + "]\n", "description: must be a string, not list"),
        ("engine: [" + ", ".join(["vllm"] * 20_000) + "]\n", "engine: ['vllm', 'vllm'"),
    ],
)
def test_what_an_error_quotes_is_bounded(patch: str, named: str) -> None:
    text = MINIMAL.replace("engine: mocker\n", "") + (
        patch if "engine" in patch else "engine: mocker\n" + patch
    )
    with pytest.raises(RecipeError) as err:
        parse_recipe(text, "r.yaml")
    message = str(err.value)
    assert named in message and len(message) < 1000, (len(message), message[:300])


def test_nesting_is_bounded() -> None:
    text = MINIMAL + "description: " + "[" * 5000 + "]" * 5000 + "\n"
    with pytest.raises(RecipeError, match=r"line 8: nested deeper than 32 levels"):
        parse_recipe(text)


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ('slurm: {time_limit: "02:00:00\\n"}\n', r"slurm\.time_limit: '02:00:00\\n' does not match"),
        ('slurm: {time_limit: "02:00:00\\r\\n"}\n', r"slurm\.time_limit: '02:00:00\\r\\n' does not match"),
    ],
)
def test_a_trailing_newline_does_not_pass_a_pattern(patch: str, named: str) -> None:
    with pytest.raises(RecipeError, match=named):
        parse_recipe(MINIMAL + patch)


def test_a_node_name_or_recipe_name_ending_in_a_newline_is_refused() -> None:
    with pytest.raises(RecipeError, match=r"layout\.nodes\[1\]: 'b\\n' does not match"):
        parse_recipe(MINIMAL + '  nodes: [a, "b\\n", c, d, e]\n')
    with pytest.raises(RecipeError, match=r"name: 't\\n' does not match"):
        parse_recipe(MINIMAL.replace("name: t", 'name: "t\\n"'))


def test_every_pattern_is_anchored() -> None:
    """validate() matches a pattern against the whole string; JSON Schema searches, so each is ^...$. Python's $
    also matches before a final newline, which is why the recipe validator full-matches instead of searching."""
    stock = Draft202012Validator({"pattern": recipes._TIME})
    assert stock.is_valid("02:00:00\n")  # what a plain search lets through, and the recipe refuses

    def patterns(node: object) -> list[str]:
        if isinstance(node, dict):
            return ([node["pattern"]] if "pattern" in node else []) + [
                p for v in node.values() for p in patterns(v)
            ]
        return [p for v in node for p in patterns(v)] if isinstance(node, list) else []

    found = patterns(recipes.SCHEMA)
    assert len(found) >= 3 and all(p.startswith("^") and p.endswith("$") for p in found), found


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ("? [a, b]\n: x\n", "line 8: key ['a', 'b'] is not a name"),
        ("? {a: 1}\n: x\n", "line 8: key {'a': 1} is not a name"),
        ("1: x\n", "line 8: key 1 is not a name"),
        ("~: x\n", "line 8: key None is not a name"),
        ("layout2:\n  ? [a]\n  : 1\n  ? [a]\n  : 2\n", "line 9: key ['a'] is not a name"),
    ],
)
def test_a_key_that_is_not_a_string_is_refused(patch: str, named: str) -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe(MINIMAL + patch, "r.yaml")
    assert str(err.value).startswith(f"r.yaml: {named}"), str(err.value)


def test_values_yaml_reads_as_dates_are_named_not_a_traceback() -> None:
    with pytest.raises(RecipeError, match=r"layout\.nodes\[0\]: must be a string, not date"):
        parse_recipe(MINIMAL + "  nodes: [2024-01-01, 2024-01-01, c, d, e]\n")


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ("mocker: {speedup_ratio: .nan}\n", "mocker.speedup_ratio: must be a finite number, not nan"),
        ("mocker: {kv_transfer_bandwidth_gbps: .nan}\n", "mocker.kv_transfer_bandwidth_gbps: must be a finite"),
        ("mocker: {kv_transfer_bandwidth_gbps: .inf}\n", "mocker.kv_transfer_bandwidth_gbps: must be a finite"),
        ("mocker: {speedup_ratio: 1.0e+9}\n", "mocker.speedup_ratio: 1000000000.0 is above the maximum 1000000"),
        ("mocker: {kv_bytes_per_token: 1000.0}\n", "mocker.kv_bytes_per_token: must be an integer, not float"),
        ("mocker: {kv_bytes_per_token: 4294967296}\n", "kv_bytes_per_token: 4294967296 is above the maximum"),
        ("smoke: {requests: 1000000000000000000000}\n", "smoke.requests: 1000000000000000000000 is above the "
         "maximum 10000"),
        ("smoke: {concurrency: 100000}\n", "smoke.concurrency: 100000 is above the maximum 1024"),
        ("smoke: {max_tokens: 10000000}\n", "smoke.max_tokens: 10000000 is above the maximum 131072"),
        ("benchmark: {tool: aiperf, concurrency: [1, 100000]}\n", "benchmark.concurrency[1]: 100000 is above"),
        ("benchmark: {tool: aiperf, concurrency: [1], requests_per_level: 100000000}\n", "requests_per_level: "
         "100000000 is above the maximum 100000"),
        ("benchmark: {tool: aiperf, concurrency: [1], input_tokens: 10000000}\n", "input_tokens: 10000000 is "
         "above the maximum 1048576"),
        ("benchmark: {tool: aiperf, concurrency: [1], slo: {ttft_ms: .nan}}\n", "benchmark.slo.ttft_ms: must be "
         "a finite number, not nan"),
        ("benchmark: {tool: aiperf, concurrency: [1], slo: {itl_ms: 1.0e+300}}\n", "benchmark.slo.itl_ms: 1e+300 is "
         "above the maximum 3600000"),
    ],
)  # fmt: skip
def test_numbers_are_finite_and_bounded(patch: str, named: str) -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe(MINIMAL + patch)
    assert named in str(err.value), str(err.value)


def test_numbers_within_the_bounds_are_kept() -> None:
    recipe = parse_recipe(
        MINIMAL
        + "smoke: {requests: 10000, concurrency: 1024, max_tokens: 131072}\n"
        + "mocker: {speedup_ratio: 1000000, kv_transfer_bandwidth_gbps: 1000000, kv_bytes_per_token: 147456}\n"
    )
    assert (recipe.requests, recipe.concurrency, recipe.max_tokens) == (10000, 1024, 131072)
    assert recipe.mocker is not None and recipe.mocker.kv_transfer_bandwidth_gbps == 1000000


# -- the reference validator (jsonschema): what the hand-written subset got wrong ------------------------------


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("schema_version: 1", "schema_version: true", "schema_version: must be 1, not True"),
        ("{workers: 2}", "{workers: true}", "layout.prefill.workers: must be an integer, not bool"),
        ("{workers: 3}", "{workers: 3, gpus_per_worker: false}", "layout.decode.gpus_per_worker: must be an "
         "integer, not bool"),
    ],
)  # fmt: skip
def test_a_boolean_is_not_a_number(old: str, new: str, named: str) -> None:
    """YAML's true is Python's True, and True == 1: the hand-written validator took `schema_version: true` for
    version 1. JSON Schema's booleans are not numbers, nor equal to one."""
    with pytest.raises(RecipeError) as err:
        parse_recipe(MINIMAL.replace(old, new, 1))
    assert named in str(err.value), str(err.value)


def test_the_validator_is_the_reference_one_for_the_schemas_draft() -> None:
    draft = validator_for(recipes.SCHEMA)
    assert draft is Draft202012Validator  # what "$schema" names
    draft.check_schema(recipes.SCHEMA)  # the published schema is itself valid
    assert type(recipes._VALIDATOR).META_SCHEMA == draft.META_SCHEMA  # extended (types, full-match patterns)
    assert '"format":' not in json.dumps(recipes.SCHEMA)  # no formats: no format checker to configure


def test_every_problem_is_reported_in_the_schemas_order() -> None:
    """All problems, not the first: each object's unknown keys, then its keys in the schema's order, then what it
    lacks; the same recipe always gives the same message."""
    text = MINIMAL.replace("name: t\n", "").replace("{workers: 3}", "{workers: 0, gpu: 1}")
    with pytest.raises(RecipeError) as err:
        parse_recipe(text + "smoke: {requests: x}\ncolour: blue\n", "r.yaml")
    assert str(err.value) == (
        "r.yaml: colour: unknown key 'colour' (known here: schema_version, name, description, engine, model, kind, "
        "layout, router, slurm, smoke, mocker, benchmark, accuracy); "
        "layout.decode.gpu: unknown key 'gpu' (known here: workers, nodes_per_worker, gpus_per_worker); "
        "layout.decode.workers: 0 is below the minimum 1; "
        "smoke.requests: must be an integer, not str; "
        "name: required key missing"
    )


def test_each_missing_key_is_named_once() -> None:
    text = MINIMAL.replace("schema_version: 1\n", "").replace("name: t\n", "")
    with pytest.raises(RecipeError) as err:
        parse_recipe(text)
    assert str(err.value) == "<recipe>: schema_version: required key missing; name: required key missing"


@pytest.mark.parametrize(
    ("patch", "named"),
    [
        ("  nodes: []\n", "layout.nodes: needs at least 1 item(s)"),
        ("  nodes: [a, a]\n", "layout.nodes: items must be unique"),
        ("benchmark: {tool: aiperf, concurrency: [1], streaming: 1}\n", "benchmark.streaming: must be a boolean, "
         "not int"),
    ],
)  # fmt: skip
def test_lists_and_booleans_are_checked(patch: str, named: str) -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe(MINIMAL + patch)
    assert named in str(err.value), str(err.value)
