"""The run's options: flags parsed once (a bad number names its flag), merged over a recipe."""

from __future__ import annotations

import re

import pytest

from atomdyn_launchers.config.recipes import RecipeError, parse_recipe
from atomdyn_launchers.run.options import Flags, LaunchOptions, OptionError, resolve

MINIMAL = """\
schema_version: 1
name: t
engine: mocker
kind: disagg
layout:
  prefill: {workers: 2}
  decode: {workers: 3}
"""


def test_flags_given_override_the_recipe() -> None:
    recipe = parse_recipe(MINIMAL + "smoke: {requests: 32, concurrency: 8}\nmocker: {speedup_ratio: 20}\n")
    options = resolve("disagg", None, Flags(requests=4), recipe)
    assert options.requests == 4
    assert options.concurrency == 8
    assert options.speedup_ratio == 20
    assert options.engine == "mocker"
    assert (options.prefill_workers, options.decode_workers) == (2, 3)
    assert options.recipe is recipe


def test_without_a_recipe_the_flags_and_the_defaults() -> None:
    options = resolve("agg", "agg-two", Flags.parse(requests="4", concurrency=None, ready_timeout="30"))
    assert options == LaunchOptions(kind="agg-two", requests=4, ready_timeout_s=30.0)
    assert resolve("disagg", None, Flags()).kind == "disagg"


def test_the_first_response_budget_is_a_flag_over_the_recipe_and_the_engines_default() -> None:
    flags = Flags.parse(first_response_timeout="45")
    assert resolve("disagg", None, flags).first_response_timeout_s == 45.0
    assert resolve("disagg", None, flags, parse_recipe(MINIMAL)).first_response_timeout_s == 45.0
    assert resolve("disagg", None, Flags()).first_response_timeout_s is None  # the engine's then


def test_recipe_of_the_other_kind_is_refused() -> None:
    with pytest.raises(RecipeError, match=re.escape("run it with `invoke disagg.run --recipe`")):
        resolve("agg", None, Flags(), parse_recipe(MINIMAL, "x.yaml"))


def test_a_node_count_against_the_recipe_is_refused() -> None:
    agg = MINIMAL.replace("kind: disagg", "kind: agg").replace(
        "  prefill: {workers: 2}\n  decode: {workers: 3}\n", "  agg: {workers: 1}\n"
    )
    with pytest.raises(
        OptionError, match=re.escape("--nodes asks for agg-two, the recipe a.yaml for agg-single")
    ):
        resolve("agg", "agg-two", Flags(), parse_recipe(agg, "a.yaml"))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"requests": "many"}, "--requests must be a number, not 'many'"),
        ({"concurrency": "2.5"}, "--concurrency must be a number, not '2.5'"),
        ({"ready_timeout": "soon"}, "--ready-timeout must be a number, not 'soon'"),
        ({"first_response_timeout": "later"}, "--first-response-timeout must be a number, not 'later'"),
    ],
)
def test_a_bad_number_names_its_flag(given: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=re.escape(message)):
        Flags.parse(**given)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"requests": "1000000000000000000000"}, "--requests must be 1 to 10000, not 1000000000000000000000"),
        ({"requests": "0"}, "--requests must be 1 to 10000, not 0"),
        ({"concurrency": "-3"}, "--concurrency must be 1 to 1024, not -3"),
        ({"concurrency": 100000}, "--concurrency must be 1 to 1024, not 100000"),
        ({"ready_timeout": "nan"}, "--ready-timeout must be a finite number of seconds above 0, not nan"),
        ({"ready_timeout": "inf"}, "--ready-timeout must be a finite number of seconds above 0, not inf"),
        ({"ready_timeout": "-1"}, "--ready-timeout must be a finite number of seconds above 0, not -1.0"),
        (
            {"first_response_timeout": "0"},
            "--first-response-timeout must be a finite number of seconds above 0, not 0.0",
        ),
    ],
)
def test_a_number_out_of_bounds_names_its_flag_and_the_bounds(given: dict[str, object], message: str) -> None:
    """The same bounds as the recipe's smoke section: a flag given explicitly is used instead of it."""
    with pytest.raises(OptionError, match=re.escape(message)):
        Flags.parse(**given)  # type: ignore[arg-type]
