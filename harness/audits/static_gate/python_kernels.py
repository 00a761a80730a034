"""Triton kernels run as Python, for the Python scanner: what Triton refuses on a GPU but its CPU interpreter runs.

Under TRITON_INTERPRET=1 a @triton.jit function's body is plain Python, and the gate waives tensor methods inside one
(`x.sum()` in a kernel is Triton's). Torch compute can hide there wherever the body gets torch tensors instead of
Triton's pointers (red team round 7):

- the raw Python function of a jit function, `kernel.fn(q, k, v)` (an Autotuner's or Heuristics' `.fn`/`.base_fn` is
  the jit function), or the jit function called directly on the host, `kernel(q, k, v)` rather than
  `kernel[grid](...)`: on a GPU Triton refuses that call, the interpreter runs the body on what it is given;
- a module global that Triton refuses on a GPU (it takes only tl.constexpr globals, modules, jit functions, its own
  builtins and dtypes, named tuples) read in a kernel's body: `_T = {}` filled with the inputs by the launcher and read
  as `_T["q"].matmul(...)` in the kernel. A global bound to a display or comprehension of a container, a call (other
  than Triton's own, `tl.constexpr(...)`, or a number's: `float("inf")`, `math.log2(e)`), a lambda, a class that is no
  named tuple, a name another module binds so, or one rebound through a `global` statement is such a global; literal
  constants (numbers, strings, tuples of them, `X: tl.constexpr = 128`) are not.

A mixin of ``_PythonScanner`` (harness/audits/static_gate/python.py); the solution's jit functions and refused globals
of every module are collected before any scan (``collect_kernel_facts``, into ``_OwnNames``), so a name imported from
another module of the solution is judged as that module binds it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from .python_modules import _absolute, module_of
from .python_names import _TRITON_DECORATORS, _chain_parts, _iter_statements

# the Python function behind a jit one (JITFunction.fn, an Autotuner's base_fn), and the interpreter's own ways to run
# it on the host (`kernel.__call__(q)`, its rewritten function)
_RAW_FUNCTION_ATTRS = frozenset({"fn", "base_fn", "__call__", "rewrite"})
_JIT_ENDINGS = frozenset(d.rpartition(".")[2] for d in _TRITON_DECORATORS)
_NUMBER_FUNCTIONS = frozenset({"float", "int", "bool", "str", "abs", "min", "max", "round", "len"})
_NAMED_TUPLE_BASES = frozenset({"typing.NamedTuple", "collections.namedtuple"})
_WHY_REFUSED = "Triton refuses non-constexpr globals on a GPU; the CPU interpreter would run it as Python"


def _is_jit_decorator(deco: ast.AST, resolve: Callable[[ast.AST], str | None]) -> bool:
    return resolve(deco.func if isinstance(deco, ast.Call) else deco) in _TRITON_DECORATORS


def _makes_jit(value: ast.Call, resolve: Callable[[ast.AST], str | None]) -> bool:
    """`triton.jit(f)`, `triton.autotune(configs=...)(kernel)`: a jit function. (Only names that end like one are
    resolved, to keep the many other calls cheap; the body of a function made a jit one otherwise is scanned as host
    code, its tensor methods judged.)"""
    func = value.func.func if isinstance(value.func, ast.Call) else value.func
    parts = _chain_parts(func)
    return parts is not None and (len(parts) == 1 or parts[-1] in _JIT_ENDINGS) and _is_jit_decorator(func, resolve)


def _module_bindings(tree: ast.Module) -> tuple[dict[str, list[ast.AST | None]], set[str]]:
    """(module-level name -> the values bound to it, None for a binding whose value is not shown; names declared
    `global` in any function). Statements of function and class bodies are not module level."""
    bound: dict[str, list[ast.AST | None]] = {}
    stack = list(tree.body)
    while stack:
        stmt = stack.pop()
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                pairs = [(target, stmt.value)]
                if isinstance(target, ast.Tuple) and isinstance(stmt.value, ast.Tuple) and len(
                        target.elts) == len(stmt.value.elts):  # `BLOCK_M, BLOCK_N = 64, 32`
                    pairs = list(zip(target.elts, stmt.value.elts))
                for bound_to, value in pairs:
                    plain = isinstance(bound_to, ast.Name)
                    for name in ast.walk(bound_to):
                        if isinstance(name, ast.Name):
                            bound.setdefault(name.id, []).append(value if plain else None)
        elif isinstance(stmt, ast.ClassDef):
            bound.setdefault(stmt.name, []).append(stmt)
        elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for field in ("body", "orelse", "finalbody"):
                stack.extend(getattr(stmt, field, None) or [])
            for handler in getattr(stmt, "handlers", ()):
                stack.extend(handler.body)
    declared = {n for node in _iter_statements(tree.body) if isinstance(node, ast.Global) for n in node.names}
    return bound, declared


def _constant(value: ast.AST, resolve: Callable[[ast.AST], str | None], own: Callable[[str], bool],
              depth: int = 0) -> bool:
    """A value Triton could fold, or that holds no object the kernel could compute with: a literal, arithmetic on
    literals, a tuple of them, a number made by a call, a library's attribute (a dtype), Triton's own calls. A name of
    the module is judged as what it is bound to (_refused_names); one of the solution's other modules, or an attribute
    of a value, may be anything."""
    if depth > 8:
        return False
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, (ast.Name, ast.Attribute)):
        resolved = resolve(value)
        return isinstance(value, ast.Name) if resolved is None else not own(resolved)
    if isinstance(value, ast.UnaryOp):
        return _constant(value.operand, resolve, own, depth + 1)
    if isinstance(value, (ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Tuple, ast.JoinedStr,
                          ast.FormattedValue)):
        return all(_constant(child, resolve, own, depth + 1) for child in ast.iter_child_nodes(value)
                   if isinstance(child, ast.expr))
    if isinstance(value, ast.Call):
        func = value.func
        resolved = resolve(func) or ""
        return (resolved.startswith(("triton.", "math.")) or isinstance(func, ast.Name)
                and func.id in _NUMBER_FUNCTIONS)
    return False


def _named_tuple(cls: ast.ClassDef, resolve: Callable[[ast.AST], str | None]) -> bool:
    return any(resolve(b) in _NAMED_TUPLE_BASES for b in cls.bases) or any(
        (resolve(d.func if isinstance(d, ast.Call) else d) or "").startswith("triton.") for d in cls.decorator_list)


def _refused_names(tree: ast.Module, resolve: Callable[[ast.AST], str | None], own: Callable[[str], bool],
                   skip: set[str]) -> set[str]:
    """Module-level names a kernel may not read on a GPU (module docstring); `skip`: the module's jit functions; `own`:
    whether a resolved name is the solution's."""
    bound, declared = _module_bindings(tree)
    refused = set(declared)
    for name, values in bound.items():
        if name in skip:
            continue
        for value in values:
            if value is None or (isinstance(value, ast.ClassDef) and not _named_tuple(value, resolve)) or (
                    isinstance(value, ast.expr) and not _constant(value, resolve, own)):
                refused.add(name)
    for _ in range(3):  # `_U = _T`: an alias of a refused global is one
        refused |= {n for n, vs in bound.items() if any(isinstance(v, ast.Name) and v.id in refused for v in vs)}
    return refused


def jit_names(tree: ast.Module, resolve: Callable[[ast.AST], str | None]) -> set[str]:
    """Names of the module's jit functions: decorated definitions, and names bound to `triton.jit(f)` or to one."""
    statements = list(_iter_statements(tree.body))
    jit = {n.name for n in statements if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
           and any(_is_jit_decorator(d, resolve) for d in n.decorator_list)}
    assigns = [(t.id, n.value) for n in statements if isinstance(n, ast.Assign) and isinstance(n.value, (
        ast.Call, ast.Name)) for t in n.targets if isinstance(t, ast.Name)]
    jit |= {name for name, value in assigns if isinstance(value, ast.Call) and _makes_jit(value, resolve)}
    for _ in range(3):
        jit |= {name for name, value in assigns if isinstance(value, ast.Name) and value.id in jit}
    return jit


def collect_kernel_facts(own: Any, scanners: Mapping[str, Any]) -> None:
    """Fill ``own.jit_functions`` and ``own.refused_globals`` (absolute dotted names) from every module."""
    for path, scanner in scanners.items():
        module = module_of(path)[0]
        jit = jit_names(scanner.tree, scanner._resolve)
        refused = _refused_names(scanner.tree, scanner._resolve, scanner._is_own, jit)
        scanner._kernel_name_facts = (jit, refused)  # the scanner's own, computed once
        prefix = f"{module}." if module else ""
        own.jit_functions.update(prefix + name for name in jit)
        own.refused_globals.update(prefix + name for name in refused)


class _KernelChecks:
    """Mixed into the Python scanner (see the module docstring)."""

    tree: ast.Module

    def _kernel_names(self) -> tuple[set[str], set[str]]:
        """(this module's jit functions, its globals a kernel may not read), computed once."""
        facts = getattr(self, "_kernel_name_facts", None)
        if facts is None:
            jit = jit_names(self.tree, self._resolve)
            facts = self._kernel_name_facts = (jit, _refused_names(self.tree, self._resolve, self._is_own, jit))
        return facts

    def _own_absolute(self, node: ast.AST) -> str | None:
        """The absolute dotted name of `node` where it is another module of the solution's (`from .k import f`)."""
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or not self._is_own(self.aliases.get(root.id, "")):
            return None  # resolved only where the root is the solution's own import: most names are locals or tl's
        resolved = self._resolve(node)
        if resolved is None or not self._is_own(resolved):
            return None
        return _absolute(resolved, self.package)

    def _is_jit_value(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name) and node.id in self._kernel_names()[0] and node.id not in self.aliases:
            return True
        absolute = self._own_absolute(node)
        return absolute is not None and absolute in self.own.jit_functions

    def _check_raw_kernel(self, node: ast.Attribute) -> None:
        """`kernel.fn`, `autotuned.base_fn`: the Python function behind a jit function, to be called on the host."""
        if node.attr in _RAW_FUNCTION_ATTRS and isinstance(node.ctx, ast.Load) and self._is_jit_value(node.value):
            self._hit("dynamic_code", node, f"reads `.{node.attr}` of @triton.jit function "
                                            f"`{ast.unparse(node.value)}`: its Python body would run on the host")

    def _check_kernel_call(self, node: ast.Call) -> None:
        """`kernel(q, k)` outside a kernel: Triton refuses it on a GPU, the interpreter runs the body as Python."""
        if not self._in_triton_kernel and self._is_jit_value(node.func):
            self._hit("dynamic_code", node, f"calls @triton.jit function `{ast.unparse(node.func)}` on the host "
                                            "(not launched with a grid): Triton refuses it on a GPU; the CPU "
                                            "interpreter would run its body as Python")

    def _check_kernel_global(self, node: ast.Name | ast.Attribute) -> None:
        """A kernel's read of a global Triton refuses on a GPU (module docstring): `node` is a name, or an attribute
        chain (`_T.q`, `state._T`) whose root is one."""
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name) or not isinstance(node.ctx, ast.Load) or not self._in_triton_kernel:
            return
        jit, refused = self._kernel_names()
        name = root.id
        if name in self.aliases:  # imported: as the solution's module that binds it binds it
            parts = (self._own_absolute(node) or "").split(".")
            name = next((".".join(parts[:i]) for i in range(1, len(parts) + 1)
                         if ".".join(parts[:i]) in self.own.refused_globals), None)
        elif name not in refused or name in jit:
            return
        first = self.functions[-1].node.body[0]
        if (name is None or (root.lineno, root.col_offset) < (first.lineno, first.col_offset)
                or root.id in self._facts(self.functions[-1]).local_names):
            return  # decorators and defaults (`autotune(configs=_CONFIGS)`) are read on the host; a local name
        self._hit("dynamic_code", node, f"a Triton kernel reads module global `{name}`, which is no constant: "
                                        + _WHY_REFUSED)
