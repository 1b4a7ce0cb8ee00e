"""Every import of another of the monorepo's packages is a declared dependency of the importing one.

Read from the sources themselves (every import statement in each package's ``src``, lazy imports inside
functions included), not from a list kept beside them. Which package may import which (one direction, no
cycle, the node-side packages independent) is import-linter's to check in ``nox -s lint`` (.importlinter).
"""

from __future__ import annotations

import ast
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[3]
PACKAGES = REPO / "packages"


def _distributions() -> dict[str, Path]:
    """Each package directory by its distribution name."""
    found = {}
    for pyproject in sorted(PACKAGES.glob("*/pyproject.toml")):
        name = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["name"]
        found[name] = pyproject.parent
    return found


def _top_level_modules(package_dir: Path) -> set[str]:
    src = package_dir / "src"
    return {p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.py"))} if src.is_dir() else set()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(node: ast.AST) -> list[ast.AST]:
    """Every node that runs: the body of ``if TYPE_CHECKING:`` is for the type checker only."""
    found = [node]
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                found += _runtime_nodes(other)
        else:
            found += _runtime_nodes(child)
    return found


def _imported_top_levels(package_dir: Path) -> dict[str, set[str]]:
    """Top-level module name -> the files (relative to the package) importing it at run time."""
    found: dict[str, set[str]] = {}
    for path in sorted((package_dir / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _runtime_nodes(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(package_dir)))
    return found


def dependency_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], set[str]]]:
    """Package -> packages its sources import, and for each edge the importing files."""
    distributions = _distributions()
    owner = {module: name for name, d in distributions.items() for module in _top_level_modules(d)}
    graph: dict[str, set[str]] = {name: set() for name in distributions}
    where: dict[tuple[str, str], set[str]] = {}
    for name, package_dir in distributions.items():
        for module, files in _imported_top_levels(package_dir).items():
            target = owner.get(module)
            if target is not None and target != name:
                graph[name].add(target)
                where.setdefault((name, target), set()).update(files)
    return graph, where


def test_imports_for_the_type_checker_only_are_not_dependencies() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nelse:\n    import b\n"
    )
    imported = {n.names[0].name for n in _runtime_nodes(tree) if isinstance(n, ast.Import)}
    assert imported == {"b"}


def test_the_package_graph_reads_every_package_and_real_edges() -> None:
    graph, where = dependency_graph()
    assert {"atomdyn-core", "atomdyn-image-builder", "atomdyn-launchers"} <= set(graph)
    # Sanity: an edge the code certainly has, so an empty graph (nothing parsed) cannot pass the test below.
    assert "atomdyn-core" in graph["atomdyn-image-builder"], where


def test_every_import_of_another_package_is_a_declared_dependency() -> None:
    graph, where = dependency_graph()
    undeclared = []
    for name, package_dir in _distributions().items():
        project = tomllib.loads((package_dir / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        declared = set(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            declared.update(extra)
        declared_names = {d.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip()
                          for d in declared}  # fmt: skip
        undeclared += [f"{name} -> {t} ({', '.join(sorted(where[(name, t)]))})"
                       for t in sorted(graph[name]) if t not in declared_names]  # fmt: skip
    assert not undeclared, "imports of packages not declared as dependencies:\n" + "\n".join(undeclared)
