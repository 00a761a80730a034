"""The C++ that load_inline will compile, as one text: what its source arguments evaluate to, where the gate can
tell (a mixin of ``_PythonScanner``, beside ``embedded.py``).

``embedded.py`` scans every string literal that can end up in ``cpp_sources``/``cuda_sources``, one by one. A call
split over two literals (``"return sys" + "tem(...)"``) or a source computed from an innocent literal
(``codecs.decode(SRC, "rot13")``, ``SRC[::-1]``, ``bytes([...]).decode()``) compiled code no literal shows. Here the
arguments are folded to their text (literals, module names, ``+``, f-strings, ``.join``/``.format``/``.replace``,
``textwrap.dedent``, the module's own helpers) and the whole text is scanned, with the ``-D`` macros of the build's
flags put in; a source that does not fold (nor is a file of the solution read next to the module, which is scanned
as a file of its own) is unreadable to the gate: dynamic_code.
"""

from __future__ import annotations

import ast
import copy
import re
import string
from typing import Optional

from .common import _Hit
from .cpp import scan_cpp

_DEFINE_FLAG_RE = re.compile(r"-D\s*([A-Za-z_]\w*)(?:=(.*))?$", re.DOTALL)
_DEDENT = frozenset({"textwrap.dedent", "inspect.cleandoc", "builtins.str"})
_MAX_DEPTH, _MAX_TEXTS = 12, 64
# The longest text a fold may make: a source built past it (`"{:>999999999}".format(s)`, `"a".replace("a", big)` in
# a chain, `S = S + S` twelve deep) is not folded, so it is unreadable to the gate (dynamic_code), instead of taking
# the harness's memory and time (red team round 8: a MemoryError in the harness's process).
MAX_FOLDED_CHARS = 1 << 20
_FORMAT_WIDTH_RE = re.compile(r"\d+")
_PLAIN_CALLS = frozenset({"builtins.int", "builtins.str", "builtins.float", "builtins.len", "builtins.min",
                          "builtins.max", "builtins.abs", "builtins.round", "builtins.hex", "math.ceil", "math.floor",
                          "math.log2", "math.sqrt"})


class _FoldedSources:
    """load_inline's sources folded and scanned whole (see the module docstring)."""

    def _fold(self, expr: ast.AST, depth: int = 0) -> Optional[list[str]]:
        """Every text ``expr`` can evaluate to (several where a name is bound more than once), or None."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, ast.Constant):
            return [expr.value if isinstance(expr.value, str) else str(expr.value)]
        if isinstance(expr, ast.Name):
            values = self.assignments.get(expr.id, ())
            folded = [self._fold(v, depth + 1) for v in values]
            return None if not values or None in folded else [t for f in folded for t in f][:_MAX_TEXTS]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            return self._product(self._fold(expr.left, depth + 1), self._fold(expr.right, depth + 1))
        if isinstance(expr, ast.JoinedStr):
            texts: Optional[list[str]] = [""]
            for value in expr.values:
                inner = value.value if isinstance(value, ast.FormattedValue) else value
                texts = self._product(texts, self._fold_inserted(inner, depth + 1))
            return texts
        if isinstance(expr, ast.IfExp):
            a, b = self._fold(expr.body, depth + 1), self._fold(expr.orelse, depth + 1)
            return None if a is None or b is None else (a + b)[:_MAX_TEXTS]
        if isinstance(expr, ast.Call):
            return self._fold_call(expr, depth)
        return None

    def _fold_inserted(self, expr: ast.AST, depth: int) -> Optional[list[str]]:
        """A value put into a template (``.format``, an f-string, ``.replace``): its text where it folds; else, where
        it is plainly a number or a setting (a parameter, an attribute, ``str(n)``, arithmetic), a stand-in ``0``; a
        value decoded or assembled from pieces (``bytes(...).decode()``, ``chr``, ``codecs``) does not fold."""
        folded = self._fold(expr, depth)
        if folded is not None:
            return folded
        return ["0"] if self._plain_value(expr, depth) else None

    def _plain_value(self, expr: ast.AST, depth: int) -> bool:
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, ast.Constant):
            return not isinstance(expr.value, (str, bytes))
        if isinstance(expr, ast.Name):  # a parameter, or a name bound only to text or plain values
            return all(self._fold(v, depth + 1) is not None or self._plain_value(v, depth + 1)
                       for v in self.assignments.get(expr.id, ()))
        if isinstance(expr, ast.Attribute):
            return self._plain_value(expr.value, depth + 1) or isinstance(expr.value, ast.Name)
        if isinstance(expr, ast.Subscript):
            return not isinstance(expr.slice, ast.Slice) and self._plain_value(expr.value, depth + 1)
        if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
            return all(self._plain_value(c, depth + 1) for c in ast.iter_child_nodes(expr)
                       if not isinstance(c, (ast.operator, ast.unaryop)))
        if isinstance(expr, ast.Call):
            return (self._callee(expr.func) in _PLAIN_CALLS and not expr.keywords
                    and all(self._plain_value(a, depth + 1) for a in expr.args))
        return False

    def _callee(self, func: ast.AST) -> Optional[str]:
        """What a call calls; builtins the gate does not watch (`str`, `int`) by their own name."""
        resolved = self._resolve(func)
        if resolved is None and isinstance(func, ast.Name) and func.id not in self.assignments:
            return f"builtins.{func.id}"
        return resolved

    @staticmethod
    def _product(a: Optional[list[str]], b: Optional[list[str]]) -> Optional[list[str]]:
        if a is None or b is None or any(len(x) + len(y) > MAX_FOLDED_CHARS for x in a for y in b):
            return None
        return [x + y for x in a for y in b][:_MAX_TEXTS]

    def _fold_call(self, call: ast.Call, depth: int) -> Optional[list[str]]:
        func = call.func
        if self._callee(func) in _DEDENT and len(call.args) == 1 and not call.keywords:
            return self._fold(call.args[0], depth + 1)
        if isinstance(func, ast.Attribute) and func.attr in ("join", "format", "replace", "strip", "lstrip", "rstrip"):
            owners = self._fold(func.value, depth + 1)
            insert = self._fold_inserted if func.attr in ("format", "replace") else self._fold
            args = [insert(a, depth + 1) if func.attr != "join" else self._fold_items(a, depth + 1)
                    for a in call.args]
            kwargs = {k.arg: insert(k.value, depth + 1) for k in call.keywords}
            if owners is None or None in args or None in kwargs.values() or None in kwargs:
                return None
            firsts = [a[0] for a in args]
            if not all(_fits(func.attr, o, firsts, kwargs) for o in owners):
                return None
            try:
                if func.attr == "join":
                    return [o.join(args[0]) for o in owners] if len(args) == 1 and not kwargs else None
                return [getattr(o, func.attr)(*firsts, **{k: v[0] for k, v in kwargs.items()}) for o in owners]
            except (TypeError, ValueError, IndexError, KeyError, AttributeError):
                return None
        if isinstance(func, ast.Name) and not call.args and not call.keywords:
            returns = [s.value for f in self.module_functions.get(func.id, ()) for s in ast.walk(f)
                       if isinstance(s, ast.Return) and s.value is not None]
            folded = [self._fold(r, depth + 1) for r in returns]
            return None if not returns or None in folded else [t for f in folded for t in f][:_MAX_TEXTS]
        return None

    def _fold_items(self, expr: ast.AST, depth: int) -> Optional[list[str]]:
        """The texts of a list or tuple of strings (each element folded to its one text)."""
        if isinstance(expr, ast.Name) and len(self.assignments.get(expr.id, ())) == 1:
            expr = self.assignments[expr.id][0]
        if not isinstance(expr, (ast.List, ast.Tuple)):
            return None
        items = [self._fold(e, depth + 1) for e in expr.elts]
        return None if any(i is None or len(i) != 1 for i in items) else [i[0] for i in items]

    def _source_texts(self, expr: ast.AST) -> Optional[list[str]]:
        """The texts a source argument (a string or a list of them) holds; [] for a file of the solution read next
        to the module (scanned as its own file); None where the gate cannot tell."""
        if isinstance(expr, ast.Name) and len(self.assignments.get(expr.id, ())) == 1:
            expr = self.assignments[expr.id][0]
        if isinstance(expr, (ast.List, ast.Tuple)):
            parts = [self._source_texts(e) for e in expr.elts]
            return None if None in parts else [t for p in parts for t in p]
        if self._reads_solution_file(expr) or self._helper_reads_solution_file(expr):
            return []
        return self._fold(expr)

    def _helper_reads_solution_file(self, expr: ast.AST) -> bool:
        """`_read("k.cu")`: the module's one helper of that name, its parameters taken as the call's literal
        arguments, whose every return reads a file of the solution (`with open(os.path.join(HERE, name)) as f:
        return f.read()`)."""
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and not expr.keywords
                and expr.func.id not in self.assignments
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in expr.args)):
            return False
        functions = self.module_functions.get(expr.func.id, ())
        if len(functions) != 1:
            return False
        arguments = functions[0].args
        params = [a.arg for a in arguments.posonlyargs + arguments.args]
        if len(params) != len(expr.args) or arguments.vararg or arguments.kwarg or arguments.kwonlyargs:
            return False
        stored = {n.id for n in ast.walk(functions[0]) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        if stored & set(params):
            return False  # a parameter rebound in the body is no longer the call's literal
        helper = _Bind(dict(zip(params, expr.args))).visit(copy.deepcopy(functions[0]))
        returns = [n.value for n in ast.walk(helper) if isinstance(n, ast.Return)]
        return bool(returns) and all(r is not None and self._returns_own_file(r, helper, stored) for r in returns)

    def _returns_own_file(self, value: ast.AST, helper: ast.AST, stored: set[str]) -> bool:
        if self._reads_solution_file(value):
            return True
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "read"
                and isinstance(value.func.value, ast.Name)):
            return False
        name = value.func.value.id
        opened = [item.context_expr for node in ast.walk(helper) if isinstance(node, (ast.With, ast.AsyncWith))
                  for item in node.items if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == name]
        # bound by its with-statements alone (a with target is a store too: one per with)
        binders = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.comprehension)
        assigned = [n for n in ast.walk(helper) if isinstance(n, binders)
                    and name in {t.id for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}]
        return bool(opened) and not assigned and all(self._opens_own_file(o) for o in opened)

    def _reads_solution_file(self, expr: ast.AST) -> bool:
        """`open(HERE / "k.cu").read()`, `Path(...).read_text()` of a file next to the module."""
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
                and expr.func.attr in ("read", "read_text")):
            return False
        target = expr.func.value
        if isinstance(target, ast.Name) and target.id not in self.assignments:
            # `with open(HERE / "k.cu") as f: SRC = f.read()`: f is bound by with-statements alone, each opening one
            opened = [item.context_expr for stmt in self.body for node in ast.walk(stmt)
                      if isinstance(node, (ast.With, ast.AsyncWith)) for item in node.items
                      if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == target.id]
            return bool(opened) and all(self._opens_own_file(o) for o in opened)
        return self._opens_own_file(target) or self._reads_own_file(target)

    def _opens_own_file(self, expr: ast.AST) -> bool:
        return (isinstance(expr, ast.Call) and self._resolve(expr.func) in ("builtins.open", "io.open")
                and bool(expr.args) and self._reads_own_file(expr.args[0]))

    def _scan_folded_sources(self, call: ast.Call, function: str, sources: dict[str, list[ast.AST]],
                             flags: list[ast.AST]) -> None:
        defines = {}
        for flag in flags:
            for text in self._source_texts(flag) or ():
                m = _DEFINE_FLAG_RE.match(text.strip())
                if m:
                    defines[m.group(1)] = m.group(2) if m.group(2) is not None else "1"
                    # `-Dsafe=system` makes every `safe(...)` of the sources (files of load() too) a call of system
                    for hit in scan_cpp(f"{defines[m.group(1)]}(0);", self.policy):
                        self.hits.append(_Hit(hit.rule, flag.lineno, flag.col_offset + 1,
                                              f"the macro {m.group(1)} of {function}()'s flags: {hit.message}"))
        for parameter, values in sources.items():
            for value in values:
                texts = self._source_texts(value)
                if texts is None:
                    self._hit("dynamic_code", value, f"`{parameter}` of {function}() is computed: the gate cannot "
                                                     "read the C++ it compiles")
                    continue
                literals = {n.value for n in self._string_nodes(value)}
                for text in texts:
                    for name, body in defines.items():
                        text = re.sub(rf"\b{name}\b", lambda _m, body=body: body, text)
                    if text in literals:
                        continue  # one literal as written: embedded.py scanned it, at its own lines
                    what = f"C++ source in `{parameter}` of {function}() as compiled"
                    for hit in scan_cpp(text, self.policy):
                        self.hits.append(_Hit(hit.rule, value.lineno, value.col_offset + 1, f"{what}: {hit.message}"))


def _fits(method: str, owner: str, args: list, kwargs: dict[str, list[str]]) -> bool:
    """Whether ``owner.method(*args)`` makes at most MAX_FOLDED_CHARS characters, told before it is made."""
    texts = [a for a in args if isinstance(a, str)] + [v[0] for v in kwargs.values()]
    if method == "join":
        items = args[0] if args else []
        return sum(map(len, items)) + len(owner) * max(len(items) - 1, 0) <= MAX_FOLDED_CHARS
    if method == "replace":
        if len(args) < 2 or not isinstance(args[0], str) or not isinstance(args[1], str):
            return False
        grows = max(len(args[1]) - len(args[0]), 0)
        return len(owner) + owner.count(args[0]) * grows <= MAX_FOLDED_CHARS
    if method == "format":
        try:
            fields = list(string.Formatter().parse(owner))
        except ValueError:
            return False
        # a width or precision is the text's own size (`{:>99999999}`); a nested field makes one from the arguments
        if any(spec and ("{" in spec or any(int(w) > 4096 for w in _FORMAT_WIDTH_RE.findall(spec)))
               for _, _, spec, _ in fields):
            return False
        return len(owner) + sum(map(len, texts)) * max(len(fields), 1) <= MAX_FOLDED_CHARS
    return len(owner) <= MAX_FOLDED_CHARS


class _Bind(ast.NodeTransformer):
    """A helper's parameters replaced by the literal arguments of one call."""

    def __init__(self, bound: dict[str, ast.AST]):
        self.bound = bound

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in self.bound:
            return copy.deepcopy(self.bound[node.id])
        return node
