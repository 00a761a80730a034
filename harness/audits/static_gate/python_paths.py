"""The solution's own folder, for the Python scanner: paths next to the module (`__file__`) and its own package, where
reading or listing what the solution ships is a read of its own (a file_read warning, or nothing for its sources)
rather than a file-system probe.

A mixin of ``_PythonScanner`` through ``_CallChecks`` (harness/audits/static_gate/python_calls.py); it reads the
scanner's alias resolution (``_resolve``, ``_is_file_relative``, ``assignments``, ``own``) and reporting (``_hit``).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from typing import Any

from .python_names import _str_const

# A file the solution ships (its sources are scanned too) may be read next to the module (`__file__`).
_OWN_FILE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hh", ".hpp", ".hxx", ".inl", ".inc", ".py")


def _is_own_package_name(node: ast.AST) -> bool:
    """`__package__`, `__name__` or `__spec__.parent`: the module's own package (or itself), as the import gave it."""
    if isinstance(node, ast.Name):
        return node.id in ("__package__", "__name__")
    return (isinstance(node, ast.Attribute) and node.attr == "parent" and isinstance(node.value, ast.Name)
            and node.value.id == "__spec__")


# Conversions that keep a path the same folder: str(p), os.fspath(p), os.path.abspath/realpath(p), Path(p).
_PATH_WRAPPERS = frozenset({"builtins.str", "os.fspath", "os.path.abspath", "os.path.realpath", "pathlib.Path"})


def _path_wrapper(expr: ast.AST, resolve) -> bool:
    """`str(p)`, `os.fspath(p)`, `Path(p)`... (`str` only where the module does not rebind it)."""
    return (isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords
            and resolve(expr.func) in _PATH_WRAPPERS)


def unrecorded_bindings(tree: ast.Module, recorded: set[int], assigned: Mapping[str, Any]) -> frozenset[str]:
    """Names bound otherwise than by the plain assignments `assigned` records (ids of their target nodes in
    `recorded`): a parameter, `:=`, `with`/`except ... as`, a match capture, a tuple target, `global`; an import, def
    or class too where the name is also assigned. What such a name holds is not what `assigned` says."""
    from .python_env_flags import _bound

    code = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    through_objects = {n.attr for n in ast.walk(tree)  # `me.HERE = ...` through the module's own object
                       if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del))}
    return frozenset(through_objects) | frozenset(name for node in ast.walk(tree) for name in _bound(node)
                                                  if not (isinstance(node, ast.Name) and id(node) in recorded)
                                                  and (not isinstance(node, code) or name in assigned))


def _is_this_file(expr: ast.AST, resolve) -> bool:
    """`__file__`, `os.path.abspath(__file__)`, `Path(__file__).resolve()`: this module's own file."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id == "__file__"
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args \
                and expr.func.attr in ("resolve", "absolute"):
            expr = expr.func.value
        elif _path_wrapper(expr, resolve):
            expr = expr.args[0]
        else:
            return False


# Listing a folder: the solution's own one (`glob.glob(os.path.join(HERE, "configs", "*.json"))`, `os.listdir(HERE)`)
# is a read of what it ships: a file_read, as the open() of each file it lists is.
_LISTINGS = frozenset({"os.listdir", "os.scandir"})


def _stays_inside(node: ast.AST, joined: bool) -> bool:
    """A literal step under a folder that climbs nowhere: a path component (`joined`: os.path.join, `/`), or text
    appended to the folder's own name, which must start a new component (`HERE + "/configs"`, f"{HERE}/x")."""
    text = _str_const(node)
    if text is None or ".." in text or "\\" in text:
        return False
    return not text.startswith(("/", "~")) if joined else text.startswith("/")


class _OwnPathChecks:
    """Paths of the solution's own folder and package (see the module docstring)."""

    assignments: dict[str, list[ast.AST]]
    tree: ast.Module
    _recorded: set[int]  # ids of the name targets `assignments` holds the values of

    @functools.cached_property
    def opaque(self) -> frozenset[str]:
        """Names bound otherwise than by a recorded assignment (unrecorded_bindings); asked only where a path or a
        build is judged, so most modules never walk for it."""
        return unrecorded_bindings(self.tree, self._recorded, self.assignments)

    def _reads_own_file(self, path_expr: ast.AST) -> bool:
        """A path next to the module (`__file__`) naming a source file of the solution, which is scanned too."""
        literals = [n.value for n in ast.walk(path_expr) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        return (self._is_file_relative(path_expr) and any(s.endswith(_OWN_FILE_SUFFIXES) for s in literals)
                and not any(s.startswith("/") or ".." in s for s in literals))

    def _own_package_data(self, node: ast.Call) -> bool:
        """`files(__package__)`, `read_text(__name__, "x.json")`, `pkgutil.get_data(__package__ or __name__,
        "tuning.json")`: anchored at this module's own package, a resource named by a literal that climbs nowhere."""
        anchor = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg in ("anchor", "package")), None)
        if anchor is None or any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
            return False
        anchors = anchor.values if isinstance(anchor, ast.BoolOp) else [anchor]
        if not all(_is_own_package_name(a) for a in anchors):
            return False
        for arg in node.args[1:]:
            text = _str_const(arg)
            if text is None or text.startswith("/") or ".." in text:
                return False
        return True

    def _in_own_folder(self, path_expr: ast.AST) -> bool:
        """A path under the module's folder (`os.path.join(HERE, f"E={E}.json")`): asking whether the solution
        ships it tells no more than opening it for reading would (a file_read at the open); no literal climbs out."""
        literals = self._literals_reached(path_expr)
        return (self._is_file_relative(path_expr) and not any(s.startswith(("/", "~")) or ".." in s for s in literals)
                and not any(isinstance(n, ast.Name) and n.id in self.opaque for n in ast.walk(path_expr)))

    def _literals_reached(self, expr: ast.AST, depth: int = 0) -> list[str]:
        """The string literals of `expr` and of every value of the names it reads (`p` of `for p in PATHS`,
        `PATHS = [os.path.join(HERE, "..", "x")]`), a few names deep."""
        out = []
        for node in ast.walk(expr):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append(node.value)
            elif isinstance(node, ast.Name) and depth < 4:
                for value in self.assignments.get(node.id, ()):
                    out += self._literals_reached(value, depth + 1)
        return out

    def _own_folder(self, expr: ast.AST, depth: int = 0) -> bool:
        """The folder of this module (`os.path.dirname(os.path.abspath(__file__))`, `str(Path(__file__).parent)`,
        a name bound only to one), where no file of the solution is named like a real module: put on `sys.path`, it
        lets the solution import its own modules absolutely and shadows nothing."""
        if self.own.shadows or depth > 4:
            return False
        while _path_wrapper(expr, self._resolve):
            expr = expr.args[0]
        # a name is looked through after the conversions: `str(HERE)`, HERE = Path(__file__).resolve().parent
        if isinstance(expr, ast.Name) and expr.id != "__file__":
            values = self.assignments.get(expr.id, ()) if expr.id not in self.opaque else ()
            return bool(values) and all(self._own_folder(v, depth + 1) for v in values)
        if _names_a_folder(expr, self._resolve):
            return _is_this_file(_folder_of(expr), self._resolve)
        return False

    def _under_own_folder(self, expr: ast.AST, depth: int = 0) -> bool:
        """The module's folder, or a folder or pattern under it named by literals only (`os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "configs", "*.json")`, `HERE / "configs"`, f"{HERE}/configs/*.json", a name bound
        only to one): nothing computed, nothing absolute, no `..`."""
        if depth > 6:
            return False
        while _path_wrapper(expr, self._resolve):
            expr = expr.args[0]
        if isinstance(expr, ast.Name) and expr.id != "__file__":
            values = self.assignments.get(expr.id, ()) if expr.id not in self.opaque else ()
            return bool(values) and all(self._under_own_folder(v, depth + 1) for v in values)
        if _names_a_folder(expr, self._resolve):
            return _is_this_file(_folder_of(expr), self._resolve)
        if isinstance(expr, ast.Call) and self._resolve(expr.func) == "os.path.join" and expr.args and not (
                expr.keywords or any(isinstance(a, ast.Starred) for a in expr.args)):
            return (self._under_own_folder(expr.args[0], depth + 1)
                    and all(_stays_inside(a, True) for a in expr.args[1:]))
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Div, ast.Add)):
            return (self._under_own_folder(expr.left, depth + 1)
                    and _stays_inside(expr.right, isinstance(expr.op, ast.Div)))
        if isinstance(expr, ast.JoinedStr) and len(expr.values) > 1 and isinstance(expr.values[0], ast.FormattedValue):
            head = expr.values[0]
            return (head.conversion == -1 and head.format_spec is None and self._under_own_folder(head.value, depth + 1)
                    and _stays_inside(expr.values[1], False)
                    and all(_str_const(v) is not None and ".." not in v.value for v in expr.values[2:]))
        return False

    def _check_listing(self, resolved: str, node: ast.Call) -> None:
        """glob/listdir: of the solution's own sources (load()'s list) no finding, of its own folder a file_read;
        anything else stays the file_cache finding of the name (a file-system probe)."""
        name = "pathname" if resolved.startswith("glob.") else "path"
        pattern = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == name), None)
        if (pattern is None or len(node.args) > 1 or any(isinstance(a, ast.Starred) for a in node.args)
                or any(k.arg in (None, "root_dir", "dir_fd") for k in node.keywords)):
            return
        if resolved.startswith("glob.") and self._reads_own_file(pattern):
            self.judged.add(id(node.func))  # lists the solution's own sources (for load()): a read of its own
        elif self._under_own_folder(pattern):
            self.judged.add(id(node.func))
            self._hit("file_read", node, f"`{resolved}()` lists the solution's own folder")


def _names_a_folder(expr: ast.AST, resolve) -> bool:
    """`os.path.dirname(x)` or `x.parent`: the folder of what `_folder_of` returns."""
    return ((isinstance(expr, ast.Call) and len(expr.args) == 1 and resolve(expr.func) == "os.path.dirname")
            or (isinstance(expr, ast.Attribute) and expr.attr == "parent"))


def _folder_of(expr: ast.AST) -> ast.AST:
    return expr.args[0] if isinstance(expr, ast.Call) else expr.value
