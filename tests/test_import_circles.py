"""No import circles among the project's modules (issue 43: the tree reads as the data flow).

Every `import` / `from ... import` in sluice/, data_assets/, resources/ and benchmarks/ (function-level and
TYPE_CHECKING ones included: a lazy import hides a circle, it does not remove it) is an edge from the
importing module to the imported one: to `pkg.name` where that is a module, else to `pkg`. A package's
`__init__` importing its own submodules is not counted against the submodules (Python imports a package
before its submodules; that direction is the package's own)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sluice", "data_assets", "resources", "benchmarks")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parent = ".".join(base[: len(base) - node.level + 1] if node.level else [])
            module = ".".join(part for part in (parent, node.module or "") if part) if node.level else node.module or ""
            for alias in node.names:
                targets.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
    edges = set()
    for target in targets:
        while target and target not in known:  # `import a.b.c` of a non-module attribute: its module
            target = target.rpartition(".")[0]
        if target and target != name and not (is_package and target.startswith(name + ".")):
            edges.add(target)
    return edges


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_sees_a_circle_and_a_lazy_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles_in_the_project():
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert graph["benchmarks.cleaning"] and graph["sluice.loader.torch_loader"]  # the graph is read, not empty
    assert circles(graph) == []
