"""The modules of pgmem import each other without a circle: the import graph, built from every ``import`` in
pgmem/ (at module level and inside function bodies, where the lazy imports are), is acyclic, so every module
can be read after the ones it uses."""

from __future__ import annotations

import ast
from pathlib import Path

import pgmem

PACKAGE = Path(pgmem.__file__).resolve().parent


def module_names() -> dict[str, Path]:
    """Dotted name -> file of every module of the package (a package is its ``__init__.py``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("pgmem",) + path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the pgmem modules it imports anywhere in its file. ``from X import name`` imports X, and also
    the module X.name when that is a module. A module's own packages are left out: Python runs a package's
    ``__init__`` before any module in it, so ``from . import x`` in ``pgmem.a.b`` is no arrow back to
    ``pgmem.a``."""
    modules = module_names()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [source] + [f"{source}.{a.name}" for a in node.names]
            ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
            graph[name] |= {t for t in targets if t in modules and t != name and t not in ancestors}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_imports_and_finds_a_circle():
    """The check itself: function-level imports are edges, and a circle through them is found."""
    graph = import_graph()
    assert "pgmem.embedded" in graph["pgmem.transport"]  # `from . import embedded, migrations` inside a function
    assert "pgmem.client" in graph["pgmem.cli.options"]  # `from ..client import Memory` inside memory()
    assert cycles({**graph, "pgmem.errors": graph["pgmem.errors"] | {"pgmem.client"}})


def test_no_import_circle_in_pgmem():
    assert cycles(import_graph()) == []
