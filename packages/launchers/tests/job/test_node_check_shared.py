"""nodes.check's shared-dir check names SHARED_DIR when a node does not see it."""

from __future__ import annotations

from pathlib import Path

from atomdyn_launchers.job.node_check import FAIL, PASS, _shared


def _spec(shared: Path, token: str = "t0ken") -> dict[str, str]:
    return {
        "token_path": str(shared / "nodes" / "check-x" / "shared-token"),
        "token": token,
        "shared_dir": str(shared),
    }


def test_a_node_that_does_not_see_shared_dir_is_told_so(tmp_path: Path) -> None:
    shared = tmp_path / "not-mounted-here"
    check = _shared(_spec(shared))
    assert check.status == FAIL
    assert check.detail.startswith(f"SHARED_DIR {shared} is not visible on this node (")


def test_another_directory_at_the_same_path_is_told_apart(tmp_path: Path) -> None:
    token = tmp_path / "nodes" / "check-x" / "shared-token"
    token.parent.mkdir(parents=True)
    token.write_text("someone-else")
    check = _shared(_spec(tmp_path))
    assert check.status == FAIL and f"SHARED_DIR {tmp_path} is another directory on this node" in check.detail
    token.write_text("t0ken")
    assert _shared(_spec(tmp_path)).status == PASS
