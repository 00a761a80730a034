"""One import direction, no import circles.

The import graph of `harness` and `controller` is read statically (ast): every `import` and `from ... import`
anywhere in a module, module level or inside a function (a lazy import is still a dependency), relative imports
resolved. It must have no circle between modules, and the harness must never import the controller (the
controller builds on the harness, not the other way round).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "controller")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    lazy: bool  # inside a function (or method): runs when called, not when the module is imported

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}{', in a function' if self.lazy else ''})"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(root, path)] = path
    return found


class _Collector(ast.NodeVisitor):
    def __init__(self) -> None:
        self.imports: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
        self._depth = 0

    def _function(self, node: ast.AST) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        self.imports.append((node, self._depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.imports.append((node, self._depth > 0))


def _resolve_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    package = parts if is_package else parts[:-1]
    if node.level - 1 > len(package):
        raise ValueError(f"{module}: relative import beyond the top-level package (line {node.lineno})")
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest module of `name` (a.b.c -> a.b.c, or a.b when c is an attribute) that is in the graph."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_edges(root: Path, packages: tuple[str, ...] = PACKAGES, unresolved: list[str] | None = None) -> list[Edge]:
    """Every import from one module of `packages` to another (imports of anything else are left out). An import
    into `packages` that names no module there is appended to `unresolved`, when given."""
    modules = _modules(root, packages)
    edges: list[Edge] = []
    for module, path in modules.items():
        collector = _Collector()
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        is_package = path.name == "__init__.py"
        for node, lazy in collector.imports:
            if isinstance(node, ast.Import):
                targets = [_known(alias.name, modules) for alias in node.names]
                wanted = [alias.name for alias in node.names]
            else:
                base = _resolve_base(module, is_package, node)
                wanted = [base]
            if unresolved is not None:
                unresolved += [f"{module} (line {node.lineno}): {name}" for name in wanted
                               if name.split(".")[0] in packages and name not in modules]
            if isinstance(node, ast.ImportFrom):
                targets = []
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    # `from pkg import sub` depends on the submodule; `from mod import name`, on the module.
                    targets.append(submodule if submodule in modules else _known(base, modules))
            for target in targets:
                if target is not None and target != module:
                    edges.append(Edge(module, target, node.lineno, lazy))
    return sorted(set(edges), key=lambda e: (e.source, e.target, e.line))


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of more than one node (or with a self-edge), each as the
    path of nodes [a, b, ..., a], starting at the component's smallest node; sorted, so the result is stable."""
    return sorted(_circle_in(component, graph) for component in knots(graph))


def knots(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with a circle in them: every module of one can reach every other."""
    nodes = set(graph) | {t for targets in graph.values() for t in targets}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        # Tarjan's algorithm, iteratively (no recursion limit on deep graphs).
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    components.append(component)
    return components


def _circle_in(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest circle through the component's smallest node (breadth-first, inside the component)."""
    start = min(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child not in component:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no circle in component {sorted(component)}")  # unreachable for an SCC


def graph_of(edges: list[Edge]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
    return graph


def describe(cycle: list[str], edges: list[Edge]) -> str:
    knot = next(k for k in knots(graph_of(edges)) if cycle[0] in k)
    steps = []
    for source, target in zip(cycle, cycle[1:]):
        where = [e for e in edges if e.source == source and e.target == target]
        steps.append(str(min(where, key=lambda e: e.line)) if where else f"{source} -> {target}")
    text = "circle: " + " -> ".join(cycle) + "\n    " + "\n    ".join(steps)
    if len(knot) > len(cycle) - 1:
        text += "\n    (one of the circles among " + ", ".join(sorted(knot)) + ")"
    return text


# --- the cycle finder on small graphs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "graph, cycles",
    [
        ({}, []),
        ({"a": set()}, []),
        ({"a": {"b"}, "b": {"c"}}, []),
        ({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}}, []),  # a diamond is no circle
        ({"a": {"a"}}, [["a", "a"]]),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b", "a"]]),
        ({"b": {"a"}, "a": {"b"}}, [["a", "b", "a"]]),  # order of declaration does not matter
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c", "a"]]),
        ({"x": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"b"}}, [["b", "c", "b"]]),  # entered from outside
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a", "c"}}, [["a", "b", "a"], ["c", "d", "c"]]),
        # one component, two circles through its smallest node: the shortest is named
        ({"a": {"b", "d"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "d", "a"]]),
        ({"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"b"}}, [["a", "b", "c", "a"]]),
        ({"n0": {"n1"}, **{f"n{i}": {f"n{i + 1}"} for i in range(1, 3000)}}, []),  # deep: no recursion limit
        ({f"n{i}": {f"n{(i + 1) % 3000}"} for i in range(3000)}, [[*(f"n{i}" for i in range(3000)), "n0"]]),
    ],
    ids=["empty", "single", "chain", "diamond", "self", "pair", "pair-reversed", "triangle", "entered-from-outside",
         "two-components", "shortest", "figure-eight", "deep-chain", "deep-ring"],
)
def test_find_cycles(graph, cycles):
    assert find_cycles(graph) == cycles


def test_import_edges_resolve_relative_lazy_and_submodule_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\nfrom .sub import c as cee, CONST\nimport json\n")
    (pkg / "b.py").write_text("def f():\n    from .sub.c import g\n    return g\n")
    (pkg / "sub" / "__init__.py").write_text("CONST = 1\n")
    (pkg / "sub" / "c.py").write_text("from .. import a\nimport pkg.b\n"
                                      "class K:\n    def m(self):\n        import pkg.sub\n")
    edges = {(e.source, e.target, e.line, e.lazy) for e in import_edges(tmp_path, ("pkg",))}
    assert edges == {
        ("pkg.a", "pkg.b", 1, False),
        ("pkg.a", "pkg.sub.c", 2, False),
        ("pkg.a", "pkg.sub", 2, False),
        ("pkg.b", "pkg.sub.c", 2, True),
        ("pkg.sub.c", "pkg.a", 1, False),
        ("pkg.sub.c", "pkg.b", 2, False),
        ("pkg.sub.c", "pkg.sub", 5, True),
    }
    cycles = find_cycles(graph_of(import_edges(tmp_path, ("pkg",))))
    assert cycles == [["pkg.a", "pkg.sub.c", "pkg.a"]]  # the shortest of a -> b -> sub.c -> a and a -> sub.c -> a


def test_imports_of_missing_modules_are_reported(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import json\nfrom . import b\n\ndef f():\n    from .gone import x\n    import pkg.old\n")
    (pkg / "b.py").write_text("from pkg.a import f\n")
    unresolved: list[str] = []
    import_edges(tmp_path, ("pkg",), unresolved=unresolved)
    assert unresolved == ["pkg.a (line 5): pkg.gone", "pkg.a (line 6): pkg.old"]


# --- the project ---------------------------------------------------------------------------------------------


def test_no_import_circles():
    edges = import_edges(ROOT)
    assert {e.source.split(".")[0] for e in edges} == set(PACKAGES)
    module_level = [e for e in edges if not e.lazy]
    problems = ["at import time: " + describe(c, module_level) for c in find_cycles(graph_of(module_level))]
    problems += ["counting imports inside functions: " + describe(c, edges) for c in find_cycles(graph_of(edges))]
    assert not problems, "import circles between modules:\n" + "\n".join(problems)


def test_every_import_inside_the_packages_names_a_module_there():
    """A module moved or renamed leaves no import behind (a lazy one would only fail when its function runs)."""
    unresolved: list[str] = []
    import_edges(ROOT, unresolved=unresolved)
    assert not unresolved, "imports of modules that do not exist:\n    " + "\n    ".join(unresolved)


def test_the_harness_never_imports_the_controller():
    upward = [str(e) for e in import_edges(ROOT) if e.source.split(".")[0] == "harness"
              and e.target.split(".")[0] == "controller"]
    assert not upward, "the harness imports the controller:\n    " + "\n    ".join(upward)
