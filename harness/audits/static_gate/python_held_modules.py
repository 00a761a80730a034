"""Modules that other modules hold under a name of their own: `collections._sys` is `sys`, `random._os` is `os`,
`enum.bltns` is `builtins`, `argparse._os`, `pprint._sys`.

python_names._REEXPORTED_MODULES knows the attributes named like the module they hold (`torch.sys`, `os.sys`); a
private alias is named anything, and which ones exist depends on the Python version. So the attribute is looked up
in the module itself, as this interpreter (the one the worker runs) has it: statically (the module's `__dict__`, never
its `__getattr__`), in modules of the standard library (imported here for the lookup, save a few that act on import)
and in the libraries the harness has already imported (torch, Triton, numpy: never imported for a candidate). Only
modules that matter to the gate's rules are resolved (a module held under another name that is none of those, such
as `os.path` holding `posixpath`, keeps the name written). Where the module cannot be looked up (a library not
imported here), an attribute named `_sys`, `sys_`, `_os`... is judged as the module it names.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
import warnings

from .python_names import _IMPLEMENTATION_MODULES, _REEXPORTED_MODULES

# Modules whose every use the gate judges by name: a library that holds one under another name hands it over.
_SENSITIVE_ROOTS = _REEXPORTED_MODULES | frozenset(_IMPLEMENTATION_MODULES) | frozenset(
    _IMPLEMENTATION_MODULES.values()) | frozenset({
        "traceback", "tracemalloc", "linecache", "types", "warnings", "codecs", "pathlib", "faulthandler", "resource",
        "mmap", "fcntl", "asyncio", "concurrent", "queue", "sysconfig", "site", "code", "codeop", "pdb", "bdb",
        "cProfile", "profile", "copyreg", "_ctypes", "shelve", "dbm", "sqlite3", "zipimport", "pty", "pydoc",
        "webbrowser", "logging", "select", "selectors", "sched", "_posixsubprocess", "_xxsubinterpreters",
        "_interpreters", "_thread", "_signal", "_weakref", "_io", "torch", "triton",
    })
# Standard modules that act when imported (print, open a browser or a window, start a test run): never imported here.
_NEVER_IMPORTED = frozenset({"antigravity", "this", "turtle", "turtledemo", "tkinter", "idlelib", "test", "__hello__",
                             "__phello__", "lib2to3", "ensurepip", "pydoc_data", "xxsubtype", "msilib", "winsound",
                             "_tkinter"})
# Libraries looked up only where the harness has imported them already.
_IMPORTED_LIBRARIES = frozenset({"torch", "triton", "numpy"})


@functools.lru_cache(maxsize=4096)
def _live_module(name: str) -> types.ModuleType | None:
    """The module called `name` as this interpreter has it, or None where it is not one the gate may look into."""
    root = name.partition(".")[0]
    module = sys.modules.get(name)
    if root in _IMPORTED_LIBRARIES:
        return module if isinstance(module, types.ModuleType) else None
    if root not in sys.stdlib_module_names or root in _NEVER_IMPORTED or root.startswith("test"):
        return None
    if module is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except BaseException:  # noqa: BLE001 - not importable here (a platform's module): nothing to look up
            return None
    return module if isinstance(module, types.ModuleType) else None


def _module_name(module: types.ModuleType) -> str | None:
    name = getattr(module, "__name__", None)
    if not isinstance(name, str):
        return None
    root, dot, rest = name.partition(".")
    return _IMPLEMENTATION_MODULES.get(root, root) + dot + rest


def held_module(owner: str, attr: str) -> str | None:
    """The module that `owner.attr` holds where it is one the gate judges and is not `owner.attr` itself (a real
    submodule), else None."""
    module = _live_module(owner)
    if module is not None:
        try:
            held = module.__dict__.get(attr)  # static: a module's __getattr__ (lazy submodules) never runs
        except Exception:  # noqa: BLE001 - a module whose namespace is not a dict
            return None
        if not isinstance(held, types.ModuleType):
            return None
        name = _module_name(held)
        if name is None or name == f"{owner}.{attr}" or name.partition(".")[0] not in _SENSITIVE_ROOTS:
            return None
        return name
    bare = attr.strip("_")
    if bare != attr and bare in _REEXPORTED_MODULES:  # `somelib._sys` where somelib is not looked into
        return bare
    return None


def is_live_module(name: str) -> bool:
    """`name` is a module of the standard library or of a library the harness imported (a class or function is not)."""
    return _live_module(name) is not None
