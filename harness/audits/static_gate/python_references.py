"""References to resolved names, for the Python scanner: imports, name and attribute loads, and stores into an
imported module (an assigned or deleted attribute, a `__dict__`/`vars()` item, setattr/delattr with a computed
name). Every use of a name ends in ``_check_reference`` (banned tables, then torch compute judged by use, numpy's
float math and linear algebra as well, and `open` handed on as a value) or ``_check_store`` (monkeypatch,
timer_tampering); imports are checked against the banned tables only. A Triton kernel's reads of module globals and
the `.fn` of a jit function are judged by python_kernels from here.

A mixin of ``_PythonScanner`` (harness/audits/static_gate/python.py), kept apart so the scanner's traversal,
pre-pass and alias resolution read as one piece; it reads the scanner's alias resolution (``aliases``,
``_resolve``, ``_resolve_parts``, ``_is_own``, ``_from_base``, ``_join``), its reporting (``_hit``) and the cache
checks of python_state (``_check_cache_access``). python_calls reports through ``_check_reference``,
``_check_store`` and ``_check_dynamic_store`` too.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .common import _longest_prefix
from .python_calls import _own_library
from .python_fields import own_field_reads
from .python_modules import _absolute, canonical
from .python_banned import _PY_BANNED, REDISPATCH_ATTRS
from .python_names import (
    _COMPUTE_ROOTS,
    _FRAME_ATTRS,
    _HOST_ARCH,
    _CUDA_STREAM_HANDLES,
    _IMPORTED_BY_USE,
    _PACKAGE_NOT_FOUND,
    _TORCH_SETTINGS,
    _MATMUL_OPERATORS,
    _NUMPY_COMPUTE,
    _OPEN_FUNCTIONS,
    _SIGNATURE_NAMES,
    _SUPPORTED_BUILD_NAMES,
    _TENSOR_COMPUTE_METHODS,
    _TIMER_ANCESTORS,
    _TIMER_NAMESPACES,
    _WATCHED_BUILTINS,
    _chain_parts,
    _is_torch_constant_or_helper,
    _str_const,
)

# threading's locks: they start nothing (the lock of a lazily built extension); the rest of threading is concurrency
_LOCKS = frozenset({"threading.Lock", "threading.RLock"})
_NUMPY_TABLE = dict.fromkeys(_NUMPY_COMPUTE, True)  # for _longest_prefix: `numpy.linalg.norm` is numpy.linalg's

if TYPE_CHECKING:
    from .policy import _CompiledPolicy


class _ReferenceChecks:
    """The checks of loaded, imported and stored names (see the module docstring)."""

    aliases: dict[str, str]
    rebound_builtins: set[str]
    called: set[int]
    handed_over: set[int]
    bound_values: set[int]
    class_attributes: set[int]
    policy: _CompiledPolicy
    tree: ast.Module

    # ---- values kept where no alias of a name records them, handed over too: a default (`def f(q, mm=torch.matmul)`),
    # `(mm := torch.matmul)`, either side of `a if c else b` and of `a or b`, a lambda's result, a yielded value, a
    # match's subject, an attribute or item stored (`self.mm = torch.matmul`, `ops["mm"] = ...`), a class attribute.

    def visit_arguments(self, node: ast.arguments) -> None:
        self._hand_over(node, [*node.defaults, *node.kw_defaults])

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._hand_over(node, [node.value])

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._hand_over(node, [node.body, node.orelse])

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self._hand_over(node, node.values)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._hand_over(node, [node.body])

    def visit_Yield(self, node: ast.Yield | ast.YieldFrom) -> None:
        self._hand_over(node, [node.value])

    visit_YieldFrom = visit_Yield

    def visit_Match(self, node: ast.Match) -> None:
        self._hand_over(node, [node.subject])

    def visit_Assign(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        stored = any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in targets)
        self._hand_over(node, [node.value] if stored or id(node) in self.class_attributes else [])

    visit_AnnAssign = visit_Assign

    # ---- uses and stores of a resolved name

    def _check_reference(self, resolved: str, node: ast.AST, how: str = "uses") -> None:
        """A load of a resolved name (a use, a call target, an import, a base class...)."""
        if (self._is_own(resolved) or self.policy.python_names(resolved) or resolved in _SUPPORTED_BUILD_NAMES
                or id(node) in self.judged or resolved == _PACKAGE_NOT_FOUND or resolved in _CUDA_STREAM_HANDLES
                or resolved in _LOCKS):
            return
        if ".__dict__" in resolved:
            # `json.__dict__` in hand (`d = j.__dict__`, `torch.__dict__.update(...)`): an imported module's or
            # class's namespace, whose every name can then be read or replaced by a computed key
            # (`d["_" * 2 + "builtins" + "_" * 2]`) out of the gate's sight; the solution's own objects are its own
            owner = resolved.split(".__dict__")[0]
            self._hit("monkeypatch", node, f"{how} the namespace of `{owner}` (`{resolved}`): any of its names can be "
                                           "read or replaced by a computed key")
            return
        if resolved.startswith("torch.") and _PY_KERNEL_ATTRS & set(resolved.split(".")[1:]):
            # a Python kernel for one of PyTorch's operators (`torch.ops.aten.equal.default.py_impl(key)`): what the
            # worker's own torch calls run under the Python dispatcher
            self._hit("monkeypatch", node, f"{how} `{resolved}`: a Python kernel for a PyTorch operator")
            return
        if resolved in _HOST_ARCH or (resolved.partition(".")[0] == "inspect"
                                      and ".".join(resolved.split(".")[:2]) in _SIGNATURE_NAMES):
            return  # the CPU's architecture; a callable's parameters (`eval_str=` is judged at the call: python_calls)
        if resolved in _OPEN_FUNCTIONS and id(node) in self.handed_over and id(node) not in self.called:
            # `functools.partial(open, mode="wb")(path)`, `[open][0](14, "wb")`: opened where no call shows the mode
            self._hit("file_cache", node, f"hands `{resolved}` on as a value: its mode is not shown where it is called")
        if resolved in _MATMUL_OPERATORS:  # `@` by name, called or handed over (functools.reduce(operator.matmul..))
            if not self._in_triton_kernel:
                self._hit("torch_compute", node, f"{how} `{resolved}` (the `@` operator) outside a Triton kernel")
            return
        entry = _longest_prefix(_PY_BANNED, resolved)
        real = (_defined_as(resolved) if entry is None and not _is_torch_constant_or_helper(resolved)
                and not self.policy.torch_calls(resolved) else None)
        if real is not None and (entry := _longest_prefix(_PY_BANNED, real)) is not None:
            resolved = f"{resolved}` (which is `{real}`"
        if entry is not None:
            self._hit(entry[1], node, f"{how} `{resolved}`")
            return
        root, _, rest = resolved.partition(".")
        if _longest_prefix(_NUMPY_TABLE, resolved) and (id(node) in self.called or id(node) in self.handed_over):
            verb = "calls" if id(node) in self.called and how == "uses" else how
            self._hit("torch_compute", node, f"{verb} `{resolved}` (the {root} library's compute: float math or "
                                             "linear algebra on arrays, on the host)")
        if not rest or root not in _COMPUTE_ROOTS or self.policy.torch_calls(resolved):
            return
        called = id(node) in self.called
        if root == "torch":
            if _is_torch_constant_or_helper(resolved):
                return
            if not called and (id(node) not in self.handed_over or resolved.rpartition(".")[2][:1].isupper()):
                return  # read, not called nor handed over as a callable: an attribute, a type
        kind = "torch" if root == "torch" else f"the {root} library"
        verb = "calls" if called and how == "uses" else how
        self._hit("torch_compute", node,
                  f"{verb} `{resolved}` ({kind} compute, not one of the constant/allocation/view/metadata/"
                  f"device-query helpers nor on the policy's torch_calls allow-list)")

    def _check_store(self, resolved: str, node: ast.AST, how: str) -> None:
        """An assignment/deletion of an attribute of an imported module or class."""
        if self._is_own(resolved) or self.policy.python_names(resolved) or (resolved in _TORCH_SETTINGS
                                                                             and how == "assigns"):
            return  # a setting's new value (deleting one breaks torch)
        if any(resolved == ns or resolved.startswith(ns + ".") for ns in _TIMER_NAMESPACES):
            self._hit("timer_tampering", node, f"{how} `{resolved}`")
        else:
            self._hit("monkeypatch", node, f"{how} `{resolved}`, an attribute of an imported module")

    def _check_dynamic_store(self, target: str, node: ast.AST, how: str) -> None:
        """setattr/delattr with a computed attribute name on an imported module."""
        if self._is_own(target) or self.policy.python_names(target):
            return
        if target in _TIMER_ANCESTORS or any(target == ns or target.startswith(ns + ".") for ns in _TIMER_NAMESPACES):
            self._hit("timer_tampering", node,
                      f"{how} on `{target}` with a computed attribute name (it can replace timing functions)")
        else:
            self._hit("monkeypatch", node, f"{how} on `{target}` with a computed attribute name")

    # ---- imports

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_import(a.name, a)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._from_base(node)
        for a in node.names:
            if a.name == "*":
                self._check_import(base, a, star=True)
                if base.split(".")[0] in _COMPUTE_ROOTS:
                    self._hit("torch_compute", a,
                              f"imports * from `{base}`, which hides which compute functions are used")
            else:
                self._check_import(self._join(base, a.name), a)

    def _check_import(self, resolved: str, node: ast.AST, star: bool = False) -> None:
        # Imports are checked against the banned tables only; torch compute is judged where it is used, and so are
        # glob, tempfile and os.getenv (_IMPORTED_BY_USE: honest uses exist, every other use is a finding).
        resolved = canonical(resolved, self.package, self.own)
        if (self._is_own(resolved) or self.policy.python_names(resolved) or resolved in _SUPPORTED_BUILD_NAMES
                or (not star and (resolved in _IMPORTED_BY_USE or resolved == "os.getenv" or resolved in _LOCKS))):
            return
        if resolved == "threading" and not star and isinstance(node, ast.alias) and self._only_locks(node):
            return
        if resolved == "torch.library.Library" and isinstance(node, ast.alias) and self._only_own_libraries(node):
            return
        if resolved.split(".")[0] == "builtins":  # the module; implicit builtins resolve to builtins.* too
            self._hit("harness_internals", node, f"imports `{resolved}`")
            return
        entry = _longest_prefix(_PY_BANNED, resolved)
        if entry is not None:
            self._hit(entry[1], node, f"imports `{resolved}`")

    def _only_locks(self, alias: ast.alias) -> bool:
        """`import threading` whose every use is `threading.Lock`/`RLock` (a lazy build guarded by a lock): a lock
        starts no work and, in the worker's one thread, never waits; any other use, or none, leaves the import a
        finding."""
        bound = alias.asname or alias.name
        if bound in self.assignments:
            return False
        loads = [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == bound]
        locks = [n for n in ast.walk(self.tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                 and n.value.id == bound and n.attr in ("Lock", "RLock")]
        return bool(loads) and len(loads) == len(locks) and all(isinstance(n.ctx, ast.Load) for n in loads)

    def _only_own_libraries(self, alias: ast.alias) -> bool:
        """`from torch.library import Library` whose every use makes a library of the solution's own namespace
        (python_calls._own_library); any other use, or none, leaves the import a finding."""
        bound = alias.asname or alias.name
        if bound in self.assignments:
            return False
        loads = [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == bound]
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == bound and _own_library(n)]
        return bool(loads) and len(loads) == len(calls)

    # ---- names and attributes

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        name = node.id
        self._check_kernel_global(node)  # python_kernels
        if name in _FRAME_ATTRS:  # `__builtins__`
            self._hit("harness_internals", node, f"reads `{name}`")
            return
        resolved = self.aliases.get(name)
        if resolved is not None:
            resolved = canonical(resolved, self.package, self.own)
            self._check_reference(resolved, node)
            self._check_module_handed_on(resolved, node)
            self._check_alternative_bindings([name], node)
        elif name in _WATCHED_BUILTINS and name not in self.rebound_builtins:
            rule = _PY_BANNED.get(f"builtins.{name}")  # exec, eval, compile, __import__, globals, ...
            if rule is not None:
                self._hit(rule, node, f"uses builtin `{name}`")
            elif name in ("getattr", "setattr", "delattr") and id(node) in self.handed_over:
                # `functools.reduce(getattr, ["environ"], os)`: the lookup happens where no name shows
                self._hit("dynamic_code", node, f"hands builtin `{name}` on, to look attributes up out of sight")
            elif name == "open":
                self._check_reference("builtins.open", node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parts = _chain_parts(node)
        self._check_raw_kernel(node)  # python_kernels: `kernel.fn`
        if (node.attr == "__self__" and isinstance(node.value, ast.Name) and node.value.id in _BUILTIN_NAMES
                and node.value.id not in self.aliases and node.value.id not in self.assignments):
            self._hit("harness_internals", node, f"reaches the builtins module through `{node.value.id}.__self__`")
        if node.attr in REDISPATCH_ATTRS:
            self._hit("monkeypatch", node, f"reads `.{node.attr}` of `{ast.unparse(node.value)}`: an operator run with "
                                           "chosen dispatch keys, past the dispatch modes the worker holds")
        if not isinstance(node.ctx, ast.Load) and node.attr == "__class__":
            self._hit("tensor_subclass", node, f"assigns the class of `{ast.unparse(node.value)}`")
        hook = {"__del__": "concurrency", "__torch_function__": "tensor_subclass",
                "__torch_dispatch__": "tensor_subclass"}.get(node.attr)
        if hook is not None and not isinstance(node.ctx, ast.Load):  # `K.__del__ = f` after the class
            self._hit(hook, node, f"assigns the hook `{node.attr}` of `{ast.unparse(node.value)}`")
        if not isinstance(node.ctx, ast.Load) and self._is_class_of_value(node.value):
            # `type(q).allclose = f`, `q.__class__.allclose = f`: a tensor's class is torch.Tensor
            self._hit("monkeypatch", node,
                      f"assigns `{node.attr}` on `{ast.unparse(node.value)}`, the class of a value")
        if parts is None:  # e.g. `sys._getframe().f_back`, `x.shape[0].bit_length`
            if node.attr in _FRAME_ATTRS:
                self._hit("harness_internals", node, f"reads attribute `{node.attr}`")
            self._check_method_reference(node)
            self.generic_visit(node)
            return
        for attr in parts[1:]:
            if attr in _FRAME_ATTRS:
                self._hit("harness_internals", node, f"reads attribute `{attr}` in `{'.'.join(parts)}`")
                break
        if isinstance(node.ctx, ast.Load):
            self._check_kernel_global(node)  # a chain's root name is not visited on its own
            resolved = self._resolve_parts(parts)
            if resolved is not None:
                self._check_reference(resolved, node)
                self._check_module_handed_on(resolved, node)
                self._check_alternative_bindings(parts, node)
            else:
                self._check_method_reference(node)
            return
        # a store: the attribute of what its owner resolves to (`helpers.T = x` stays the solution's own even where
        # another module's `helpers.T` reads x: python_modules)
        owner = self._resolve_parts(parts[:-1])
        if owner is not None:
            self._check_store(f"{owner}.{parts[-1]}", node, "deletes" if isinstance(node.ctx, ast.Del) else "assigns")

    def _check_method_reference(self, node: ast.Attribute) -> None:
        """`mm = q.matmul`, `(f := type(q).softmax)`, `m=q.bmm` as a default: a tensor's compute method taken, not
        called, is called later where no method call shows; judged as the call would be."""
        if (isinstance(node.ctx, ast.Load) and node.attr in _TENSOR_COMPUTE_METHODS and id(node) not in self.called
                and (id(node) in self.handed_over or id(node) in self.bound_values)
                and not self._in_triton_kernel and not self.policy.tensor_methods(node.attr)
                and id(node) not in self._own_field_reads()):
            self._hit("torch_compute", node, f"takes tensor method `.{node.attr}` to call it elsewhere")

    def _own_field_reads(self) -> set[int]:
        """`shapes.topk`, `self.topk`: a field of an object of the module's own class (python_fields), computed once,
        when first needed."""
        reads = getattr(self, "_field_reads", None)
        if reads is None:
            def imported_class(node: ast.AST) -> bool:
                resolved = self._resolve(node)
                return resolved is not None and _absolute(resolved, self.package) in self.own.classes
            reads = self._field_reads = own_field_reads(self.tree, self._resolve, imported_class,
                                                        self.own.classes_reached)
        return reads

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._env_subscript(node)
        # `torch.cuda.__dict__["synchronize"] = f` / `vars(time)["perf_counter"] = f`
        if not isinstance(node.ctx, ast.Load):
            namespace = self._namespace_dict_owner(node.value)
            if namespace is not None:
                key = _str_const(node.slice)
                if key is not None:
                    self._check_store(f"{namespace}.{key}", node, "assigns via __dict__")
                else:
                    self._check_dynamic_store(namespace, node, "assigns via __dict__")
                self.visit(node.slice)
                return
        self._check_cache_access(node.value, node.slice, node)
        self.generic_visit(node)

    def _namespace_dict_owner(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return self._resolve(node.value)
        if isinstance(node, ast.Call) and self._resolve(node.func) == "builtins.vars" and node.args:
            return self._resolve(node.args[0])
        return None


_BUILTIN_NAMES = frozenset(dir(__import__("builtins")))
_REEXPORT_ROOTS = ("torch.", "triton.")
_PY_KERNEL_ATTRS = frozenset({"py_impl", "py_kernels", "_py_impl", "python_key_table"})


def _defined_as(resolved: str) -> str | None:
    """Where a class or function that a module of torch or Triton re-exports is defined
    (`torch._subclasses.fake_tensor.TorchFunctionMode` is `torch.overrides.TorchFunctionMode`), looked up in the
    modules the harness process has imported (nothing is imported for it: a module's import can change the trusted
    process); None where it is its own or unknown."""
    import sys

    if not resolved.startswith(_REEXPORT_ROOTS):
        return None
    module_name, _, attr = resolved.rpartition(".")
    while module_name and module_name not in sys.modules:
        module_name, _, head = module_name.rpartition(".")
        attr = f"{head}.{attr}"
    obj = sys.modules.get(module_name)
    for part in attr.split("."):  # static lookups: a module's __getattr__ (torch's lazy submodules) is never run
        spaces = [vars(k) for k in obj.__mro__] if isinstance(obj, type) else [getattr(obj, "__dict__", {})]
        obj = next((space[part] for space in spaces if part in space), None)
        if obj is None:
            return None
    home, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(home, str) or not isinstance(name, str) or "<" in name:
        return None
    real = f"{home}.{name}"
    return real if real != resolved else None
