"""What the project says about UCX, held to the pinned sources (issue 34, defects 5 and 6).

5. On the default path VRAM is host memory to UCX because the launchers give it no ROCm transport: rocm_cpy is
   the only memory domain that detects ROCm memory (src/uct/rocm/copy/rocm_copy_md.c, detect_mem_types) and UCX
   closes a memory domain with no selected transport ("closing md %s because it has no selected transport
   resources", src/ucp/core/ucp_context.c at b56982d8). The NIXL patch's description said a UCX "built --with-rocm
   can still classify a GPU buffer as HOST", as if it were UCX's doing; it must name the cause and what keeps the
   path safe.
6. "GID index 1 is the IPv4 RoCE v2 GID on ionic" is in no pinned source (UCX's UCX_IB_GID_INDEX default is auto,
   src/uct/ib/base/ib_md.c): 1 is the project's checked default, and nothing may say otherwise.
"""

from __future__ import annotations

import re
from pathlib import Path

from atomdyn_launchers.engines import atom

REPO = Path(__file__).resolve().parents[4]
PATCH = REPO / "patches" / "0001-ucx-opt-in-host-classified-vram.patch"
# A GID index stated as ionic's own (any spelling of RoCE v2).
IONIC_GID_CLAIM = re.compile(
    r"ionic'?s? IPv4 RoCE ?v2 GID|IPv4 RoCE ?v2 GID on ionic|\b1 is (?:the )?(?:ionic's )?IPv4 RoCE ?v2 GID|"
    r"GID 1 on ionic|ionic: 1 is",
    re.IGNORECASE,
)


def _texts() -> list[Path]:
    """The project's own text: docs, sources, configuration, patches, test doubles (not the tests' fixtures)."""
    roots = [REPO / "docs", REPO / "config", REPO / "patches", REPO / "testing", *REPO.glob("packages/*/src")]
    files = [REPO / "README.md"]
    for root in roots:
        files += [
            p
            for p in root.rglob("*")
            if p.is_file() and p.suffix in {".md", ".py", ".patch", ".example", ".c", ".cpp", ".h", ".txt"}
        ]
    return files


def test_the_nixl_patch_says_the_host_classification_is_the_projects_and_what_keeps_it_safe() -> None:
    header = PATCH.read_text().split("\n---\n", 1)[0]
    flat = " ".join(header.split())
    assert "can still classify" not in flat
    assert "closing md %s because it has no selected transport resources" in flat
    assert "rocm_cpy is the only one that detects ROCm memory" in flat
    assert "their own doing, not a UCX defect" in flat
    # What keeps it safe (judged by the gates) and what would not be.
    assert "kv_rows_not_zero_copy" in flat and "would not be safe" in flat
    for unsafe in ("copy-in", "software emulation", "cma"):
        assert unsafe in flat


def test_the_docs_and_comments_say_so_too() -> None:
    nixl_path = " ".join((REPO / "docs" / "nixl-path.md").read_text().split())
    assert "closing md %s because it has no selected transport resources" in nixl_path
    assert "project's own choice, not a UCX defect" in nixl_path
    source = " ".join(Path(atom.__file__).read_text().split())
    assert "the project's choice, not a UCX defect" in source


def test_no_text_states_a_gid_index_as_ionics() -> None:
    claims = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in _texts()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if IONIC_GID_CLAIM.search(line)
    ]
    assert claims == []
    # Where the default is stated, it is the project's.
    example = (REPO / "config" / "cluster.env.example").read_text()
    assert "default 1: the project's default, not UCX's, which is auto" in " ".join(
        example.replace("#", "").split()
    )
