"""Lower-case aliases of a module's own flags, set through the module itself, for the Python scanner.

FLA's utils module (vendored into GDN solutions) ends by giving each of its capability flags a lower-case alias:
a function binds the module as `sys.modules[__name__]` and, over a literal tuple of the flags' names, sets
`name.lower()` to the flag's value with `setattr`. `sys.modules` is harness_internals everywhere else (every loaded
module, the harness's worker among them, is one subscript away), and setattr on a module by a computed name binds
globals no reader sees. Neither is so here when the gate can prove what the loop binds:

- `M = sys.modules[__name__]` alone in a function at module level, `__name__` never bound in the module, and `M`
  named nowhere else in the module but in the loops below;
- each loop is `for K in (<string literals>):` with no `else`, its body `setattr(M, T, getattr(M, K))`, alone or
  under `if hasattr(M, K):`, where T is `K`, `K.lower()` or `K.upper()` and the builtins are the builtins;
- every name the loop reads is a module-level flag: bound only by plain assignments at module level whose values are
  booleans by their form (a comparison, `not`, `and`/`or` of such, `hasattr`/`isinstance`/`callable`/`bool`, a
  literal, or another such flag). A flag can then hold nothing but a bool or a literal, never a module or function
  (`X = flag and torch` is torch: not a flag);
- every name it binds is an identifier, no dunder, and bound nowhere else in the module (an alias adds a name; it
  never rebinds one).

The exemption is the `sys.modules` read of such a binding; the loop's getattr calls are then no lookup of unseen
names (python_device_lib counts the others).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any

from .python_names import _str_const

_BOOL_BUILTINS = frozenset({"hasattr", "isinstance", "callable", "bool", "issubclass"})
_CASES = frozenset({"lower", "upper"})


def self_alias_loops(tree: ast.Module,
                     resolve: Callable[[ast.AST], str | None]) -> tuple[dict[int, frozenset[str]], set[int]]:
    """({id of the `sys.modules` read of a proven alias binding: the flags its loops read}, ids of their loops'
    getattr calls), on this module alone; confirm_self_aliases adds what the other files say."""
    holders = [(function, *holder) for function in tree.body
               if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
               for holder in [_self_module_binding(s, resolve) for s in function.body] if holder is not None]
    if not holders or any(isinstance(n, ast.Name) and n.id == "__name__" and not isinstance(n.ctx, ast.Load)
                          or isinstance(n, ast.arg) and n.arg == "__name__" for n in ast.walk(tree)):
        return {}, set()  # the whole module is walked only where the form is there at all
    module_bindings = _module_bindings(tree)
    bound = _bound_anywhere(tree)

    def builtin(node: ast.AST) -> str | None:
        """The builtin a call target names (a name bound nowhere in the module), else None."""
        return node.id if isinstance(node, ast.Name) and node.id not in bound else None

    exempt: dict[int, frozenset[str]] = {}
    getattrs: set[int] = set()
    for function, name, read in holders:
        loops = [s for s in function.body if isinstance(s, ast.For)]
        proven = [_alias_loop(loop, name, builtin) for loop in loops]
        if not loops or any(p is None for p in proven):
            continue
        keys = {k for p in proven for k, _ in p[0]}
        targets = [t for p in proven for _, t in p[0]]
        uses = sum(p[1] for p in proven)
        if (_names_of(tree, name) != uses + 1 or len(set(targets)) != len(targets)
                or not all(_is_flag(k, module_bindings, builtin, set()) for k in keys)
                or any(not t.isidentifier() or t.startswith("__") or t in module_bindings for t in targets)):
            continue
        exempt[id(read)] = frozenset(keys)
        getattrs |= {g for p in proven for g in p[2]}
    return exempt, getattrs


def _self_module_binding(statement: ast.stmt, resolve) -> tuple[str, ast.AST] | None:
    """(M, the `sys.modules` node) of `M = sys.modules[__name__]`."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)):
        return None
    value = statement.value
    if (isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Name) and value.slice.id == "__name__"
            and resolve(value.value) == "sys.modules"):
        return statement.targets[0].id, value.value
    return None


def _alias_loop(loop: ast.For, holder: str, builtin) -> tuple[list[tuple[str, str]], int, set[int]] | None:
    """([(flag, alias)], uses of the holder, ids of the getattr calls) of a proven loop; None otherwise."""
    if loop.orelse or not isinstance(loop.target, ast.Name) or not isinstance(loop.iter, (ast.Tuple, ast.List)):
        return None
    keys = [_str_const(e) for e in loop.iter.elts]
    if not keys or any(k is None for k in keys) or len(loop.body) != 1:
        return None
    var, body, uses = loop.target.id, loop.body[0], 0
    if isinstance(body, ast.If):
        test = body.test
        if not (not body.orelse and len(body.body) == 1 and _call_of(test, "hasattr", builtin)
                and _is_name(test.args[0], holder) and _is_name(test.args[1], var)):
            return None
        body, uses = body.body[0], 1
    if not (isinstance(body, ast.Expr) and _call_of(body.value, "setattr", builtin, 3)):
        return None
    where, target, value = body.value.args
    case = _case_of(target, var)
    if not (_is_name(where, holder) and case is not None and _call_of(value, "getattr", builtin)
            and _is_name(value.args[0], holder) and _is_name(value.args[1], var)):
        return None
    pairs = [(k, k.lower() if case == "lower" else k.upper() if case == "upper" else k) for k in keys]
    return pairs, uses + 2, {id(value)}


def _call_of(node: ast.AST, name: str, builtin, arity: int = 2) -> bool:
    return (isinstance(node, ast.Call) and not node.keywords and len(node.args) == arity
            and not any(isinstance(a, ast.Starred) for a in node.args) and builtin(node.func) == name)


def _bound_anywhere(tree: ast.Module) -> set[str]:
    """Names bound anywhere in the module, in any scope (a `def hasattr` or `getattr = ...` is no builtin)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _case_of(node: ast.AST, var: str) -> str | None:
    """"same" for `K`, "lower"/"upper" for `K.lower()`/`K.upper()`; None otherwise."""
    if _is_name(node, var):
        return "same"
    if (isinstance(node, ast.Call) and not node.args and not node.keywords and isinstance(node.func, ast.Attribute)
            and node.func.attr in _CASES and _is_name(node.func.value, var)):
        return node.func.attr
    return None


def _names_of(tree: ast.Module, name: str) -> int:
    """How often `name` appears in the module as a name or an attribute (the holder is a function's local: nothing
    reaches it by a string but the frame introspection the gate forbids)."""
    return sum(1 for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
               or isinstance(n, ast.Attribute) and n.attr == name
               or isinstance(n, ast.arg) and n.arg == name)


def _module_bindings(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """Every name bound at module level or declared global, with what binds it (a plain assignment's value; the
    statement itself for anything else: a def, an import, a loop, a `with`, an augmented assignment)."""
    bindings: dict[str, list[ast.AST]] = {}
    declared = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}

    def bind(name: str, how: ast.AST) -> None:
        bindings.setdefault(name, []).append(how)

    def visit(statements: list[ast.stmt], top: bool) -> None:
        for s in statements:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if top:
                    bind(s.name, s)
                visit(s.body, False)  # a `global` there binds the module's name
                continue
            # a def nested in an `if` at module level has its locals taken for module names: more bindings, so
            # fewer flags and more collisions (never an exemption wrongly granted)
            for node in ast.walk(s):
                stored = (isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)) and node.id
                if stored and (top or stored in declared):
                    plain = isinstance(s, ast.Assign) and len(s.targets) == 1 and s.targets[0] is node
                    bind(stored, s.value if plain else s)
                if isinstance(node, ast.arg) and top:
                    bind(node.arg, s)
                if top and isinstance(node, (ast.Import, ast.ImportFrom)):
                    for alias in node.names:
                        bind((alias.asname or alias.name).split(".")[0], node)

    visit(tree.body, True)
    return bindings


def _is_flag(name: str, bindings: dict[str, list[ast.AST]], builtin, seen: set[str]) -> bool:
    """Is `name` bound only by plain module-level assignments of boolean-shaped values?"""
    if name in seen:
        return False
    how = bindings.get(name)
    if not how or any(isinstance(h, ast.stmt) for h in how):
        return False
    return all(_boolean_shaped(v, bindings, builtin, seen | {name}) for v in how)


def _boolean_shaped(node: ast.AST, bindings, builtin, seen: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (bool, int, float, str)) or node.value is None
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return True
    if isinstance(node, ast.BoolOp):
        return all(_boolean_shaped(v, bindings, builtin, seen) for v in node.values)
    if isinstance(node, ast.Call):
        return builtin(node.func) in _BOOL_BUILTINS
    if isinstance(node, ast.Name):
        return _is_flag(node.id, bindings, builtin, seen)
    return False


# What another file could use to change a flag after the module set it, or read names unseen: setattr by any name,
# a namespace dict, vars(), __getattribute__ (a flag stored into as `utils.FLAG = torch` is matched by its name).
_UNDOING_RE = re.compile(r"\bsetattr\b|__dict__|\bvars\s*\(|__getattribute__|__setattr__")


def confirm_self_aliases(scanners: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """Withdraw an exemption that another file could undo: one that stores into a flag's name as an attribute
    (`utils.FLAG = torch` run before the loop, by a module the holder imports first, would make the alias torch), or
    that can set or read names unseen. Reading the flags or their aliases (`from .utils import IS_HOPPER`) is fine.
    `sources`: the files that are code."""
    holders = {path: s for path, s in scanners.items() if s.alias_keys}
    for path, scanner in holders.items():
        others = [text for other, text in sources.items() if other != path]
        for read, keys in list(scanner.alias_keys.items()):
            names = "|".join(map(re.escape, sorted(keys)))
            store = re.compile(rf"\.\s*(?:{names})\s*(?:[-+*/%@&|^]|//|\*\*|<<|>>)?=(?!=)")
            if any(_UNDOING_RE.search(text) or store.search(text) for text in others):
                del scanner.alias_keys[read]
                scanner.judged.discard(read)
