"""The torch module of a device looked up by its name, for the Python scanner.

FLA's utils module (vendored into GDN solutions) asks Triton's driver which backend it runs on ("cuda", "xpu",
"cpu"...) and binds `device_torch_lib = getattr(torch, device)`, then uses it only for device handling:
`device_torch_lib.device(index)` as a context, `.current_device()`, `.device_count()`. A getattr on torch with a
computed name is dynamic_code everywhere else, because the name could be "ops" or any compute namespace. It is
not here when the gate can prove that what the lookup returned is used for nothing but device attributes:

- the lookup is `getattr(torch, <computed>)` (two arguments) assigned on its own to a plain name, at module level
  or in a function (never a class body: `C.lib` would be reachable by attribute);
- every other appearance of that name in the module, in any scope, is `name.<attr>` read with `attr` on
  DEVICE_ATTRS (or `name.amp.custom_fwd`/`custom_bwd`) and nothing read from it in turn; never the name alone
  (passed, returned, stored, aliased, called, put in a container, looked up further by a computed name), never
  bound by anything else (a parameter, an import, a loop, `with`, `except`, a def), never named in a string of the
  module nor reached as an attribute (`utils.device_torch_lib` through the module itself), and used at least once;
- no other file of the solution names it, and nothing in the solution can fetch a module's names unseen: a
  getattr with a computed name other than such lookups, `__dict__`, `__getattribute__` (confirm_device_libraries).

Each `name.<attr>` is then judged as `torch.cuda.<attr>` (python.py's `_resolve_name`): the contest's GPUs are
CUDA, and the gate's rules for torch.cuda apply unchanged (`name.Stream()` is stream_event_graph, as
`torch.cuda.Stream()` is; `name.synchronize()` is judged as `torch.cuda.synchronize()`). Whatever module the
computed name really picks, the attributes allowed are queries, contexts, streams and events (judged as CUDA's)
or the autocast decorators: nothing on the list computes or launches a kernel, on torch.cuda or elsewhere.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any

from .python_names import _str_const

# What a device module offers for device handling. Not here, so still dynamic_code through a computed lookup:
# graphs (CUDAGraph, graph, make_graphed_callables), set_stream, the random generators, memory/caching-allocator
# internals, comm (collectives: compute), jiterator (kernels from strings), _sleep (a kernel), nvtx, profiler.
DEVICE_ATTRS = frozenset({
    "device", "device_of", "current_device", "set_device", "device_count", "is_available", "is_initialized",
    "synchronize", "Stream", "Event", "current_stream", "default_stream", "stream", "get_device_properties",
    "get_device_capability", "get_device_name", "empty_cache", "mem_get_info",
})
# `device_torch_lib.amp.custom_fwd` (FLA on torch before 2.4): autocast decorators, which launch nothing
_AMP_ATTRS = frozenset({"custom_fwd", "custom_bwd"})
# What the use is judged as: the contest's devices are CUDA devices
JUDGED_AS = "torch.cuda"

# Queries of Triton's active driver (FLA's `get_available_device`, `get_multiprocessor_count`): which backend, which
# device, its properties. They raise where there is no GPU driver, and FLA catches that broadly to fall back to "cpu"
# or a default count; with nothing but these in the `try`, no kernel's failure can hide behind the `except`.
_DRIVER_QUERIES = frozenset(f"triton.runtime.driver.active.{q}" for q in (
    "get_current_target", "get_current_device", "get_device_capability", "get_active_torch_device",
    "utils.get_device_properties"))

# fields of AST nodes that bind a name given as a string (parameters, defs, imports, except/match captures)
_BINDING_FIELDS = ("name", "asname", "arg", "rest")
# a module's namespace reached without naming what is read in it
_REFLECTION_RE = re.compile(r"__dict__|__getattribute__")


def _computed_torch_lookup(node: ast.AST, resolve: Callable[[ast.AST], str | None]) -> bool:
    """`getattr(torch, <not a literal>)`, two positional arguments and nothing else."""
    return (isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords
            and not any(isinstance(a, ast.Starred) for a in node.args)
            and resolve(node.func) == "builtins.getattr" and resolve(node.args[0]) == "torch"
            and _str_const(node.args[1]) is None)


def _computed_lookups(tree: ast.Module, resolve: Callable[[ast.AST], str | None]) -> list[ast.Call]:
    """getattr calls whose name is not a literal, or not shown at all (`getattr(*pair)`)."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and resolve(n.func) == "builtins.getattr" and (
        any(isinstance(a, ast.Starred) for a in n.args) or len(n.args) > 1 and _str_const(n.args[1]) is None)]


def device_libraries(tree: ast.Module, source: str, resolve: Callable[[ast.AST], str | None],
                     proven: set[int] = frozenset()) -> tuple[dict[str, set[int]], int]:
    """(name proven to hold a device module -> ids of its lookups, how many other computed getattr calls the module
    makes), on this module alone; confirm_device_libraries adds what the other files say. ``proven``: getattr calls
    another analysis proved to read only known names (python_self_aliases), not counted."""
    if "getattr" not in source:  # every spelling of getattr (an alias `g = getattr`, __getattribute__) names it
        return {}, 0
    lookups = [c for c in _computed_lookups(tree, resolve) if id(c) not in proven]
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    candidates: dict[str, set[int]] = {}
    for call in lookups:
        bind = parents.get(id(call))
        targets = bind.targets if isinstance(bind, ast.Assign) else [bind.target] if isinstance(
            bind, ast.AnnAssign) else []
        if (_computed_torch_lookup(call, resolve) and len(targets) == 1 and bind.value is call
                and isinstance(targets[0], ast.Name) and not isinstance(parents.get(id(bind)), ast.ClassDef)):
            candidates.setdefault(targets[0].id, set()).add(id(call))
    names = {name: ids for name, ids in candidates.items() if _only_device_uses(tree, name, parents, ids)}
    vetted = set().union(*names.values())
    return names, len([c for c in lookups if id(c) not in vetted])


def _only_device_uses(tree: ast.Module, name: str, parents: dict[int, ast.AST], bound_by: set[int]) -> bool:
    """Every appearance of `name` in the module is one of its vetted bindings or a read of a device attribute, and
    there is such a read (a lookup kept unused stays what it is: a module fetched by a name the gate cannot read)."""
    used = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name:
            parent = parents.get(id(node))
            if isinstance(node.ctx, ast.Store):
                value = getattr(parent, "value", None)
                if not (isinstance(parent, (ast.Assign, ast.AnnAssign)) and id(value) in bound_by):
                    return False  # `for name in ...`, `(name := ...)`, `name, x = ...`, `name += ...`
            elif isinstance(node.ctx, ast.Del) or not _device_attribute(node, parent, parents):
                return False
            else:
                used = True
        elif (isinstance(node, ast.Attribute) and node.attr == name
              or isinstance(node, ast.MatchClass) and name in node.kwd_attrs):
            return False  # `utils.device_torch_lib` or `case object(device_torch_lib=x)` through the module itself
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            continue  # a function rebinding the module's name still binds it only by the vetted assignments
        elif any(getattr(node, f, None) == name for f in _BINDING_FIELDS):
            return False
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and name in node.value:
            return False  # `globals()["device_torch_lib"]`, `__all__ = ["device_torch_lib"]`
    return used


def _device_attribute(node: ast.Name, parent: ast.AST | None, parents: dict[int, ast.AST]) -> bool:
    """`name.<device attribute>` read, and nothing read from that attribute in turn (`name.device.x`: whatever module
    the name really holds, only its own device attributes are vouched for), but `name.amp.custom_fwd`."""
    if not (isinstance(parent, ast.Attribute) and parent.value is node and isinstance(parent.ctx, ast.Load)):
        return False
    outer = parents.get(id(parent))
    if parent.attr == "amp":
        return (isinstance(outer, ast.Attribute) and outer.attr in _AMP_ATTRS and isinstance(outer.ctx, ast.Load)
                and not isinstance(parents.get(id(outer)), ast.Attribute))
    return parent.attr in DEVICE_ATTRS and not isinstance(outer, ast.Attribute)


def confirm_device_libraries(scanners: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """Withdraw every exemption that another file could undo: a file that names the module's device name (it could
    import it and use it freely), or anything in the solution that fetches names unseen (a getattr with a computed
    name that is not one of the vetted lookups, `__dict__`, `__getattribute__`: `getattr(utils, "device_" + x)`).
    `sources` are the files that are code (Python, and C++ that could name it to Python's C API); prose is not."""
    holders = {path: s for path, s in scanners.items() if s.device_libs}
    if not holders:
        return
    unseen = (any(s.computed_lookups for s in scanners.values())
              or any(_REFLECTION_RE.search(text) for text in sources.values()))
    for path, scanner in holders.items():
        for name in list(scanner.device_libs):
            word = re.compile(rf"\b{re.escape(name)}\b")
            if unseen or any(word.search(text) for other, text in sources.items() if other != path):
                del scanner.device_libs[name]


def driver_queries_only(body: list[ast.stmt], resolve: Callable[[ast.AST], str | None]) -> bool:
    """A `try` body whose every call is a query of Triton's driver (and that makes one): its broad `except` falls
    back from a missing GPU driver, not from a failing kernel (the silent_fallback rule's concern)."""
    calls = [n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Call)]
    return bool(calls) and all(resolve(c.func) in _DRIVER_QUERIES for c in calls)
