"""Run recipes: strict validation (unknown keys named with their path), the published JSON Schema, the shipped
recipes, and how command-line flags combine with a recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
        ("engine: mocker", "engine: sglang", "engine: 'sglang' is not one of"),
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
