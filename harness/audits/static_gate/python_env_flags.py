"""Code that runs only under an environment flag the worker never has: a contestant's opt-in profiling or debug path.

    _PROFILE = os.environ.get("FIB_PROFILE", "0") == "1"
    def run(...):
        if _PROFILE:
            e0 = torch.cuda.Event(enable_timing=True)   # never runs in the harness

The worker's environment is the harness's (harness.sandbox.environment_filter): a variable the filter does not pass
and the harness does not set is absent there, whatever the host has, and the candidate cannot set one without an
`env_probe` error. A condition on such a variable is decided before anything runs, and what the gate finds in a
branch it never takes blocks nothing (a warning with DEAD_BRANCH_NOTE, as a self-test's under a main guard).

Only what is certain is decided, and every doubt leaves code live:
- a condition is evaluated with the variable absent, through constants, comparisons, `not`/`and`/`or`, `bool`/`int`/
  `str`/`float` and `.lower()`/`.upper()`/`.strip()`; any other expression is unknown;
- a module flag is a top-level name bound once, by a plain assignment of such a condition, in a solution whose text
  never says `globals`, `setattr`, `__setattr__`, `__dict__`, `vars(` or `sys.modules`, and named in no other file
  of the solution (an attribute store `kernel._PROFILE = True` from there would flip it);
- a local of a function holds a known constant where every binding of it outside a branch never taken is that same
  constant (`profile_this_call = False`, set True only under the flag), and it is no parameter nor global;
- a top-level function (no decorator, no dunder, not an entry point) whose name is a word only in branches never
  taken, its own body included, never runs either.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from ...sandbox.environment_filter import never_in_worker

DEAD_BRANCH_NOTE = (" (in a branch that runs only under an environment variable the worker's environment never has: "
                    "it never runs, so nothing of it blocks)")

_UNKNOWN = object()
# Ways to rebind a module's global without naming it where it is bound: in any file, they leave every flag unknown.
_REFLECTION = re.compile(r"\bglobals\b|\bsetattr\b|__setattr__|__dict__|\bvars\s*\(|\bsys\.modules\b|\bmodules\[|"
                         r"__getattribute__|__getattr__|\battrgetter\b|\bmethodcaller\b")
# Lookups of a function by a computed name: where any file has one, no function is called only in dead code.
_LOOKUP = re.compile(r"\bgetattr\b|\bimportlib\b|__import__|\bsys\.modules\b|\bglobals\b|\bvars\s*\(|__dict__|"
                     r"\beval\b|\bexec\b|__getattribute__|__getattr__|\battrgetter\b|\bmethodcaller\b")
_MANGLED = re.compile(r"_[A-Za-z0-9]\w*?__\w")
_STR_METHODS = {"lower": str.lower, "upper": str.upper, "strip": str.strip}
_CASTS: dict[str, Any] = {"bool": bool, "int": int, "str": str, "float": float}


class _Evaluator:
    """A condition's value with every never-set variable absent, or _UNKNOWN."""

    def __init__(self, tree: ast.Module, known: Mapping[str, Any], shadowed: frozenset[str] = frozenset()):
        self.known = known
        self.shadowed = shadowed or frozenset(name for name in _CASTS if name in _stores(tree))  # `def bool(x)`
        once = {name for name, count in _stores(tree).items() if count == 1}  # `os = stand_in` elsewhere: unknown
        self.os_names = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                         for a in n.names if a.name == "os"} & once
        self.from_os = {a.asname or a.name: a.name for n in ast.walk(tree)
                        if isinstance(n, ast.ImportFrom) and n.module == "os" and not n.level for a in n.names
                        if (a.asname or a.name) in once}

    def _environ(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id in self.os_names
        return isinstance(node, ast.Name) and self.from_os.get(node.id) == "environ"

    def _getenv(self, func: ast.AST) -> bool:
        if isinstance(func, ast.Attribute):
            if func.attr == "get" and self._environ(func.value):
                return True
            return func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id in self.os_names
        return isinstance(func, ast.Name) and self.from_os.get(func.id) == "getenv"

    def value(self, node: ast.AST) -> Any:
        try:
            return self._value(node)
        except Exception:  # int(None), "a" < 1...: what raises here raises at run time too; nothing is decided
            return _UNKNOWN

    def _value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.known.get(node.id, _UNKNOWN)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self._value(node.operand)
            return _UNKNOWN if inner is _UNKNOWN else not inner
        if isinstance(node, ast.BoolOp):
            return self._bool_op(node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self._compare(node)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = [self._value(e) for e in node.elts]
            return _UNKNOWN if any(i is _UNKNOWN for i in items) else tuple(items)
        return _UNKNOWN

    def _call(self, node: ast.Call) -> Any:
        if node.keywords:
            return _UNKNOWN
        if self._getenv(node.func) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.args[0].value
            if not isinstance(name, str) or not never_in_worker(name) or len(node.args) > 2:
                return _UNKNOWN
            return self._value(node.args[1]) if len(node.args) == 2 else None
        if isinstance(node.func, ast.Name) and node.func.id in _CASTS and len(node.args) == 1 \
                and node.func.id not in self.known and node.func.id not in self.shadowed:
            inner = self._value(node.args[0])
            return _UNKNOWN if inner is _UNKNOWN else _CASTS[node.func.id](inner)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS and not node.args:
            inner = self._value(node.func.value)
            return _STR_METHODS[node.func.attr](inner) if isinstance(inner, str) else _UNKNOWN
        return _UNKNOWN

    def _bool_op(self, node: ast.BoolOp) -> Any:
        stop = isinstance(node.op, ast.Or)  # `or` stops at a truthy operand, `and` at a falsy one
        result: Any = None
        for operand in node.values:
            result = self._value(operand)
            if result is _UNKNOWN:
                return _UNKNOWN
            if bool(result) == stop:
                return result
        return result

    def _compare(self, node: ast.Compare) -> Any:
        op, right_node = node.ops[0], node.comparators[0]
        if isinstance(op, (ast.In, ast.NotIn)) and self._environ(right_node):
            name = self._value(node.left)
            if not isinstance(name, str) or not never_in_worker(name):
                return _UNKNOWN
            return isinstance(op, ast.NotIn)
        left, right = self._value(node.left), self._value(right_node)
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        table = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.In: lambda a, b: a in b,
                 ast.NotIn: lambda a, b: a not in b, ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b}
        return table[type(op)](left, right) if type(op) in table else _UNKNOWN


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _bound(node: ast.AST) -> list[str]:
    """The names one node binds, by every way Python binds one (an assignment, a loop, `with`/`except ... as`, a
    match capture, an import, a def or class, a parameter, `global`/`nonlocal`, a type parameter)."""
    if isinstance(node, ast.Name):
        return [] if isinstance(node.ctx, ast.Load) else [node.id]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.MatchMapping):
        return [node.rest] if node.rest else []
    name = getattr(node, "name", None)  # ExceptHandler, MatchAs, MatchStar, TypeVar, ParamSpec, TypeVarTuple
    return [name] if isinstance(name, str) and not isinstance(node, ast.alias) else []


def _stores(tree: ast.AST) -> dict[str, int]:
    """How many times each name is bound anywhere in `tree`."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        for name in _bound(node):
            counts[name] = counts.get(name, 0) + 1
    return counts


def _inside(line: int, spans: Iterable[tuple[int, int]]) -> bool:
    return any(first <= line <= last for first, last in spans)


def _span(body: list[ast.stmt]) -> tuple[int, int]:
    return body[0].lineno, max(getattr(s, "end_lineno", None) or s.lineno for s in body)


def _own_scope(node: ast.AST) -> Iterable[ast.AST]:
    """The nodes of `node`'s body, not descending into nested functions, classes or lambdas."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, _SCOPES):
            stack.extend(ast.iter_child_nodes(child))


class _File:
    def __init__(self, path: str, tree: ast.Module, flags: dict[str, Any], entries: set[str]):
        self.path, self.tree, self.flags, self.entries = path, tree, flags, entries
        self.spans: set[tuple[int, int]] = set()

    def _plain_functions(self) -> list[ast.AST]:
        """Functions whose names resolve to their own locals, then the module's globals: defined at module level or
        as methods of a module-level class, holding no nested function, class or lambda (whose bindings would
        need scopes of their own)."""
        candidates = [n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        candidates += [m for c in self.tree.body if isinstance(c, ast.ClassDef) for m in c.body
                       if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return [f for f in candidates if not any(isinstance(n, _SCOPES) for n in _own_scope(f))]

    def _known_in(self, function: ast.AST) -> dict[str, Any]:
        """What `function` knows: the module's flags it does not bind itself, and its locals whose every binding
        outside a branch never taken is a plain `name = <the same constant>`; every other local is unknown."""
        bindings: dict[str, set[Any]] = {}
        for node in ast.walk(function):  # its parameters, decorators and defaults too: all bind or shadow
            for name in _bound(node):
                if node is function:
                    continue
                if isinstance(node, ast.Name) and _inside(node.lineno, self.spans):
                    bindings.setdefault(name, set())
                    continue
                value = getattr(node, "_crucible_value", _UNKNOWN) if isinstance(node, ast.Name) else _UNKNOWN
                bindings.setdefault(name, set()).add(repr(value) if value is not _UNKNOWN else id(node))
        known: dict[str, Any] = {k: v for k, v in self.flags.items() if k not in bindings}
        for name, seen in bindings.items():
            only = next(iter(seen)) if len(seen) == 1 else None
            known[name] = ast.literal_eval(only) if isinstance(only, str) else _UNKNOWN
        return known

    def decide(self) -> bool:
        """One round: more branches never taken (True when any was added)."""
        before = len(self.spans)
        scopes = [(self.tree, dict(self.flags))] + [(f, self._known_in(f)) for f in self._plain_functions()]
        for scope, known in scopes:
            evaluator = _Evaluator(self.tree, known)
            for node in _own_scope(scope):
                if not isinstance(node, ast.If) or _inside(node.lineno, self.spans):
                    continue
                taken = evaluator.value(node.test)
                branch = [] if taken is _UNKNOWN else (node.orelse if taken else node.body)
                if branch:
                    self.spans.add(_span(branch))
        return len(self.spans) > before


def _mark_constant_bindings(tree: ast.Module) -> None:
    """Each `name = <constant>` target (a plain assignment) remembers its constant (read by _File._known_in)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    target._crucible_value = node.value.value  # type: ignore[attr-defined]


def _module_flags(tree: ast.Module, others: str, text: str) -> dict[str, Any]:
    if _REFLECTION.search(text) or _REFLECTION.search(others):
        return {}
    stores = _stores(tree)
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    evaluator = _Evaluator(tree, {}, frozenset(name for name in _CASTS if name in stores))
    flags = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            continue
        name = stmt.targets[0].id
        if stores.get(name) != 1 or re.search(rf"\b{re.escape(name)}\b", others) or name in attributes:
            continue  # `me._PROFILE = True` through the module's own object rebinds it too
        value = evaluator.value(stmt.value)
        if value is not _UNKNOWN and _reads_environment(stmt.value, evaluator):
            flags[name] = value
    return flags


def _reads_environment(node: ast.AST, evaluator: _Evaluator) -> bool:
    return any((isinstance(n, ast.Call) and evaluator._getenv(n.func))
               or (isinstance(n, ast.Compare) and any(evaluator._environ(c) for c in n.comparators))
               for n in ast.walk(node))


def dead_branches(sources: Mapping[str, str], entry_points: Iterable[str] = ()) -> dict[str, list[tuple[int, int]]]:
    """path -> (first, last) lines of code that runs only under an environment variable the worker never has
    (see the module docstring); `entry_points`: "file.py::name" of the entry point and the setup."""
    trees: dict[str, ast.Module] = {}
    for path, text in sources.items():
        if not path.endswith(".py"):
            continue
        try:
            trees[path] = ast.parse(text.removeprefix("\ufeff"))
        except (SyntaxError, ValueError):
            return {}
    if not any(re.search(r"\benviron\b|\bgetenv\b", sources[p]) for p in trees):
        return {}
    entries = {PurePosixPath(e.replace("\\", "/")).as_posix() for e in entry_points}
    files = []
    for path, tree in trees.items():
        others = "\n".join(text for other, text in sources.items() if other != path)
        _mark_constant_bindings(tree)
        files.append(_File(path, tree, _module_flags(tree, others, sources[path]), entries))
    dynamic = any(_LOOKUP.search(text) for text in sources.values())
    for _ in range(8):  # a branch decided can decide a local, whose branches decide a function's calls...
        changed = any([f.decide() for f in files])
        changed = (not dynamic and _functions_only_called_there(files, sources)) or changed
        if not changed:
            break
    return {f.path: sorted(f.spans) for f in files if f.spans}


def _occurrences(tree: ast.Module, name: str) -> list[int]:
    """Lines where `name` is read, named as an attribute or spelled as a string (`getattr(m, "name")`)."""
    return [n.lineno for n in ast.walk(tree)
            if (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name)
            or (isinstance(n, ast.Constant) and n.value == name)]


def _functions_only_called_there(files: list[_File], sources: Mapping[str, str]) -> bool:
    """Top-level functions named only inside branches never taken (their own bodies included): their bodies too.
    A name a class body could reach by mangling (`__dbg` in class K is `_K__dbg`) is never decided."""
    added = False
    for f in files:
        posix = PurePosixPath(f.path.replace("\\", "/")).as_posix()
        for node in f.tree.body:
            if (not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list
                    or node.name.startswith("__") or _MANGLED.match(node.name)
                    or f"{posix}::{node.name}" in f.entries or node.body[0].lineno == node.lineno):
                continue
            body = _span(node.body)
            word = re.compile(rf"\b{re.escape(node.name)}\b")
            if body in f.spans or any(word.search(text) for path, text in sources.items() if path != f.path):
                continue
            uses = _occurrences(f.tree, node.name)
            if uses and all(_inside(i, f.spans | {body}) for i in uses) and not all(_inside(i, {body}) for i in uses):
                f.spans.add(body)
                added = True
    return added
