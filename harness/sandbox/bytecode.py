"""Compiled bytecode of the trusted Python the harness and its workers import (torch first), kept by the harness.

An installation without ``.pyc`` files (a container image built with ``PYTHONDONTWRITEBYTECODE``, a read-only
site-packages: the H200 hosts' torch has none of its 2,141 modules compiled) makes every process compile what it
imports, every time: 3.4 s of ``import torch`` there, paid by the harness and again by each worker, on the critical
path of every evaluation. Workers may never write bytecode (``PYTHONDONTWRITEBYTECODE``: a candidate must not leave
code that a later process runs), so nothing else would ever fix it.

The harness's own process points Python's bytecode cache at a folder of its own (``sys.pycache_prefix``), where its
imports write what they compile; its workers read that folder and never write it (``PYTHONPYCACHEPREFIX`` with
``PYTHONDONTWRITEBYTECODE``; in the full sandbox it is a read-only bind, like the installation itself). Where the
installation has its bytecode beside the sources the default is to leave Python as it is (a prefix makes Python
ignore that bytecode, and modules only the workers import would then be compiled per process).

``CRUCIBLE_BYTECODE_CACHE``: unset, a folder under the user's cache where torch has no bytecode beside it; a folder,
always that folder; ``off``, never. A folder another user owns, or that others may write, is never used: its
bytecode would run in the harness.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import stat
import sys
from pathlib import Path
from typing import Optional

BYTECODE_ENV = "CRUCIBLE_BYTECODE_CACHE"


def default_folder() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "crucible" / "bytecode"


def installation_compiled(module: str = "torch") -> Optional[bool]:
    """Does ``module``'s package have bytecode beside its ``__init__.py`` for this interpreter? None where the module
    is not installed (nothing to gain)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    source = Path(spec.origin)
    return (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").is_file()


def safe_folder(folder: Path) -> Optional[str]:
    """Why ``folder`` must not hold the harness's bytecode (None: it may): owned by this user, writable by no one
    else, and every folder above it not writable by others either (unless sticky, as /tmp is)."""
    try:
        info = folder.stat()
    except OSError as err:
        return f"cannot use {folder}: {err}"
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is not a folder"
    if info.st_uid != os.getuid():
        return f"{folder} belongs to another user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"others may write {folder}"
    for parent in folder.resolve().parents:
        try:
            mode = parent.stat().st_mode
        except OSError as err:
            return f"cannot check {parent}: {err}"
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
            return f"others may replace {folder}: {parent} is writable by them"
    return None


def choose_folder(setting: Optional[str], compiled: Optional[bool]) -> Optional[Path]:
    """The bytecode folder for a ``CRUCIBLE_BYTECODE_CACHE`` value and whether the installation is compiled (pure)."""
    setting = (setting or "").strip()
    if setting.lower() in ("off", "0", "no", "false"):
        return None
    if setting:
        return Path(setting).expanduser()
    return default_folder() if compiled is False else None


def use_bytecode_cache() -> Optional[Path]:
    """For a harness command's own process, before it imports torch: point Python's bytecode cache at the harness's
    folder (made if missing), unless the setting, the installation or the folder's ownership says not to. The
    workers it starts then read the same folder (harness.sandbox.runner). Returns the folder in use."""
    if sys.pycache_prefix:  # the user chose one (PYTHONPYCACHEPREFIX, -X pycache_prefix): theirs stands
        return Path(sys.pycache_prefix)
    try:  # a home folder that cannot be found, or a folder that cannot be made: Python as it is
        folder = choose_folder(os.environ.get(BYTECODE_ENV), installation_compiled())
        if folder is None:
            return None
        folder.mkdir(parents=True, exist_ok=True, mode=0o755)
    except (OSError, RuntimeError, KeyError):
        return None
    if safe_folder(folder) is not None:
        return None
    sys.pycache_prefix = str(folder)
    # written even where PYTHONDONTWRITEBYTECODE is set (container images often set it): that keeps Python from
    # writing beside the sources; this folder is the harness's own (CRUCIBLE_BYTECODE_CACHE=off: none at all)
    sys.dont_write_bytecode = False
    store_imported()
    return folder


def store_imported() -> int:
    """Write the bytecode of the modules this process imported before its prefix was set (a command whose own imports
    bring torch in) into the prefix, as its later imports will be; returns how many were written. Once per host and
    installation: a module whose bytecode is there already costs a stat."""
    written = 0
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        if not isinstance(source, str) or not source.endswith(".py") or not os.path.isfile(source):
            continue
        try:
            target = importlib.util.cache_from_source(source)
            if not os.path.exists(target):
                py_compile.compile(source, cfile=target, doraise=True, quiet=2)
                written += 1
        except (OSError, ValueError, py_compile.PyCompileError):
            continue  # that module is compiled by whoever imports it, as before
    return written


def worker_bytecode() -> tuple[dict[str, str], list[str]]:
    """The workers' side of ``use_bytecode_cache``: their environment (read the folder, write nothing) and the folder
    to bind read-only in their sandbox; nothing where this process has no bytecode folder."""
    if not sys.pycache_prefix or not os.path.isdir(sys.pycache_prefix):
        return {}, []
    return {"PYTHONPYCACHEPREFIX": sys.pycache_prefix, "PYTHONDONTWRITEBYTECODE": "1"}, [sys.pycache_prefix]
