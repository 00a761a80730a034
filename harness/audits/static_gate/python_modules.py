"""The solution's own modules, for the Python scanner: what a name reached through them really is, and the
`if __name__ == "__main__":` blocks that never run.

A name rooted at one of the solution's modules is its own only when that module defines it. What the module
imported is the imported thing: `from . import honest; honest.torch.softmax(x)` calls torch.softmax, and
`T = honest.torch` makes T torch (``_OwnNames.exports``: each module's aliases and what other modules assign into
it). A module re-exported as an attribute of another (`torch.sys`, `os.sys`, `np.os`) is that module, so
`torch.sys.modules` is `sys.modules` (python_names._REEXPORTED_MODULES).

The harness imports every solution file as a module of a package (`crucible_solution_<hash>.main`), so its
`__name__` is never "__main__" and a top-level `if __name__ == "__main__":` body (a self-test with events, clocks,
argv, random inputs) never runs: it is not scanned (its `else:` is). Only while nothing in the solution could make
`__name__` equal "__main__" (``main_blocks_never_run``): `__name__` only read (never bound), and none of
the ways to write a module's globals or attributes by a computed name or to load a module under another name (a
module's `__dict__`, setattr, globals()/vars(), `__class__`, `__init__` called on something other than super(),
a loader, getattr with a computed name, the Python C API). In doubt, the block is scanned like any other code.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field

from .python_held_modules import held_module
from .python_names import _IMPLEMENTATION_MODULES, _REAL_SUBMODULES, _REEXPORTED_MODULES


@dataclass(frozen=True)
class _OwnNames:
    """Names that belong to the candidate itself: its .py modules and the torch op namespaces it registers
    (TORCH_LIBRARY(ns, m) in C++ or torch.library.custom_op("ns::op") makes torch.ops.ns.* its own kernels)."""

    modules: frozenset[str]  # first components of the solution's .py paths
    prefixes: tuple[str, ...]  # dotted prefixes ending in "."
    # dotted module ("main", "pkg.x", "pkg" for pkg/__init__.py) -> its package, and name -> what it aliases there
    packages: dict[str, tuple[str, ...]] = field(default_factory=dict)
    exports: dict[str, dict[str, str]] = field(default_factory=dict)
    main_blocks_inert: bool = False
    shadows: bool = False  # a .py path's first component names a real module (torch.py, time/)
    sources: dict[str, str] = field(default_factory=dict)  # every file's text: what other files may name
    # module-level classes of the solution ("pkg.types.Shapes" -> its ClassDef), and the ids of those another module
    # reaches otherwise than by making one (python_fields)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    classes_reached: set[int] = field(default_factory=set)
    # the solution's jit functions and the module globals a kernel may not read ("pkg.k._T"; python_kernels)
    jit_functions: set[str] = field(default_factory=set)
    refused_globals: set[str] = field(default_factory=set)


def module_of(path: str) -> tuple[str, tuple[str, ...]]:
    """('pkg.x', ('pkg',)) for pkg/x.py; ('pkg', ('pkg',)) for pkg/__init__.py; ('main', ()) for main.py."""
    parts = tuple(path.replace("\\", "/").removesuffix(".pyi").removesuffix(".py").split("/"))
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), parts[:-1]
    return ".".join(parts), parts[:-1]


def _absolute(name: str, package: tuple[str, ...]) -> str | None:
    """A relative name made absolute from `package` (None where it climbs out of the solution)."""
    level = len(name) - len(name.lstrip("."))
    if level == 0:
        return name
    if level - 1 > len(package):
        return None
    rest = name[level:]
    return ".".join([*package[:len(package) - (level - 1)], *([rest] if rest else [])]) or None


def _reexported(name: str, own_roots: frozenset[str] = frozenset()) -> str:
    """`torch.sys.modules` -> `sys.modules`: from the last attribute that names a re-exported module (not a module's
    namesake function or class: `glob.glob`, `time.time`, `signal.signal`, `socket.socket`), or that a library module
    holds under a name of its own (`collections._sys.modules` -> `sys.modules`: python_held_modules)."""
    parts = name.split(".")
    own = parts[0] in own_roots
    for i in range(len(parts) - 1, 0, -1):
        if (parts[i] in _REEXPORTED_MODULES and parts[i] != parts[i - 1]
                and ".".join(parts[:i + 1]) not in _REAL_SUBMODULES):
            return ".".join(parts[i:])
        held = None if own else held_module(".".join(parts[:i]), parts[i])
        if held is not None:
            return ".".join([held, *parts[i + 1:]])
    return name


def canonical(name: str, package: tuple[str, ...], own: _OwnNames) -> str:
    """`name` resolved through the solution's own modules and through re-exported modules (bounded: a cycle of
    re-exports fails at import anyway)."""
    root, dot, rest = name.partition(".")
    if root in _IMPLEMENTATION_MODULES:  # `posix.write` is `os.write`
        name = _IMPLEMENTATION_MODULES[root] + dot + rest
    for _ in range(8):
        # a relative name is the solution's own (its `signal.py` reached by `from . import signal`): never a module
        # re-exported as an attribute, and the root package's __init__ ("") says what it binds there
        relative = name.startswith(".") and _absolute(name, package) is not None
        if not relative:
            name = _reexported(name, own.modules)
        absolute = _absolute(name, package)
        if absolute is None or not own.exports:
            return name
        parts = absolute.split(".")
        for i in range(len(parts) - 1, -1 if relative else 0, -1):
            module = ".".join(parts[:i])
            exports = own.exports.get(module)
            if exports is None:
                continue
            target = exports.get(parts[i])
            if target is None:
                return name  # defined by the module itself
            resolved = _absolute(target, own.packages.get(module, ()))
            if resolved is None:
                return target  # a relative name out of the solution: left as it is
            # what a relative import bound stays relative: the solution's own (`pkg.inspect` is its pkg/inspect.py)
            name = ("." if target.startswith(".") else "") + ".".join([resolved, *parts[i + 1:]])
            package = ()
            break
        else:
            return name
    return name


# ---- `if __name__ == "__main__":` blocks

_GUARD_RE = re.compile(r"""^if[ \t]+__name__[ \t]*==[ \t]*(['"])__main__\1[ \t]*:""", re.MULTILINE)
_NAME_RE = re.compile(r"__name__")
_NAME_WRITERS_RE = re.compile(
    r"\b(?:__dict__|__class__|__setattr__|__getattribute__|__builtins__|__loader__|__spec__|setattr|globals|vars|"
    r"locals|ModuleType|attrgetter|methodcaller|load_module|exec_module|reload|PyObject_\w*SetAttr\w*|PyModule_\w+|"
    r"PyEval_Get\w+|PyDict_SetItem\w*|PyImport_\w+)\b|\.attr\s*\(")
_INIT_RE = re.compile(r"__init__")
_INIT_ALLOWED_BEFORE_RE = re.compile(r"(?:def\s+|super\(\s*(?:\w+\s*,\s*\w+\s*)?\)\.)$")
_GETATTR_RE = re.compile(r"\bgetattr\s*\(")
_LITERAL_GETATTR_RE = re.compile(r"""\bgetattr\s*\(\s*[\w.]+\s*,\s*(['"])\w+\1\s*[,)]""")


def _binds_name(text: str) -> bool:
    """Does this Python source bind `__name__` (assign, delete, import as, define, declare global)? Reading it,
    as `logging.getLogger(__name__)` does, changes nothing."""
    # No `__name__` in the text, none bound: the parse and walk (half a large file's scan) are skipped. NFKC first,
    # as Python's parser folds identifiers (a fullwidth `__ｎａｍｅ__` is `__name__`).
    if "__name__" not in unicodedata.normalize("NFKC", text):
        return False
    try:
        tree = ast.parse(text.removeprefix("\ufeff"))
    except SyntaxError:
        return True
    for node in ast.walk(tree):
        if isinstance(node, (ast.Name, ast.Attribute)) and "__name__" in (getattr(node, "id", None),
                                                                         getattr(node, "attr", None)):
            if not isinstance(node.ctx, ast.Load):
                return True
        elif isinstance(node, ast.alias) and "__name__" in (node.name, node.asname):
            return True
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == "__name__":
            return True
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and "__name__" in node.names:
            return True
        elif isinstance(node, ast.arg) and node.arg == "__name__":
            return True
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name == "__name__":  # `case __name__:`
            return True
        elif isinstance(node, ast.MatchMapping) and node.rest == "__name__":
            return True
        elif isinstance(node, ast.ExceptHandler) and node.name == "__name__":  # `except E as __name__:`
            return True
    return False


def main_blocks_never_run(sources: Mapping[str, str]) -> bool:
    """True when no file of the solution can make a module's `__name__` equal "__main__" (module docstring)."""
    for path, text in sources.items():
        if _NAME_WRITERS_RE.search(text):
            return False
        if str(path).endswith(".py"):
            if _binds_name(text):
                return False
        elif len(_NAME_RE.findall(text)) != len(_GUARD_RE.findall(text)):
            return False
        if any(not _INIT_ALLOWED_BEFORE_RE.search(text[max(0, m.start() - 40):m.start()])
               for m in _INIT_RE.finditer(text)):
            return False
        if len(_GETATTR_RE.findall(text)) != len(_LITERAL_GETATTR_RE.findall(text)):
            return False
    return True


def is_main_guard(stmt: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (a module-level statement)."""
    test = stmt.test if isinstance(stmt, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__")


def statements_that_run(tree: ast.Module, main_blocks_inert: bool) -> list[ast.stmt]:
    """The module's top-level statements, with the body of a main guard left out where it never runs."""
    if not main_blocks_inert:
        return list(tree.body)
    body: list[ast.stmt] = []
    for stmt in tree.body:
        if is_main_guard(stmt):
            body.extend(stmt.orelse)
        else:
            body.append(stmt)
    return body
