"""No import cycle between the modules of `functions/scheduler`, counting every import a module makes: at its top, in
a function, or under TYPE_CHECKING (a cycle hidden in a lazy import is still two modules that cannot be read apart).
The layers between the rooms are import-linter's contracts in pyproject.toml, run by scripts/test."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "scheduler"


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package that `path` imports (a `from a import b` names module a.b when there is one)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
            names.add(node.module)
    resolved = set()
    for name in names:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            resolved.add(name)
    return resolved


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = _modules(root)
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_module_of_the_functions_is_in_an_import_cycle() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def test_a_cycle_through_a_lazy_or_type_checking_import_is_found(tmp_path: Path) -> None:
    # Given two modules that import each other, one of them only under TYPE_CHECKING, and a third inside a function
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import thing\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    (package / "c.py").write_text("def f():\n    import pkg.a\n")
    # Then the pair is a cycle, and c (which only imports) is in none
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b"]]


def test_the_core_has_at_most_five_files_at_its_root() -> None:
    root_files = sorted(path.name for path in (PACKAGE / "core").glob("*.py"))
    assert len(root_files) <= 5, root_files
