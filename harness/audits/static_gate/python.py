"""Python/Triton scanner of the static gate: `ast` analysis with import aliases resolved (`import torch as t`,
`from torch import cuda`, `from os import environ`, `E = torch.cuda.Event`).

Every name is judged by its canonical dotted form. Banned names (timer, threads, harness internals,
environment, files, dynamic code, native FFI, streams, monkeypatching, tensor subclasses, clocks) are findings
wherever they are used. Torch compute (torch_compute) is judged by use: a call of a torch function that is not
a constant/allocation/view/metadata/device-query helper (python_names: _TORCH_NEVER_COMPUTE) nor on the
policy's torch_calls allow-list, a torch callable handed to other code, a tensor compute method outside a
Triton kernel, the `@` operator; numpy's float math and linear algebra likewise. An attribute that is only read (a
dtype, a memory format, a layout, a type in an annotation) is never a finding. A kernel's body is Triton's where it
cannot run as Python on the host (python_kernels: `kernel.fn`, a kernel called without a grid, a non-constant global).

Names are canonical through the solution's own modules (`honest.torch` is torch) and through modules re-exported
by others (`torch.sys` is sys); the body of a top-level `if __name__ == "__main__":` is not scanned where nothing
in the solution could make it run (python_modules). One environment variable read by its literal name is an
env_read warning, the build settings of the policy's env_writes may be set (python_env). Literals that only word
the message of a raise/assert/print/warning/log call are prose for the environment markers.
"""

from __future__ import annotations

import ast
from typing import Any

from .common import (
    _ENV_MARKER_RE,
    _QUOTES_AND_SPACE,
    _TEMP_PATH_RE,
    _WHY,
    _Hit,
)
from .embedded import _EmbeddedSources
from .embedded_fold import _FoldedSources
from .policy import _CompiledPolicy
from .python_annotations import _AnnotationChecks
from .python_calls import _CallChecks
from .python_device_lib import JUDGED_AS, device_libraries, driver_queries_only
from .python_self_aliases import self_alias_loops
from .python_env import _EnvChecks
from .python_kernels import _KernelChecks
from .python_modules import _OwnNames, canonical, statements_that_run
from .python_names import (
    _BROAD_EXCEPTIONS,
    _INTERNAL_STRINGS,
    _MEMO_DECORATORS,
    _TENSOR_BASES,
    _TRITON_DECORATORS,
    _WATCHED_BUILTINS,
    _chain_parts,
    _iter_statements,
    _message_literals,
    _names_in,
    _str_const,
)
from .python_module_values import _ModuleValueChecks
from .python_references import _ReferenceChecks
from .python_state import _FunctionFrame, _may_key_by_identity, _StateChecks


# Fields never worth visiting: expression contexts and operator singletons (Load(), Add(), In(), ...).
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops", "type_ignores"})
_VISITED_FIELDS: dict[type, tuple[str, ...]] = {}


class _PythonScanner(_EmbeddedSources, _FoldedSources, _StateChecks, _CallChecks, _EnvChecks, _AnnotationChecks,
                     _ReferenceChecks, _ModuleValueChecks, _KernelChecks, ast.NodeVisitor):
    def __init__(self, tree: ast.Module, source: str, own: _OwnNames, policy: _CompiledPolicy,
                 package: tuple[str, ...] = ()):
        self.tree = tree
        self.package = package  # the package of this module, for its relative imports
        # what runs when the module is imported: the body of a main guard never does (python_modules)
        self.body = statements_that_run(tree, own.main_blocks_inert)
        self.source = source
        self.policy = policy
        self.own = own
        self.hits: list[_Hit] = []
        self.functions: list[_FunctionFrame] = []
        self.aliases: dict[str, str] = {}
        self.rebound_builtins: set[str] = set()
        self.docstrings: set[int] = set()
        self.has_global_declarations = False
        self.may_key_by_identity = _may_key_by_identity(source)
        # name -> every value assigned to it anywhere (flow-insensitive); def name -> its definitions
        self.assignments: dict[str, list[ast.AST]] = {}
        self.module_functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.file_relative: set[str] = set()  # names whose value derives from __file__
        self.called: set[int] = set()  # ids of nodes that are called: call targets and decorators
        self.handed_over: set[int] = set()  # ids of values passed on: arguments, container items, return values
        self.class_attributes: set[int] = set()  # ids of assignments in a class body (`mm = torch.matmul`)
        self.bound_values: set[int] = set()  # ids of values assigned to a plain name (`mm = q.matmul`)
        self.embedded: set[int] = set()  # ids of string literals scanned as C++ (embedded.py)
        self.judged: set[int] = set()  # ids of references judged where they are used (environment, glob, tempfile)
        self.message_literals: set[int] = set()  # ids of string literals of an error or log message
        self.attribute_stores: list[tuple[ast.AST, ast.AST]] = []  # (target, value) of `x.attr = value`
        self._handlers: dict[type, Any] = {}
        self.device_libs: dict[str, set[int]] = {}  # names of a device's torch module looked up by name (FLA)
        self._collect_module_facts(tree)
        # FLA's flags aliased through sys.modules[__name__] (python_self_aliases): that read judged there, the loops'
        # getattr calls no lookups of unseen names; `name.device` of a device module judged as torch.cuda's
        self.alias_keys, alias_lookups = self_alias_loops(tree, self._resolve) if "sys" in source else ({}, set())
        self.judged |= self.alias_keys.keys()
        self.device_libs, self.computed_lookups = device_libraries(tree, source, self._resolve, alias_lookups)

    def scan(self) -> list[_Hit]:
        """The scan proper, once the solution's own modules are known (`own.exports`)."""
        self._scan_embedded_sources(self.body)
        for stmt in self.body:
            self.visit(stmt)
        return self.hits

    # ---- traversal: ast.NodeVisitor's, minus the string building per node and the visits of
    # Load()/Store()/operator singletons (a third of all nodes), to keep 2000 lines well under 50 ms.

    def visit(self, node: ast.AST) -> None:
        cls = type(node)
        handler = self._handlers.get(cls)
        if handler is None:
            handler = getattr(self, "visit_" + cls.__name__, None) or self.generic_visit
            self._handlers[cls] = handler
        handler(node)

    def generic_visit(self, node: ast.AST) -> None:
        cls = type(node)
        fields = _VISITED_FIELDS.get(cls)
        if fields is None:
            fields = _VISITED_FIELDS[cls] = tuple(f for f in cls._fields if f not in _SKIPPED_FIELDS)
        visit = self.visit
        for field in fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, ast.AST):
                        visit(item)
            elif isinstance(value, ast.AST):
                visit(value)

    # ---- pre-pass: aliases, rebound builtins, docstrings, assignments

    def _collect_module_facts(self, tree: ast.Module) -> None:
        simple_assigns: list[tuple[str, list[str]]] = []
        recorded = self._recorded = set[int]()  # the name targets `assignments` holds the values of
        if tree.body and isinstance(tree.body[0], ast.Expr) and _str_const(tree.body[0].value) is not None:
            self.docstrings.add(id(tree.body[0].value))
        for node in _iter_statements(self.body):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = a.name.split(".")[0]
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom):
                base = self._from_base(node)
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = self._join(base, a.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name in _WATCHED_BUILTINS:
                    self.rebound_builtins.add(node.name)
                if not isinstance(node, ast.ClassDef):
                    self.module_functions.setdefault(node.name, []).append(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                if node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                # `f: Callable = torch.matmul` is an alias as `f = torch.matmul` is
                parts = _chain_parts(node.value) if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                for target in targets:
                    if isinstance(target, ast.Attribute) and parts is not None:
                        self.attribute_stores.append((target, node.value))
                    if isinstance(target, ast.Name):
                        recorded.add(id(target))
                        self.assignments.setdefault(target.id, []).append(node.value)
                        self.bound_values.add(id(node.value))
                        if parts is not None:
                            simple_assigns.append((target.id, parts))
                        if target.id in _WATCHED_BUILTINS:
                            self.rebound_builtins.add(target.id)
            elif isinstance(node, (ast.For, ast.AsyncFor)) and isinstance(node.target, ast.Name):  # `for s in SRCS:`
                self.assignments.setdefault(node.target.id, []).append(node.iter)  # an element of what it loops over
                recorded.add(id(node.target))
            elif isinstance(node, ast.Expr) and _str_const(node.value) is not None:
                self.docstrings.add(id(node.value))  # docstrings and bare string statements are prose
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                self.has_global_declarations = True
        # `E = torch.cuda.Event` / `env = os.environ` / `w = open` make E, env, w aliases too. Two rounds
        # resolve one level of alias-of-alias; flow-insensitive on purpose (order of definition is irrelevant).
        for _ in range(2):
            for target, parts in simple_assigns:
                resolved = self._resolve_parts(parts)
                if resolved is not None and target not in self.aliases:
                    self.aliases[target] = resolved
        if "__file__" in self.source:
            for _ in range(3):
                for name, values in self.assignments.items():
                    if name not in self.file_relative and any(self._is_file_relative(v) for v in values):
                        self.file_relative.add(name)

    _from_base = staticmethod(lambda node: "." * node.level + (node.module or ""))  # `from ..a import b`: "..a"
    _join = staticmethod(lambda base, name: f"{base}{name}" if (not base or base.endswith(".")) else f"{base}.{name}")

    def _resolve_name(self, name: str) -> str | None:
        resolved = self.aliases.get(name)
        if resolved is not None:
            return resolved
        if name in _WATCHED_BUILTINS and name not in self.rebound_builtins:
            return f"builtins.{name}"
        if name in self.device_libs:
            return JUDGED_AS
        return None

    def _resolve_parts(self, parts: list[str]) -> str | None:
        """The canonical dotted name: aliases resolved, then through the solution's own modules and through modules
        re-exported by others (python_modules.canonical)."""
        base = self._resolve_name(parts[0])
        if base is None:
            return None
        return canonical(base if len(parts) == 1 else base + "." + ".".join(parts[1:]), self.package, self.own)

    def _resolve(self, node: ast.AST) -> str | None:
        parts = _chain_parts(node)
        return None if parts is None else self._resolve_parts(parts)

    def _is_own(self, resolved: str) -> bool:
        return (resolved.startswith(".") or resolved.split(".")[0] in self.own.modules
                or (bool(self.own.prefixes) and (resolved + ".").startswith(self.own.prefixes)))

    def _is_file_relative(self, expr: ast.AST) -> bool:
        return any(name == "__file__" or name in self.file_relative for name in _names_in(expr))

    @property
    def _in_triton_kernel(self) -> bool:
        return bool(self.functions) and self.functions[-1].is_triton_kernel

    # ---- reporting

    def _hit(self, rule: str, node: ast.AST, what: str) -> None:
        self.hits.append(_Hit(rule, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1,
                              f"{what}: {_WHY[rule]}"))

    # ---- values handed over: a torch callable passed on is judged like a call

    def _hand_over(self, node: ast.AST, values: list[Any]) -> None:
        for value in values:
            if value is not None:
                self.handed_over.add(id(value.value if isinstance(value, ast.Starred) else value))
        self.generic_visit(node)

    def visit_List(self, node: ast.List) -> None:
        self._hand_over(node, node.elts)

    visit_Tuple = visit_List
    visit_Set = visit_List

    def visit_Dict(self, node: ast.Dict) -> None:
        self._hand_over(node, node.values)

    def visit_Return(self, node: ast.Return) -> None:
        self._hand_over(node, [node.value])

    # ---- functions, classes, control flow

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        is_kernel = False
        for deco in node.decorator_list:
            self.called.add(id(deco))  # `@torch.compile` is a call of torch.compile
            target = deco.func if isinstance(deco, ast.Call) else deco
            resolved = self._resolve(target)
            if resolved in _TRITON_DECORATORS:
                is_kernel = True
            elif resolved in _MEMO_DECORATORS and not self._memo_is_scalar_keyed(node):
                self._hit("memoized_function", deco, f"`{node.name}()` is memoised with `{resolved}`")
        if node.name == "__del__":
            self._hit("concurrency", node, "defines a finalizer `__del__`, which runs code outside the timed call")
        elif node.name in ("__torch_function__", "__torch_dispatch__"):
            self._hit("tensor_subclass", node, f"defines `{node.name}`")
        self._check_annotation(node.returns)  # `-> "T"`, evaluated later (python_annotations)
        frame = _FunctionFrame(node, is_kernel or self._in_triton_kernel)
        self.functions.append(frame)
        try:
            self.generic_visit(node)
        finally:
            self.functions.pop()
        if self.has_global_declarations:
            self._check_global_state(frame)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for deco in node.decorator_list:
            self.called.add(id(deco))
        self.class_attributes.update(id(s) for s in node.body if isinstance(s, (ast.Assign, ast.AnnAssign)))
        for stmt in node.body:  # `__del__ = _finalize` in a class body, as `def __del__` is
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
                stmt, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in _HOOK_NAMES:
                    self._hit(_HOOK_NAMES[target.id], target, f"class `{node.name}` binds the hook `{target.id}`")
        for base in node.bases:
            resolved = self._resolve(base)
            if resolved in _TENSOR_BASES:
                self._hit("tensor_subclass", base, f"class `{node.name}` subclasses `{resolved}`")
            elif self._is_class_of_value(base) or isinstance(base, ast.Subscript):
                # `class L(type(output))`, `class L(output.__class__)`, `class L(torch.nn.Parameter.__mro__[1])`
                self._hit("tensor_subclass", base, f"class `{node.name}` subclasses `{ast.unparse(base)}`, a class "
                                                   "taken from a value or a class's bases")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self._in_triton_kernel:
            self._hit("torch_compute", node, "uses the `@` (matmul) operator outside a Triton kernel")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.op, ast.MatMult) and not self._in_triton_kernel:
            self._hit("torch_compute", node, "uses the `@=` (matmul) operator outside a Triton kernel")
        self.generic_visit(node)

    def _visit_try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            broad = handler.type is None
            if isinstance(handler.type, ast.Name):
                broad = handler.type.id in _BROAD_EXCEPTIONS
            elif isinstance(handler.type, ast.Tuple):
                broad = any(isinstance(e, ast.Name) and e.id in _BROAD_EXCEPTIONS for e in handler.type.elts)
            if (broad and not any(isinstance(s, ast.Raise) for st in handler.body for s in ast.walk(st))
                    and not driver_queries_only(node.body, self._resolve)):  # FLA's device probe (python_device_lib)
                caught = "everything" if handler.type is None else ast.unparse(handler.type)
                self._hit("silent_fallback", handler, f"`except` catches {caught} and does not re-raise")
        self.generic_visit(node)

    visit_Try = _visit_try
    visit_TryStar = _visit_try

    # ---- messages: a literal that only words an error, an assertion or a log line is prose

    def visit_Raise(self, node: ast.Raise) -> None:
        if isinstance(node.exc, ast.Call):
            self._mark_messages(node.exc.args)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._mark_messages([node.msg])
        self.generic_visit(node)

    def _mark_messages(self, expressions: list[ast.AST]) -> None:
        for expr in expressions:
            self.message_literals.update(id(c) for c in _message_literals(expr))

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if not isinstance(value, str) or not value or id(node) in self.docstrings or id(node) in self.embedded:
            return  # prose, or C++ source already scanned with the C++ rules
        if value in _INTERNAL_STRINGS:
            self._hit("harness_internals", node, f"names interpreter internal `{value}` in a string")
        if value in _HOOK_NAMES:  # type("K", (), {"__del__": f}), setattr(K, "__torch_function__", f)
            self._hit(_HOOK_NAMES[value], node, f"names the hook `{value}` in a string")
        marker = _ENV_MARKER_RE.search(value) if id(node) not in self.message_literals else None
        if marker:
            self._hit("env_probe", node, f"string mentions `{marker.group(0).strip(_QUOTES_AND_SPACE)}`")
        if _TEMP_PATH_RE.search(value):
            self._hit("file_cache", node, f"string names a shared temp/cache path ({value[:60]!r})")


# Hooks that run the candidate's code outside its call: a finalizer, and the torch-function/dispatch protocol.
_HOOK_NAMES = {"__del__": "concurrency", "__torch_function__": "tensor_subclass",
               "__torch_dispatch__": "tensor_subclass"}


def _prepare_python(source: str, own: _OwnNames, policy: _CompiledPolicy,
                    package: tuple[str, ...] = ()) -> _PythonScanner | list[_Hit]:
    """A scanner with its pre-pass done (aliases, assignments), or the syntax findings of a source that does not
    parse."""
    why = _WHY["syntax"]
    declared = _declared_encoding(source)
    if declared is not None:
        return [_Hit("syntax", 1, 1, f"declares the source encoding {declared!r}: Python decodes the file with it, "
                                     f"so it would run other code than the UTF-8 text scanned here: {why}")]
    try:
        tree = ast.parse(source.removeprefix("\ufeff"))
    except SyntaxError as exc:
        return [_Hit("syntax", exc.lineno or 1, exc.offset or 1, f"Python syntax error: {exc.msg}: {why}")]
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. null bytes, absurd nesting
        return [_Hit("syntax", 1, 1, f"source cannot be parsed ({type(exc).__name__}: {exc}): {why}")]
    try:
        return _PythonScanner(tree, source, own, policy, package)
    except RecursionError:
        return [_Hit("syntax", 1, 1, f"source is nested too deeply to analyse: {why}")]


def _declared_encoding(source: str) -> str | None:
    """A coding declaration (PEP 263) on the first two lines that names anything but UTF-8, as Python reads it from
    the file the build writes: ``# coding: utf-7`` turns ``# +AAo-import gc`` from a comment into code."""
    import codecs
    import io
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source.encode("utf-8", "surrogatepass")).readline)
    except SyntaxError as exc:  # an unknown codec: Python refuses the file as well
        return str(exc)
    return None if codecs.lookup(encoding).name in ("utf-8", "utf-8-sig") else encoding


def _finish_python(scanner: _PythonScanner | list[_Hit]) -> list[_Hit]:
    if isinstance(scanner, list):
        return scanner
    try:
        return scanner.scan()
    except RecursionError:
        return [*scanner.hits, _Hit("syntax", 1, 1, f"source is nested too deeply to analyse: {_WHY['syntax']}")]
