"""Fields of the solution's own objects: `shapes.topk` where `shapes = IndexerShapes(...)`, `self.topk` in a method
of the class that holds it. A tensor compute method taken uncalled (`f = q.topk`) is torch compute
(python_references `_check_method_reference`); an attribute of the same name read from an instance of a class the
module itself defines is a field of that class, never a tensor's method (a class attribute that holds torch's
callable, `topk = torch.topk`, is judged where it is assigned).

Only what the module proves is trusted: a name is an instance of an own class where every binding of that name in
the module is `OwnClass(...)` (no parameter, loop, `with`, walrus or unpacking binds it), and `self` is one in the
methods of an own class that is never called through the class with an explicit first argument
(`Launcher.launch(q)` would bind `self` to anything). An own class is one the module defines whose bases are its
own classes, `object`, or the plain record types (`NamedTuple`, `enum`); a subclass of torch.Tensor is a
tensor_subclass error anyway.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Callable, Mapping

from .python_kernels import collect_kernel_facts
from .python_modules import _absolute, module_of

if TYPE_CHECKING:
    from .python_modules import _OwnNames

_RECORD_BASES = frozenset({"builtins.object", "typing.NamedTuple", "enum.Enum", "enum.IntEnum", "enum.Flag",
                           "enum.IntFlag", "typing.Generic"})
# Library calls that make a record type (its fields are the arguments it is made with) or such a record itself.
_RECORD_FACTORIES = frozenset({"collections.namedtuple", "typing.NamedTuple"})
_RECORD_INSTANCES = frozenset({"types.SimpleNamespace", "argparse.Namespace"})
_NOT_INSTANCE_METHODS = frozenset({"staticmethod", "classmethod", "builtins.staticmethod", "builtins.classmethod"})


def own_field_reads(tree: ast.Module, resolve: Callable[[ast.AST], str | None],
                    imported_class: Callable[[ast.AST], bool] = lambda node: False,
                    unsafe_elsewhere: frozenset[int] | set[int] = frozenset()) -> set[int]:
    """ids of the Attribute nodes `x.attr` whose `x` is proven an instance of a class the solution defines: one of
    this module, or one another module of it defines that `imported_class` recognises (`from .types import Shapes`).
    `unsafe_elsewhere`: ids of this module's classes that another module reaches otherwise than by making one
    (`types.A.grab(q)`), whose `self` is then not trusted."""
    classes = _own_classes(tree, resolve)
    reads: set[int] = set()
    records = _record_types(tree, resolve)

    def makes_record(func: ast.AST) -> bool:
        return imported_class(func) or (isinstance(func, ast.Name) and func.id in records) or (
            resolve(func) in _RECORD_INSTANCES)

    instances = _names_bound_only_to(tree, classes, makes_record)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in instances:
            reads.add(id(node))
    unbound_calls = _classes_called_unbound(tree, classes)
    for name, cls in classes.items():
        if name not in unbound_calls and id(cls) not in unsafe_elsewhere:
            reads.update(_self_reads(cls, resolve))
    return reads


def module_classes(tree: ast.Module, resolve: Callable[[ast.AST], str | None]) -> list[ast.ClassDef]:
    """The module-level own classes of a module (those another module can import)."""
    own = _own_classes(tree, resolve)
    return [s for s in tree.body if isinstance(s, ast.ClassDef) and own.get(s.name) is s]


def classes_reached_elsewhere(tree: ast.Module, resolve_absolute: Callable[[ast.AST], str | None],
                              classes: dict[str, ast.ClassDef]) -> set[int]:
    """ids of the classes (``classes``: absolute dotted path -> class, of other modules) that this module reaches
    otherwise than by making one or naming it in an annotation (`A.grab(q)`, `g = A`, `getattr(A, "grab")`)."""
    allowed: set[int] = set()
    parent_attribute: dict[int, ast.Attribute] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            allowed.add(id(node.func))
        elif isinstance(node, ast.Attribute):
            parent_attribute[id(node.value)] = node
        annotations = ([node.annotation] if isinstance(node, (ast.arg, ast.AnnAssign)) else
                       [node.returns] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else [])
        for annotation in annotations:
            if annotation is not None:
                allowed.update(id(n) for n in ast.walk(annotation))
    unsafe: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
            continue
        cls = classes.get(resolve_absolute(node) or "")
        if cls is None or id(node) in allowed:
            continue
        parent = parent_attribute.get(id(node))
        if parent is not None and parent.attr in _static_or_class_methods(cls):
            continue  # `Shapes.from_plan(...)`, `Cfg.BLOCK`: a class or static method, a class attribute
        unsafe.add(id(cls))
    return unsafe


def _own_classes(tree: ast.Module, resolve: Callable[[ast.AST], str | None]) -> dict[str, ast.ClassDef]:
    defined = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    names = [n.name for n in defined]
    own: dict[str, ast.ClassDef] = {}
    for cls in defined:
        if names.count(cls.name) != 1:
            continue  # two classes of one name: which one a call makes is not known
        bases = [b.id if isinstance(b, ast.Name) and b.id in names else resolve(b) for b in cls.bases]
        if all(b in names or b in _RECORD_BASES for b in bases) and not cls.keywords:
            own[cls.name] = cls
    # a class whose base is a class of the module that is not own is not own either
    changed = True
    while changed:
        changed = False
        for name, cls in list(own.items()):
            if any(isinstance(b, ast.Name) and b.id in names and b.id not in own for b in cls.bases):
                del own[name]
                changed = True
    return own


def _record_types(tree: ast.Module, resolve: Callable[[ast.AST], str | None]) -> set[str]:
    """Names bound, every time, to a record type made by a library call (`Shapes = collections.namedtuple(...)`)."""
    made: set[str] = set()
    spoiled: set[str] = set()
    plain: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            makes = (len(node.targets) == 1 and isinstance(node.value, ast.Call)
                     and resolve(node.value.func) in _RECORD_FACTORIES)
            for target in node.targets:
                if isinstance(target, ast.Name):
                    plain.add(id(target))
                    (made if makes else spoiled).add(target.id)
        elif isinstance(node, ast.arg):
            spoiled.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            spoiled.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            spoiled.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            spoiled.update(node.names)
    for node in ast.walk(tree):  # loops, with, walrus, unpacking, annotated assignments...
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and id(node) not in plain:
            spoiled.add(node.id)
    return made - spoiled


def _names_bound_only_to(tree: ast.Module, classes: dict[str, ast.ClassDef],
                         makes_record: Callable[[ast.AST], bool]) -> set[str]:
    """Names every binding of which is `OwnClass(...)` as the whole value of a plain assignment."""
    constructed: set[str] = set()
    other: set[str] = set()
    plain_targets: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            builds = isinstance(value, ast.Call) and (
                (isinstance(value.func, ast.Name) and value.func.id in classes) or makes_record(value.func))
            for target in targets:
                if isinstance(target, ast.Name):
                    plain_targets.add(id(target))
                    (constructed if builds else other).add(target.id)
        elif isinstance(node, ast.arg):
            other.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            other.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            other.update(node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            other.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            other.add(node.name)
    for node in ast.walk(tree):  # loops, with, walrus, unpacking, comprehensions, match captures, deletions
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) and id(node) not in plain_targets:
            other.add(node.id)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            other.add(node.name)
    return constructed - other


def _classes_called_unbound(tree: ast.Module, classes: dict[str, ast.ClassDef]) -> set[str]:
    """Own classes a plain method of which is called through the class (`Cls.method(x)`), or that are handed on or
    rebound otherwise than called: their `self` may be anything."""
    out: set[str] = set()
    allowed: set[int] = set()  # class names made, subclassed or named in an annotation
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            allowed.add(id(node.func))
        elif isinstance(node, ast.ClassDef):
            allowed.update(id(b) for b in node.bases)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in classes:
            allowed.add(id(node.value))
            if node.attr not in _static_or_class_methods(classes[node.value.id]):
                out.add(node.value.id)
        annotations = ([node.annotation] if isinstance(node, (ast.arg, ast.AnnAssign)) else
                       [node.returns] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else [])
        for annotation in annotations:
            if annotation is not None:
                allowed.update(id(n) for n in ast.walk(annotation))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in classes
                and id(node) not in allowed):
            out.add(node.id)  # the class handed on (`make = Cls`, `getattr(Cls, "m")`): its methods reach anything
    return out


def _static_or_class_methods(cls: ast.ClassDef) -> set[str]:
    out: set[str] = set()
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            decorators = {d.id if isinstance(d, ast.Name) else ast.unparse(d) for d in stmt.decorator_list}
            if decorators & _NOT_INSTANCE_METHODS:
                out.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            out.update(t.id for t in targets if isinstance(t, ast.Name))  # class attributes: data, not methods
    return out


def _self_reads(cls: ast.ClassDef, resolve: Callable[[ast.AST], str | None]) -> set[int]:
    reads: set[int] = set()
    for stmt in cls.body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or not stmt.args.args:
            continue
        if any(resolve(d) in _NOT_INSTANCE_METHODS or (isinstance(d, ast.Name) and d.id in _NOT_INSTANCE_METHODS)
               for d in stmt.decorator_list):
            continue
        first = stmt.args.args[0].arg
        rebinds = any(isinstance(n, ast.arg) and n.arg == first for s in stmt.body for n in ast.walk(s)) or any(
            isinstance(n, ast.Name) and n.id == first and not isinstance(n.ctx, ast.Load)
            for s in stmt.body for n in ast.walk(s))
        if rebinds:
            continue
        for s in stmt.body:
            for n in ast.walk(s):
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == first:
                    reads.add(id(n))
    return reads


def collect_own_classes(own: _OwnNames, scanners: Mapping[str, Any]) -> None:
    """Fill ``own.classes`` and ``own.classes_reached`` from every module of the solution (`scanners`: path -> its
    Python scanner, aliases collected); and, as the last step before any scan, the jit functions and refused globals
    of every module (python_kernels)."""
    collect_kernel_facts(own, scanners)
    for path, scanner in scanners.items():
        module = module_of(path)[0]
        for cls in module_classes(scanner.tree, scanner._resolve):
            own.classes[f"{module}.{cls.name}" if module else cls.name] = cls
    if not own.classes:
        return
    for path, scanner in scanners.items():
        def absolute(node: ast.AST, scanner: Any = scanner) -> str | None:
            resolved = scanner._resolve(node)
            return _absolute(resolved, scanner.package) if resolved is not None else None
        own.classes_reached.update(classes_reached_elsewhere(scanner.tree, absolute, own.classes))
