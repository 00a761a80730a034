"""Calls, for the Python scanner: setattr/delattr/__setattr__ and getattr on imported modules, open() and its
mode (file_cache, file_read; a solution's own source file next to the module may be read; a mode in unpacked
arguments is not shown, a descriptor is the worker's channel's kind), and methods called on values that are not
imported modules (tensor compute methods outside a Triton kernel, file reads and writes through paths, dict-style
cache access).

A mixin of ``_PythonScanner`` (harness/audits/static_gate/python.py), with the paths of the solution's own folder
mixed in from python_paths; it reads the scanner's alias resolution (``_resolve``, ``_is_own``,
``_is_file_relative``), its reporting (``_hit``; ``_check_reference``, ``_check_store`` and
``_check_dynamic_store`` of python_references), the cache checks of python_state (``_check_cache_access``) and the
jit functions of python_kernels (``_check_kernel_call``, ``_check_raw_kernel``).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from .common import _TORCH_NAMESPACES, _longest_prefix
from .python_banned import REDISPATCH_ATTRS
from .python_names import (
    _CACHE_ACCESS_METHODS,
    _FILE_MODE_RE,
    _FILE_READ_METHODS,
    _FILE_WRITE_METHODS,
    _FRAME_ATTRS,
    _GLOB_FUNCTIONS,
    _INTERNAL_STRINGS,
    _NAMED_LOOKUPS,
    _NUMPY_COMPUTE,
    _NUMPY_REDUCTIONS,
    _OPEN_FUNCTIONS,
    _PACKAGE_DATA_READS,
    _PACKAGE_QUERIES,
    _TENSOR_BASES,
    _TENSOR_COMPUTE_METHODS,
    _str_const,
)
from .python_paths import _LISTINGS, _OWN_FILE_SUFFIXES, _OwnPathChecks, _path_wrapper

if TYPE_CHECKING:
    from .policy import _CompiledPolicy

# Calls whose positional arguments word a message (print, warnings, logging): their literals are prose.
_MESSAGE_FUNCTIONS = frozenset({"builtins.print", "warnings.warn", "logging.debug", "logging.info", "logging.warning",
                                "logging.warn", "logging.error", "logging.exception", "logging.critical",
                                "logging.log"})
_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})
# Attribute names the gate watches (frames, interpreter internals) that a computed name may be assembled to.
_WATCHED_ATTRS = _FRAME_ATTRS | _INTERNAL_STRINGS

# Existence checks of one path (a file the solution ships, next to the module, is looked up: python_calls)
_EXISTS_CHECKS = frozenset({"os.path.exists", "os.path.isfile"})

def _current_stream(node: ast.Call, resolve) -> bool:
    """`torch.cuda.stream(torch.cuda.current_stream())` (or the default stream, the current one wherever the harness
    calls the candidate): makes the stream the work runs on anyway the current one, a no-op."""
    if len(node.args) != 1 or node.keywords or not isinstance(node.args[0], ast.Call):
        return False
    inner = node.args[0]
    return (resolve(inner.func) in ("torch.cuda.current_stream", "torch.cuda.default_stream")
            and len(inner.args) + len(inner.keywords) < 2 and not any(isinstance(a, ast.Starred) for a in inner.args)
            and all(k.arg == "device" for k in inner.keywords))

_NUMPY_TABLE = dict.fromkeys(_NUMPY_COMPUTE, True)  # for _longest_prefix: `numpy.linalg.norm` is numpy.linalg's
_NUMERIC_CONSTANTS = frozenset({"math.e", "math.pi", "math.tau", "math.inf", "numpy.e", "numpy.pi", "numpy.inf",
                                "numpy.euler_gamma"})


def _own_library(node: ast.Call) -> bool:
    """`torch.library.Library("mylib", "DEF")` (or "FRAGMENT"): ops defined in a namespace that is not PyTorch's.
    "IMPL", or any of PyTorch's namespaces (aten, prims...), can replace the ops the harness computes with."""
    given = dict(zip(("ns", "kind"), node.args))
    given.update({k.arg: k.value for k in node.keywords if k.arg in ("ns", "kind")})
    if len(node.args) > 2 or len(given) != 2 or any(k.arg not in ("ns", "kind") for k in node.keywords):
        return False
    ns, kind = _str_const(given["ns"]), _str_const(given["kind"])
    return (ns is not None and re.fullmatch(r"[A-Za-z_]\w*", ns) is not None and ns not in _TORCH_NAMESPACES
            and kind in ("DEF", "FRAGMENT"))


class _CallChecks(_OwnPathChecks):
    """visit_Call and the checks of special calls, open() modes and method calls (see the module docstring)."""

    called: set[int]
    handed_over: set[int]
    policy: _CompiledPolicy
    device_libs: dict[str, set[int]]

    def _built_here(self, expr: ast.AST, depth: int = 0) -> bool:
        """`expr` is what tvm_ffi.cpp.build returned (the call itself, or a name bound only to such calls)."""
        if isinstance(expr, ast.Call) and _path_wrapper(expr, self._resolve) and depth < 4:
            return self._built_here(expr.args[0], depth + 1)  # str(lib_path), os.fspath(...), Path(...)
        if isinstance(expr, ast.Call):
            return self._resolve(expr.func) == "tvm_ffi.cpp.build"
        if isinstance(expr, ast.Name) and depth < 4 and expr.id not in self.opaque:
            values = self.assignments.get(expr.id, ())
            return bool(values) and all(self._built_here(v, depth + 1) for v in values)
        return False

    def _path_membership(self, left: ast.AST, right: ast.AST) -> None:
        """`HERE not in sys.path` before putting the solution's folder there."""
        if self._resolve(right) == "sys.path" and self._own_folder(left):
            self.judged.add(id(right))

    # ---- calls

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.called.add(id(func))
        for arg in node.args:
            self.handed_over.add(id(arg.value if isinstance(arg, ast.Starred) else arg))
        for keyword in node.keywords:
            self.handed_over.add(id(keyword.value))
        resolved = self._resolve(func)
        self._check_kernel_call(node)  # python_kernels: a jit function called on the host
        if isinstance(func, ast.Attribute) and func.attr in ("__getattribute__", "__getattr__") and node.args:
            # getattr by another spelling: `m.__getattribute__("write")`, `object.__getattribute__(m, "write")`,
            # `type(m).__getattribute__(m, "write")`
            unbound = (self._resolve(func.value) in ("builtins.object", "builtins.type")
                       or self._is_class_of_value(func.value))
            self._check_getattr(list(node.args) if unbound else [func.value, *node.args], node)
        self._check_caller_probe(resolved, node)
        if resolved is not None:
            self._check_special_call(resolved, node)
            self._env_call(resolved, node)
            if resolved in _MESSAGE_FUNCTIONS:
                self._mark_messages(node.args)
        elif isinstance(func, ast.Attribute):
            self._check_method_call(func, node)
        self.generic_visit(node)

    def _check_special_call(self, resolved: str, node: ast.Call) -> None:
        args = node.args
        owner, _, method = resolved.rpartition(".")
        if method in ("__setattr__", "__delattr__") and owner and owner not in ("builtins.object", "builtins.type"):
            # torch.cuda.__setattr__("synchronize", f) is setattr(torch.cuda, "synchronize", f)
            name = _str_const(args[0]) if args else None
            if name is not None:
                self._check_store(f"{owner}.{name}", node, f"{method}() replaces")
            else:
                self._check_dynamic_store(owner, node, f"{method}()")
        elif resolved in _OPEN_FUNCTIONS:
            self._check_open_mode(resolved, node, args[1] if len(args) > 1 else None)
        elif resolved == "logging.basicConfig" and any(k.arg in ("filename", "handlers", None) for k in node.keywords):
            # a log written to a file (red team round 12: past the gate with no finding); to stderr it is fine
            self._hit("file_cache", node, "`logging.basicConfig()` with a file or handlers of its own")
        elif resolved in _GLOB_FUNCTIONS or resolved in _LISTINGS:
            self._check_listing(resolved, node)  # python_paths
        elif resolved in ("sys.path.insert", "sys.path.append") and args and self._own_folder(args[-1]):
            self.judged.add(id(node.func))  # the solution's folder, for absolute imports of its own modules
        elif resolved in _EXISTS_CHECKS and len(args) == 1 and not node.keywords and self._in_own_folder(args[0]):
            self.judged.add(id(node.func))  # vLLM's tuned-config lookup: a file the solution may ship, asked after
        elif resolved == "torch.library.Library" and _own_library(node):
            self.judged.add(id(node.func))  # a namespace of the solution's own, where it defines its ops
        elif resolved == "tvm_ffi.load_module" and len(args) == 1 and self._built_here(args[0]):
            self.judged.add(id(node.func))  # the module tvm_ffi.cpp.build just built from the solution's sources
        elif resolved in _PACKAGE_DATA_READS and self._own_package_data(node):
            self.judged.add(id(node.func))
            resource = _str_const(node.args[1]) if len(node.args) > 1 else None
            if resource is not None and not resource.endswith(_OWN_FILE_SUFFIXES):
                self._hit("file_read", node, f"`{resolved}()` reads the solution's package data `{resource}`")
        elif resolved in _PACKAGE_QUERIES:
            name = _str_const(args[0]) if len(args) == 1 and not node.keywords else None
            if name is not None and re.fullmatch(r"[A-Za-z_][\w-]*", name):  # a top-level name: no parent imported
                self.judged.add(id(node.func))
        elif resolved == "torch.cuda.stream" and _current_stream(node, self._resolve):
            self.judged.add(id(node.func))  # the current stream made current: a no-op
        elif resolved in _NAMED_LOOKUPS:
            self._check_named_lookup(resolved, node)
        elif _longest_prefix(_NUMPY_TABLE, resolved) and args and all(self._is_scalar(a) for a in args):
            self.judged.add(id(node.func))  # `1.0 / np.log(2)`: a constant, no array
        elif resolved in _NUMPY_REDUCTIONS and (len(args) > 1 or any(k.arg in ("axis", "keepdims")
                                                                     for k in node.keywords)):
            self._hit("torch_compute", node, f"calls `{resolved}` along an axis (numpy compute on an array)")
        elif resolved in ("inspect.signature", "inspect.Signature.from_callable") and any(
                k.arg in (None, "eval_str") for k in node.keywords):
            # string annotations evaluated: `def f(x: "__import__('os')...")` runs code no scan of the call sees
            self._hit("dynamic_code", node, f"`{resolved}()` may evaluate annotations (`eval_str=`)")
        elif resolved in ("builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
                          "builtins.object.__delattr__", "builtins.type.__setattr__",
                          "builtins.type.__delattr__") and args:
            how = "setattr" if "setattr" in resolved else "delattr"
            target = self._resolve(args[0])
            if any(isinstance(a, ast.Starred) for a in args):  # `setattr(*(torch, "matmul", f))`: neither is shown
                self._hit("monkeypatch", node, f"{how}() with unpacked arguments: the object and name are not shown")
            if len(args) > 1 and _str_const(args[1]) == "__class__":
                self._hit("tensor_subclass", node, f"{how}() replaces the class of `{ast.unparse(args[0])}`")
            if self._is_class_of_value(args[0]):
                self._hit("monkeypatch", node, f"{how}() on `{ast.unparse(args[0])}`, the class of a value")
            elif target is not None:
                name = _str_const(args[1]) if len(args) > 1 else None
                if name is not None:
                    self._check_store(f"{target}.{name}", node, f"{how}() replaces")
                else:
                    self._check_dynamic_store(target, node, f"{how}()")
        elif resolved == "builtins.getattr" and args:
            self._check_getattr(args, node)
        elif resolved == "builtins.type" and len(args) == 3 and isinstance(args[1], ast.Tuple) and any(
                self._resolve(b) in _TENSOR_BASES or self._is_class_of_value(b) for b in args[1].elts):
            self._hit("tensor_subclass", node, "`type()` makes a class whose bases hold a tensor class")

    def _check_caller_probe(self, resolved: str | None, node: ast.Call) -> None:
        """The caller's frame read back through logging or warnings (its file and function tell the official timer's
        calls from the checked ones), and finalizers by weak-reference callbacks. ``warnings.warn(stacklevel=N)`` alone
        is honest (it only points a printed warning at the caller): reading the warning back is what is judged."""
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        level = keywords.get("stacklevel")
        if level is not None and resolved != "warnings.warn" and not (
                isinstance(level, ast.Constant) and level.value == 1):
            self._hit("harness_internals", node, "asks for a caller's frame (`stacklevel=`)")
        if resolved == "warnings.catch_warnings" and not (
                isinstance(keywords.get("record", ast.Constant(False)), ast.Constant)
                and not keywords.get("record", ast.Constant(False)).value):
            self._hit("harness_internals", node, "records warnings, whose file and line name the caller's frame")
        action = node.args[0] if node.args else keywords.get("action")
        if (resolved == "warnings.filterwarnings" and ("module" in keywords or len(node.args) >= 4)
                and not (isinstance(action, ast.Constant) and action.value == "ignore")):
            # "ignore" shows nothing either way; "error" raises only where the caller's module matches
            self._hit("harness_internals", node, "filters warnings by the module that issued them (the caller's)")
        if resolved in ("weakref.ref", "weakref.proxy", "weakref.WeakMethod", "weakref.ReferenceType") and (
                len(node.args) > 1 or "callback" in keywords):
            self._hit("concurrency", node, f"`{resolved}()` with a callback, a finalizer that runs outside the call")

    def _check_getattr(self, args: list[ast.expr], node: ast.Call) -> None:
        """getattr(target, name): the attribute judged as if written out; a computed name on a module is dynamic."""
        if any(isinstance(a, ast.Starred) for a in args):  # `getattr(*(torch, "mat" + "mul"))`
            self._hit("dynamic_code", node, "getattr() with unpacked arguments: the object and the name are not shown")
            return
        if args:
            target = self._resolve(args[0])
            name = _str_const(args[1]) if len(args) > 1 else None
            if name is not None:
                self._check_raw_kernel(ast.Attribute(value=args[0], attr=name, ctx=ast.Load(), lineno=node.lineno,
                                                     col_offset=node.col_offset))  # getattr(kernel, "fn")
                if name in _WATCHED_ATTRS:
                    self._hit("harness_internals", node, f"reads attribute `{name}` through getattr()")
                if name in REDISPATCH_ATTRS:
                    self._hit("monkeypatch", node, f"reads `.{name}` through getattr(): an operator run with chosen "
                                                   "dispatch keys, past the dispatch modes the worker holds")
                if target is not None:
                    self._check_reference(f"{target}.{name}", node, "getattr() reaches")
                elif name in _TENSOR_COMPUTE_METHODS and not self._in_triton_kernel:
                    self._hit("torch_compute", node, f"getattr() reaches tensor method `.{name}()`")
            elif len(args) > 1:
                self._check_computed_name(args[1], node, "getattr()")
                if target is not None and not self._is_own(target) and not any(
                        id(node) in lookups for lookups in self.device_libs.values()):  # python_device_lib
                    self._hit("dynamic_code", node, f"getattr() on module `{target}` with a computed attribute name")

    def _is_scalar(self, node: ast.AST) -> bool:
        """A number written out: literals, their arithmetic, math's and numpy's constants, float()/int() of anything."""
        if isinstance(node, ast.Constant):
            return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
        if isinstance(node, ast.UnaryOp):
            return self._is_scalar(node.operand)
        if isinstance(node, ast.BinOp):
            return self._is_scalar(node.left) and self._is_scalar(node.right)
        if isinstance(node, ast.Call):
            return (isinstance(node.func, ast.Name) and node.func.id in ("float", "int") and len(node.args) <= 1
                    and node.func.id not in self.aliases and node.func.id not in self.assignments)
        return self._resolve(node) in _NUMERIC_CONSTANTS

    def _check_named_lookup(self, resolved: str, node: ast.Call) -> None:
        """operator.methodcaller("matmul") / operator.attrgetter("f_back"): the name judged like an attribute."""
        names = [_str_const(a) for a in node.args[:1 if resolved.endswith("methodcaller") else None]]
        if not names or None in names:
            self._hit("dynamic_code", node, f"`{resolved}()` with a computed attribute name")
            return
        for name in names:
            for attr in name.split("."):
                if attr in _WATCHED_ATTRS:
                    self._hit("harness_internals", node, f"`{resolved}()` reaches attribute `{attr}`")
                elif attr in _TENSOR_COMPUTE_METHODS and not self._in_triton_kernel:
                    self._hit("torch_compute", node, f"`{resolved}()` reaches tensor method `.{attr}()`")

    def _check_computed_name(self, name: ast.AST, node: ast.AST, how: str) -> None:
        """A computed attribute name assembled from pieces of a watched one (`"f_" + "locals"`)."""
        for piece in self._string_nodes(name):
            text = piece.value
            if (len(text) >= 3 or (len(text) == 2 and "_" in text)) and any(text in w for w in _WATCHED_ATTRS):
                self._hit("harness_internals", node,
                          f"{how} with a computed attribute name built from {text!r}, part of a frame or "
                          "interpreter attribute")
                return

    def _is_class_of_value(self, node: ast.AST) -> bool:
        """`type(x)` or `x.__class__`: assigning into it monkeypatches the value's class (a tensor's: torch.Tensor)."""
        return ((isinstance(node, ast.Call) and self._resolve(node.func) == "builtins.type" and len(node.args) == 1)
                or (isinstance(node, ast.Attribute) and node.attr == "__class__"))

    def _check_open_mode(self, resolved: str, node: ast.Call, mode_arg: ast.AST | None) -> None:
        for kw in node.keywords:
            if kw.arg == "mode":
                mode_arg = kw.value
        first = node.args[0] if node.args else None
        if (resolved != "Path.open" and isinstance(first, ast.Constant) and type(first.value) is int):
            # `open(14, "wb")`: a descriptor, not a path; the worker's channels to the harness are descriptors
            self._hit("harness_internals", node, f"`{resolved}()` opens file descriptor {first.value}")
        mode = "r" if mode_arg is None else _str_const(mode_arg)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            # `open(fd, **{"mode": "wb"})`: the mode may be in what is unpacked
            self._hit("file_cache", node, f"`{resolved}()` with unpacked arguments (its mode is not shown)")
        elif mode is None:
            self._hit("file_cache", node, f"`{resolved}()` with a computed mode (cannot prove it only reads)")
        elif any(c in mode for c in "wax+"):
            self._hit("file_cache", node, f"`{resolved}()` opens a file for writing (mode {mode!r})")
        elif not (node.args and self._reads_own_file(node.args[0])):
            self._hit("file_read", node, f"`{resolved}()` opens a file for reading (mode {mode!r})")

    def _check_method_call(self, func: ast.Attribute, node: ast.Call) -> None:
        """A method called on a value that is not an imported module (a local tensor, path, dict...)."""
        method = func.attr
        if method in _LOG_METHODS and self._is_logger(func.value):
            self._mark_messages(node.args)
        if method in _CACHE_ACCESS_METHODS and node.args:
            self._check_cache_access(func.value, node.args[0], node)
        elif method == "update" and node.args and isinstance(node.args[0], ast.Dict):
            for key in node.args[0].keys:
                if key is not None and self._check_cache_access(func.value, key, node):
                    break
        if self._in_triton_kernel:
            return  # inside @triton.jit, x.sum()/x.to() are Triton tensor methods compiled into the kernel
        if method in _TENSOR_COMPUTE_METHODS and not self.policy.tensor_methods(method):
            if id(func) not in self._own_field_reads():  # `stats.sum(xs)`: a method of the module's own class
                self._hit("torch_compute", node, f"calls tensor method `.{method}()`")
        elif method in _FILE_WRITE_METHODS:
            if id(func) not in self.judged and not (method in ("exists", "is_file") and not node.args
                                                     and self._in_own_folder(func.value)):
                # (`.mkdir()` of a load() build folder: judged in embedded.py)
                self._hit("file_cache", node, f"calls `.{method}()` (a file-system write or probe)")
        elif method in _FILE_READ_METHODS:
            if not self._reads_own_file(func.value):
                self._hit("file_read", node, f"calls `.{method}()`")
        elif method == "open" and isinstance(func.value, ast.Call):  # Path(...).open("w")
            self._check_open_mode("Path.open", node, node.args[0] if node.args else None)
        elif method == "open":  # path.open(mode="w") on a local: a literal file mode that writes
            mode = _str_const(node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg == "mode"), None))
            if mode is not None and _FILE_MODE_RE.fullmatch(mode) and any(c in mode for c in "wax+"):
                self._hit("file_cache", node, f"`.open()` opens a file for writing (mode {mode!r})")

    def _is_logger(self, value: ast.AST) -> bool:
        """`log` in `log.warning(...)`: `logging` itself, or a name only ever bound to logging.getLogger(...)."""
        if self._resolve(value) == "logging":
            return True
        bound = self.assignments.get(value.id, ()) if isinstance(value, ast.Name) else ()
        return bool(bound) and all(isinstance(v, ast.Call) and self._resolve(v.func) == "logging.getLogger"
                                   for v in bound)
