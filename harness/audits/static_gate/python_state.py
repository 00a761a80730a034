"""State that survives a call, for the Python scanner: caches keyed by tensor identity (output_cache),
memoised functions (memoized_function) and rebound module globals (global_state).

A mixin of ``_PythonScanner`` (harness/audits/static_gate/python.py); it reads the scanner's alias resolution
(``_resolve``), its reporting (``_hit``) and its stack of enclosing functions.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .common import _is_word_char
from .python_env_flags import _bound, _stores
from .python_names import (
    _IDENTITY_METHODS,
    _SCALAR_ANNOTATIONS,
    _SCALAR_ATTRS,
    _SCALAR_FUNCTIONS,
    _SCALAR_METHODS,
    _chain_parts,
    _names_in,
)

if TYPE_CHECKING:
    from .common import _Hit

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class _FunctionFacts:
    """What one function body binds, for telling local state from state that survives the call."""

    local_names: set[str]
    declared_global: set[str]
    identity_names: set[str]  # locals assigned from data_ptr()/id()/hash() expressions
    mutable_default_params: set[str]
    first_global_statement: ast.AST | None
    # (target names, value or None when not a plain assignment, augmented?) for every binding in the body
    bindings: list[tuple[list[str], ast.AST | None, bool]] = field(default_factory=list)


@dataclass
class _FunctionFrame:
    node: FunctionNode
    is_triton_kernel: bool
    facts: _FunctionFacts | None = None  # computed on first need (most functions never need it)


# Cheap text pre-filter: without any of these words no identity-keyed cache is possible, and the
# per-function analysis that finds one is skipped.
_IDENTITY_HINT_RE = re.compile(r"(?:id|hash)\b|data_ptr|_cdata|__hash__|storage_offset|unsafe_ptr")


def _may_key_by_identity(source: str) -> bool:
    for m in _IDENTITY_HINT_RE.finditer(source):
        word = m.group(0)
        if word not in ("id", "hash") or m.start() == 0 or not _is_word_char(source[m.start() - 1]):
            return True
    return False


def _parameters(node: FunctionNode) -> list[ast.arg]:
    a = node.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]


def _targets_of(stmt: ast.AST) -> tuple[list[ast.AST], ast.AST | None, bool]:
    """(binding targets, the value bound or None, augmented?) of a statement that binds names."""
    if isinstance(stmt, ast.Assign):
        return stmt.targets, stmt.value, False
    if isinstance(stmt, (ast.AnnAssign, ast.NamedExpr)):
        return [stmt.target], stmt.value, False
    if isinstance(stmt, ast.AugAssign):
        return [stmt.target], stmt.value, True
    if isinstance(stmt, (ast.For, ast.AsyncFor, ast.comprehension)):
        return [stmt.target], stmt.iter, False
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return [i.optional_vars for i in stmt.items if i.optional_vars is not None], None, False
    return [], None, False


class _StateChecks:
    """output_cache, memoized_function and global_state (see the module docstring)."""

    hits: list[_Hit]
    functions: list[_FunctionFrame]
    may_key_by_identity: bool
    tree: ast.Module
    source: str
    own: Any  # python_modules._OwnNames: its `sources`, every file's text

    # ---- identity-keyed caches

    def _facts(self, frame: _FunctionFrame) -> _FunctionFacts:
        if frame.facts is None:
            frame.facts = self._function_facts(frame.node)
        return frame.facts

    def _derives_identity(self, expr: ast.AST, facts: _FunctionFacts, node: FunctionNode | None = None) -> str | None:
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Call):
                if isinstance(sub.func, ast.Attribute) and sub.func.attr in _IDENTITY_METHODS:
                    return f".{sub.func.attr}()"
                resolved = self._resolve(sub.func)
                if resolved == "builtins.hash" and self._hashes_by_value(sub, facts, node):
                    continue  # hash((B, H)), hash(tuple(q.shape)): shapes and sizes hash by value
                if resolved in ("builtins.id", "builtins.hash") and self._names_code(sub, facts, node):
                    continue  # id(kernel): a launcher cache per kernel, never keyed by an input
                if resolved in ("builtins.id", "builtins.hash"):
                    return f"{resolved.split('.')[1]}()"
            elif isinstance(sub, ast.Attribute) and sub.attr == "_cdata":
                return "._cdata"
            elif isinstance(sub, ast.Name) and sub.id in facts.identity_names:
                return f"`{sub.id}` (assigned from data_ptr()/id()/hash())"
        return None

    def _hashes_by_value(self, call: ast.Call, facts: _FunctionFacts, node: FunctionNode | None) -> bool:
        """`hash(x)` of the function's scalar metadata only (shapes, sizes, dtypes, constants): no tensor in it."""
        if node is None or len(call.args) != 1 or call.keywords or any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "item"
                for c in ast.walk(call.args[0])):
            return False  # `.item()` reads a tensor's content: a hash of it keys by what an input holds
        return self._is_clean(call.args[0], self._tainted_names(node, facts, through_metadata=True), True)

    def _names_code(self, call: ast.Call, facts: _FunctionFacts, node: FunctionNode | None) -> bool:
        """`id(f)` / `hash(f)` of a function or kernel, not of a tensor: `f` is a def or class of the module bound
        nowhere else, or a parameter the function launches as a Triton kernel by a statement of its own body that
        every call reaches (`ck = f[grid](...)`: a tensor's subscript is a tensor, and calling it raises on every
        call). Launch-path caches (compiled launchers per kernel) key so."""
        if len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Name):
            return False
        name = call.args[0].id
        if name not in facts.local_names:
            return name in self._module_code_names()
        return node is not None and self._launched_by_its_body(node, name)

    def _launched_by_its_body(self, node: FunctionNode, param: str) -> bool:
        if param not in {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} or any(
                param in _bound(n) for stmt in node.body for n in ast.walk(stmt)):
            return False  # a parameter the body never rebinds
        declared = {name for n in ast.walk(node) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
        own = {name for n in ast.walk(node) for name in _bound(n)} - declared  # the call's own locals
        for stmt in node.body:
            if isinstance(stmt, (ast.Return, ast.Raise)):
                return False  # what follows is never reached
            value = getattr(stmt, "value", None) if isinstance(stmt, (ast.Assign, ast.Expr, ast.AnnAssign)) else None
            if (isinstance(value, ast.Call) and isinstance(value.func, ast.Subscript)
                    and isinstance(value.func.value, ast.Name) and value.func.value.id == param):
                return True
            filled = [n.value for n in ast.walk(stmt)
                      if isinstance(n, (ast.Subscript, ast.Attribute)) and isinstance(n.ctx, (ast.Store, ast.Del))]
            filled += [n.func.value for n in ast.walk(stmt) if isinstance(n, ast.Call)
                       and isinstance(n.func, ast.Attribute) and n.func.attr in _FILLS]
            if any(not (isinstance(c, ast.Name) and c.id in own) for c in filled):
                return False  # a cache filled before the launch can answer calls that never launch
        return False

    def _arguments_at_every_call(self, node: FunctionNode, param: str) -> list[ast.AST] | None:
        """What each call of `node` (a module-level function whose calls are all visible) passes as its parameter
        `param`, which its body never rebinds; None where that is not known of every call (a default taken, `*args`
        or `**kwargs` passed, no call seen)."""
        positional = [p.arg for p in (*node.args.posonlyargs, *node.args.args)]
        calls = self._calls_by_name().get(node.name) if node in self.body else None
        word = re.compile(rf"\b{re.escape(node.name)}\b")
        if (not calls or node.decorator_list or param not in positional + [p.arg for p in node.args.kwonlyargs]
                or any(param in _bound(n) for stmt in node.body for n in ast.walk(stmt))
                or any(isinstance(n, ast.Attribute) and n.attr == node.name for n in ast.walk(self.tree))
                or any(word.search(text) for text in self.own.sources.values() if text != self.source)):
            return None  # handed on by a decorator, called from another file, or its parameter rebound
        out = []
        for call, _caller in calls:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                return None
            given = [k.value for k in call.keywords if k.arg == param]
            if param in positional and positional.index(param) < len(call.args):
                given.append(call.args[positional.index(param)])
            if len(given) != 1:
                return None
            out.append(given[0])
        return out

    def _module_code_names(self) -> frozenset[str]:
        """Names the module binds once, by a top-level `def` or `class`, and by nothing else in any scope (a
        `global` rebinding, an import, a match capture...: a name also bound elsewhere may hold anything)."""
        cached = getattr(self, "_code_names_cache", None)  # asked at every id()/hash() of a cache key
        if cached is not None:
            return cached
        stores = _stores(self.tree)
        attributes = {n.attr for n in ast.walk(self.tree) if isinstance(n, ast.Attribute)}  # `me._cur = q`
        elsewhere = "\n".join(text for text in self.own.sources.values() if text != self.source)
        self._code_names_cache = frozenset(stmt.name for stmt in self.body
                                           if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                                           and stores.get(stmt.name) == 1 and stmt.name not in attributes
                                           and not re.search(rf"\b{re.escape(stmt.name)}\b", elsewhere))
        return self._code_names_cache

    @staticmethod
    def _outlives_call(container: ast.AST, facts: _FunctionFacts) -> bool:
        if isinstance(container, ast.Name):
            name = container.id
            return (name not in facts.local_names or name in facts.declared_global
                    or name in facts.mutable_default_params)
        return _chain_parts(container) is not None  # self._cache, fn.cache, module.cache

    def _check_cache_access(self, container: ast.AST, key: ast.AST, node: ast.AST) -> bool:
        if not self.may_key_by_identity or not self.functions or self._resolve(container) is not None:
            return False
        frame = self.functions[-1]
        facts = self._facts(frame)
        if not self._outlives_call(container, facts):
            return False
        derivation = self._derives_identity(key, facts, frame.node)
        if derivation is None or holds_descriptors_only(self.tree, container, self._resolve, self.assignments):
            return False
        self._hit("output_cache", node,
                  f"output/result cache keyed by tensor identity: `{ast.unparse(container)}` is indexed in "
                  f"{frame.node.name}() with a key derived from {derivation}")
        return True

    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                self._check_cache_access(right, left, node)
                self._env_membership(left, right, node)
                self._path_membership(left, right)
            left = right
        self.generic_visit(node)

    def _function_facts(self, node: FunctionNode) -> _FunctionFacts:
        a = node.args
        positional = [*a.posonlyargs, *a.args]
        mutable_defaults: set[str] = set()
        for param, default in [*zip(positional[len(positional) - len(a.defaults):], a.defaults),
                               *zip(a.kwonlyargs, a.kw_defaults)]:
            if isinstance(default, (ast.Dict, ast.List, ast.Set)) or (
                    isinstance(default, ast.Call) and isinstance(default.func, ast.Name)
                    and default.func.id in ("dict", "list", "set", "defaultdict", "OrderedDict")):
                mutable_defaults.add(param.arg)
        local_names = {p.arg for p in _parameters(node)}
        declared: set[str] = set()
        first_global: ast.AST | None = None
        bindings: list[tuple[list[str], ast.AST | None, bool]] = []
        for stmt in node.body:
            for sub in ast.walk(stmt):
                if isinstance(sub, (ast.Global, ast.Nonlocal)):
                    declared.update(sub.names)
                    if first_global is None:
                        first_global = sub
                elif isinstance(sub, ast.Name) and not isinstance(sub.ctx, ast.Load):
                    local_names.add(sub.id)
                else:
                    targets, value, augmented = _targets_of(sub)
                    names = [n for t in targets for n in _names_in(t)]
                    if names:
                        bindings.append((names, value, augmented))
        facts = _FunctionFacts(local_names, declared, set(), mutable_defaults, first_global, bindings)
        if self.may_key_by_identity:
            for _ in range(2):  # two rounds: `p = x.data_ptr(); key = (p, n)` taints key too
                for names, value, _aug in bindings:
                    if value is not None and self._derives_identity(value, facts, node) is not None:
                        facts.identity_names.update(names)
        return facts

    # ---- values derived from a function's arguments

    def _tainted_names(self, node: FunctionNode | None, facts: _FunctionFacts | None, through_metadata: bool,
                       also: frozenset[str] = frozenset()) -> set[str]:
        """Names of `node` whose value may derive from its (non-scalar) arguments, or from `also`.

        With `through_metadata`, scalar metadata (`q.shape`, `q.size(0)`, `q.device.index`, ...) does not carry
        the taint: such values hash by value, not by tensor identity."""
        if node is None or facts is None:
            return set(also)
        tainted = {p.arg for p in _parameters(node) if not _scalar_annotation(p.annotation)} | set(also)
        for _ in range(3):
            before = len(tainted)
            for names, value, augmented in facts.bindings:
                if (value is None or not self._is_clean(value, tainted, through_metadata)
                        or (augmented and tainted.intersection(names))):
                    tainted.update(names)
            if len(tainted) == before:
                break
        return tainted

    def _is_clean(self, expr: ast.AST, tainted: set[str], through_metadata: bool) -> bool:
        """No name of `tainted` reaches the value of `expr` (with `through_metadata`: except as scalar metadata)."""
        if isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.Name):
            return expr.id not in tainted
        if through_metadata:
            if isinstance(expr, ast.Attribute) and expr.attr in _SCALAR_ATTRS:
                return True
            if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute)
                    and expr.func.attr in _SCALAR_METHODS):
                return all(self._is_clean(a, tainted, through_metadata) for a in expr.args)
            if isinstance(expr, ast.Call) and self._resolve(expr.func) in _SCALAR_FUNCTIONS:
                return all(self._is_clean(a, tainted, through_metadata) for a in expr.args)
        if isinstance(expr, (ast.Lambda, ast.Await, ast.Yield, ast.YieldFrom)):
            return False
        return all(self._is_clean(child, tainted, through_metadata) for child in ast.iter_child_nodes(expr)
                   if not isinstance(child, (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)))

    # ---- memoised functions

    def _memo_is_scalar_keyed(self, node: FunctionNode) -> bool:
        """A memoised function whose every argument is a scalar (annotated so, or so at every call in the
        module) cannot key its cache by tensor identity."""
        params = _parameters(node)
        enums = self._module_enums()
        if not params or all(_scalar_annotation(p.annotation) or _enum_annotation(p.annotation, enums)
                             for p in params):
            return True
        calls = self._calls_by_name().get(node.name)
        if not calls:
            return False
        for call, caller in calls:
            facts = self._function_facts(caller) if caller is not None else None
            tainted = self._tainted_names(caller, facts, through_metadata=True)
            arguments = [*call.args, *(k.value for k in call.keywords)]
            if not all(self._is_clean(a, tainted, through_metadata=True) for a in arguments):
                return False
        return True

    def _module_enums(self) -> frozenset[str]:
        """This module's own Enum classes (`class Arch(enum.Enum)`): a member is one of a fixed set of singletons,
        so a cache keyed by one holds at most that many entries and never a tensor's identity."""
        return frozenset(stmt.name for stmt in self.body if isinstance(stmt, ast.ClassDef) and stmt.bases
                         and all(self._resolve(base) in _ENUM_BASES for base in stmt.bases))

    def _calls_by_name(self) -> dict[str, list[tuple[ast.Call, FunctionNode | None]] | None]:
        """Calls of a plain name anywhere in the module, with the function they are made in (None: module level).
        None for a name that is also used otherwise (passed to map(), stored, returned): its calls are not all
        visible, so what it is called with is unknown."""
        cached = getattr(self, "_calls_by_name_cache", None)
        if cached is not None:
            return cached
        calls: dict[str, list[tuple[ast.Call, FunctionNode | None]]] = {}
        call_targets: set[int] = set()
        other_uses: set[str] = set()
        # what runs on import (a main guard's body may not: python_modules.statements_that_run)
        stack: list[tuple[ast.AST, FunctionNode | None]] = [
            (stmt, stmt if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) else None) for stmt in self.body]
        while stack:
            current, function = stack.pop()
            for child in ast.iter_child_nodes(current):
                if isinstance(child, ast.Call) and isinstance(child.func, ast.Name):
                    calls.setdefault(child.func.id, []).append((child, function))
                    call_targets.add(id(child.func))
                elif (isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load)
                      and id(child) not in call_targets):
                    other_uses.add(child.id)
                inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
                stack.append((child, inner))
        result: dict[str, list[tuple[ast.Call, FunctionNode | None]] | None] = dict(calls)
        result.update(dict.fromkeys(other_uses))
        self._calls_by_name_cache = result
        return result

    # ---- module globals rebound by a function

    def _check_global_state(self, frame: _FunctionFrame) -> None:
        facts = self._facts(frame)
        assigned_globals = facts.declared_global & facts.local_names
        if not assigned_globals:
            return
        # A global rebound to a value that derives neither from the arguments nor from the global itself
        # (`_ext = load_inline(...)`, `_ready = True`) carries nothing from one call to the next.
        tainted = self._tainted_names(frame.node, facts, through_metadata=False,
                                      also=frozenset(facts.declared_global))
        carried = sorted({n for names, value, augmented in facts.bindings for n in names
                          if n in assigned_globals
                          and (augmented or value is None or not self._is_clean(value, tainted, False))})
        # (an augmented assignment `_calls += 1` always carries the global's own earlier value)
        if carried:
            self._hit("global_state", facts.first_global_statement or frame.node,
                      f"`{frame.node.name}()` rebinds module state {carried} via global/nonlocal")



# Calls that put something into a container (a cache filled before the launch: _launched_by_its_body)
_FILLS = frozenset({"setdefault", "update", "__setitem__", "append", "add", "insert", "extend"})
# What makes a TMA descriptor (`_holds_descriptors_only`): the host's class, its constructor, the kernel language's
_DESCRIPTORS = ("triton.tools.tensor_descriptor.TensorDescriptor", "triton.language.make_tensor_descriptor",
                "triton.language.core.make_tensor_descriptor")
_ENUM_BASES = frozenset({"enum.Enum", "enum.IntEnum", "enum.StrEnum", "enum.Flag", "enum.IntFlag"})


def holds_descriptors_only(tree: ast.AST, container: ast.AST, resolve: Callable[[ast.AST], str | None],
                           names: dict[str, list[ast.AST]]) -> bool:
    """Every value the module puts into ``container`` is a TMA descriptor made there (``TensorDescriptor(t, ...)``,
    ``TensorDescriptor.from_tensor``, ``tl.make_tensor_descriptor``): a view of a tensor's memory, which must be
    keyed by its address (red team round 10: an honest descriptor cache keyed by `data_ptr()` was an error). A
    descriptor of an answer kept aside replays as any cache would: the run-time recheck is for that. ``names``: what
    each name of the module is bound to (the scanner's ``assignments``), for a value stored by name."""
    target = ast.dump(container)
    values: list[ast.AST | None] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            values += [node.value for t in targets if isinstance(t, ast.Subscript) and ast.dump(t.value) == target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _FILLS
              and ast.dump(node.func.value) == target):
            values += node.args[1:] if node.func.attr == "setdefault" else [*node.args, None]
    def descriptor(value: ast.AST | None, depth: int = 0) -> bool:
        if isinstance(value, ast.Call) and (resolve(value.func) or "").startswith(_DESCRIPTORS):
            return True
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get":
            return ast.dump(value.func.value) == target  # read back from the cache itself
        if isinstance(value, ast.Subscript) or (isinstance(value, ast.Constant) and value.value is None):
            return isinstance(value, ast.Constant) or ast.dump(value.value) == target
        return (isinstance(value, ast.Name) and depth < 2 and bool(names.get(value.id))
                and all(descriptor(v, depth + 1) for v in names[value.id]))

    return bool(values) and all(descriptor(v) for v in values)


def _enum_annotation(annotation: ast.AST | None, enums: frozenset[str]) -> bool:
    """`arch: Arch` or `arch: "Arch"`, Arch one of the module's own Enum classes (trusted as annotations are)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip() in enums
    return isinstance(annotation, ast.Name) and annotation.id in enums


def _scalar_annotation(annotation: ast.AST | None) -> bool:
    """int, float, bool, str, torch.dtype, Optional[int], tuple[int, ...], `int | None` ..."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant):
        return annotation.value is None or annotation.value is Ellipsis or isinstance(annotation.value, str) and (
            annotation.value.split("[")[0].strip() in _SCALAR_ANNOTATIONS)
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        return _scalar_annotation(annotation.left) and _scalar_annotation(annotation.right)
    if isinstance(annotation, ast.Subscript):
        outer = _chain_parts(annotation.value)
        if outer is not None and outer[-1] == "Literal":
            return True
        inner = annotation.slice
        items = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        return _scalar_annotation(annotation.value) and all(_scalar_annotation(i) for i in items)
    parts = _chain_parts(annotation)
    return parts is not None and ".".join(parts) in _SCALAR_ANNOTATIONS
