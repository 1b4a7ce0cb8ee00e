"""Write a PEP 503 simple index of the wheels and sdists in a directory (`nox -s release` runs it on dist/).

    DIST/simple/index.html                     one link per project
    DIST/simple/<normalized-name>/index.html   one link per file, `../../<file>#sha256=<hex>`

so that `pip install --index-url file:///.../DIST/simple NAME` works with no network. The pages depend only on
the files' names, bytes and metadata (sorted, no dates), so the same files give byte-identical pages.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections import defaultdict
from email.parser import HeaderParser
from pathlib import Path

PAGE = '<!DOCTYPE html>\n<html>\n<head><meta name="pypi:repository-version" content="1.0"><title>{title}</title></head>\n<body>\n{links}</body>\n</html>\n'


def normalize(name: str) -> str:
    """PEP 503 name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def project_of(artifact: Path) -> str:
    """The project a wheel or sdist belongs to, from its file name (PEP 427 / PEP 625)."""
    if artifact.name.endswith(".whl"):
        return normalize(artifact.name.split("-", 1)[0])
    if artifact.name.endswith(".tar.gz"):
        return normalize(artifact.name[: -len(".tar.gz")].rsplit("-", 1)[0])
    raise ValueError(f"{artifact.name}: neither a wheel nor an sdist")


def requires_python(artifact: Path) -> str | None:
    """Requires-Python from the artifact's own metadata, for pip to skip files this Python cannot use."""
    if artifact.name.endswith(".whl"):
        with zipfile.ZipFile(artifact) as archive:
            [name] = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
            text = archive.read(name).decode()
    else:
        with tarfile.open(artifact) as archive:
            [member] = [m for m in archive.getmembers() if re.fullmatch(r"[^/]+/PKG-INFO", m.name)]
            extracted = archive.extractfile(member)
            if extracted is None:
                raise ValueError(f"{artifact.name}: PKG-INFO is not a file")
            text = extracted.read().decode()
    return HeaderParser().parsestr(text).get("Requires-Python")


def link(artifact: Path) -> str:
    digest = hashlib.sha256(artifact.read_bytes()).hexdigest()
    href = html.escape(f"../../{artifact.name}#sha256={digest}")
    needs = requires_python(artifact)
    attribute = f' data-requires-python="{html.escape(needs)}"' if needs else ""
    return f'<a href="{href}"{attribute}>{html.escape(artifact.name)}</a><br>\n'


def pages(dist: Path) -> dict[str, str]:
    """Relative path under dist/simple -> page text."""
    files: dict[str, list[Path]] = defaultdict(list)
    for artifact in sorted(dist.iterdir()):
        if artifact.is_file() and artifact.name.endswith((".whl", ".tar.gz")):
            files[project_of(artifact)].append(artifact)
    if not files:
        raise ValueError(f"{dist}: no wheels or sdists to index")
    out = {
        "index.html": PAGE.format(
            title="Simple index",
            links="".join(f'<a href="{name}/">{name}</a><br>\n' for name in sorted(files)),
        )
    }
    for name, artifacts in sorted(files.items()):
        out[f"{name}/index.html"] = PAGE.format(
            title=f"Links for {name}", links="".join(link(a) for a in artifacts)
        )
    return out


def write_index(dist: Path) -> Path:
    """Build the whole index beside dist/simple, then swap it in: a failure leaves no half-written index."""
    target = dist / "simple"
    staging = Path(tempfile.mkdtemp(prefix=".simple-", dir=dist))
    try:
        for relative, text in pages(dist).items():
            page = staging / relative
            page.parent.mkdir(parents=True, exist_ok=True)
            page.write_text(text, encoding="utf-8")
            page.chmod(0o644)
        staging.chmod(0o755)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path, help="directory holding the wheels and sdists")
    args = parser.parse_args(argv)
    try:
        target = write_index(args.dist)
    except (OSError, ValueError) as exc:
        print(f"simple_index: {exc}", file=sys.stderr)
        return 2
    print(f"simple_index: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
