"""Operator families: the registry that maps an ``op_type`` to what differs about judging it.

``family_for(op_type)`` is the one question the harness asks. A family is found, in order:

1. registered already (``register``, or a module loaded by ``load_family_module``);
2. discovered: ``harness/families/<op_type>.py`` exists, so it is imported and its ``FAMILY`` registered
   (the plug-in folder; workers find families the same way, which is why special inputs need it);
3. otherwise the generic family (``OperatorFamily()``): generic inputs, the official default check, the
   generic cost and a single regime, so an op_type nobody wrote a module for still runs.

Adding a family is its data (definitions/workloads/blobs/baselines under ``<op_type>/`` folders of the trace
set, presets in ``eval_config.yaml``, rules in ``audit_policy.yaml``) plus one module,
``harness/families/<op_type>.py``, that subclasses ``OperatorFamily`` and sets ``FAMILY = MyFamily()``.
A module elsewhere (a test, an out-of-tree family) is loaded by ``load_family_module(dotted name or .py path)``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Optional, Union

from ..measure.roofline import WorkloadCost
from ..data.schema import Definition, Workload
from .base import OperatorFamily

__all__ = ["FamilyError", "OperatorFamily", "family_for", "load_family_module", "register", "registered",
           "unregister", "workload_cost"]

FAMILIES_DIR = Path(__file__).resolve().parent
GENERIC = OperatorFamily()

_registry: dict[str, OperatorFamily] = {}
_lock = threading.RLock()


class FamilyError(Exception):
    """A family that cannot be registered or loaded (duplicate op_type, broken or empty module)."""


def register(family: OperatorFamily, *, replace: bool = False) -> OperatorFamily:
    """Make ``family`` the one for its op_type. A second family for the same op_type is an error (two modules
    claiming one operator would judge it by whichever loaded last) unless ``replace`` is asked for."""
    if not isinstance(family, OperatorFamily):
        raise FamilyError(f"{family!r} is not an OperatorFamily")
    op_type = family.op_type
    if not isinstance(op_type, str) or not op_type:
        raise FamilyError(f"{family!r} has no op_type")
    family.rules()  # broken regime rules fail here, not in the middle of an evidence table
    with _lock:
        current = _registry.get(op_type)
        if current is not None and current is not family and not replace:
            raise FamilyError(f"op_type {op_type!r} already has a family ({current!r}); refusing {family!r}")
        _registry[op_type] = family
    return family


def unregister(op_type: str) -> Optional[OperatorFamily]:
    """Forget the family of ``op_type`` (tests); the next ``family_for`` discovers it again."""
    with _lock:
        return _registry.pop(op_type, None)


def registered() -> dict[str, OperatorFamily]:
    """The families registered so far (discovery is lazy: a built-in appears once asked for)."""
    with _lock:
        return dict(_registry)


def family_for(op_type: str) -> OperatorFamily:
    """The family of ``op_type``: registered, else discovered in ``harness/families/``, else the generic one."""
    with _lock:
        found = _registry.get(op_type)
        if found is not None:
            return found
        module_file = FAMILIES_DIR / f"{op_type}.py"
        if op_type.isidentifier() and not op_type.startswith("_") and module_file.is_file():
            load_family_module(f"{__name__}.{op_type}")
            if op_type not in _registry:
                raise FamilyError(f"{module_file} declares no family for op_type {op_type!r}")
            return _registry[op_type]
    return GENERIC


def load_family_module(spec: Union[str, Path]) -> list[OperatorFamily]:
    """Import a family module (a dotted module name, or the path of a ``.py`` file) and register what it
    declares: ``FAMILY`` (one instance) or ``FAMILIES`` (a list). Loading the same module again is a no-op."""
    module = _import(spec)
    declared = getattr(module, "FAMILIES", None)
    if declared is None:
        declared = [module.FAMILY] if hasattr(module, "FAMILY") else []
    if not declared:
        raise FamilyError(f"family module {spec}: declares neither FAMILY nor FAMILIES")
    families = list(declared)
    with _lock:
        for family in families:
            register(family)
    return families


def _import(spec: Union[str, Path]) -> ModuleType:
    path = Path(spec) if isinstance(spec, Path) or str(spec).endswith(".py") else None
    try:
        if path is None:
            return importlib.import_module(str(spec))
        path = path.resolve()
        if not path.is_file():
            raise FamilyError(f"family module {path}: no such file")
        # One module name per file, so loading a file twice returns the same module (and the same FAMILY).
        name = f"crucible_family_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
        if name in sys.modules:
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise FamilyError(f"family module {path}: not a Python module")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module
    except FamilyError:
        raise
    except Exception as err:
        raise FamilyError(f"family module {spec} failed to import: {type(err).__name__}: {err}") from err


def workload_cost(definition: Definition, workload: Workload, root: Optional[Path] = None,
                  tokens: Optional[int] = None) -> WorkloadCost:
    """The roofline cost of one workload by its definition's family (``OperatorFamily.workload_cost``)."""
    return family_for(definition.op_type).workload_cost(definition, workload, root=root, tokens=tokens)
