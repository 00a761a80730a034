"""The solution's Python files that nothing of it imports: a repository's tests and benchmarks, packed beside the
kernel (`tests/test_prefill.py` with pytest and a PyTorch reference, `benchmarks/bench.py` with its own timing).

The harness imports the entry point (and the setup's file) as modules of a package; a file is run only when an
import reaches it. What the gate finds in a file no import can reach blocks nothing: it is archived and shown, with
a note, as a warning (``never_imported_note``). The answer must never call a file unreachable that can run, so every
doubt makes a file reachable:

- imports are followed from the entry point and the setup's file, wherever they stand (inside functions, under
  `TYPE_CHECKING`), relative ones from their package, absolute ones matched against every folder of the solution
  (its own folder may be on `sys.path`), each module's parent packages' `__init__.py` included, and a star import
  from a package of its own reaches the whole package;
- a file whose name (its stem, or its folder's for an `__init__.py`) appears anywhere in the text of a reachable
  file or of any file that is not Python (data, C++), is reachable: a loader could be handed that name;
- a reachable file that can load modules some other way (`importlib`, `__import__`, `runpy`, pickles, `torch.hub`,
  `exec`, a module object made by hand...), or one that does not parse, makes every file reachable;
- `sitecustomize.py` and `usercustomize.py` are always reachable.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

NEVER_IMPORTED_NOTE = " (in a file the entry point never imports: it never runs, so nothing of it blocks)"
# Ways to load a module other than an import statement: where a reachable file holds one, no file is unreachable.
_LOADERS = re.compile(r"importlib|__import__|import_module|runpy|pickle|torch\.load|\bhub\b|\bexec\b|\beval\b|"
                      r"ModuleType|meta_path|path_hooks|zipimport|marshal|dill|joblib|shelve|load_module|"
                      r"exec_module|spec_from|SourceFileLoader|sys\.modules|__loader__|__spec__\.loader|"
                      r"pydoc|locate|resolve_name|logging\.config|dictConfig|fileConfig|unittest|doctest|"
                      r"walk_packages|iter_modules|serialization|xmlrpc|copyreg|pkgutil\.(?!get_data)")
_ALWAYS_RUN = frozenset({"sitecustomize.py", "usercustomize.py"})


def _parts(path: str) -> tuple[str, ...]:
    return PurePosixPath(path.replace("\\", "/")).with_suffix("").parts


def _module_parts(path: str) -> tuple[str, ...]:
    parts = _parts(path)
    return parts[:-1] if parts and parts[-1] == "__init__" else parts


def _name_of(path: str) -> str:
    parts = _module_parts(path)
    return parts[-1] if parts else ""


def _imported_names(tree: ast.AST, package: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], bool, bool]]:
    """(dotted parts, relative, star) of every module an import statement of `tree` may load."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield tuple(alias.name.split(".")), False, False
        elif isinstance(node, ast.ImportFrom):
            base: tuple[str, ...] = tuple(node.module.split(".")) if node.module else ()
            relative = node.level > 0
            if relative:
                up = node.level - 1
                if up > len(package):
                    continue
                base = package[:len(package) - up] + base
            star = any(a.name == "*" for a in node.names)
            yield base, relative, star
            for alias in node.names:
                if alias.name != "*":
                    yield base + (alias.name,), relative, False


def _literal_all(tree: ast.AST) -> bool:
    """Every binding of `__all__` is a literal list or tuple of strings, and nothing changes it in place (a star
    import then loads named modules only, and their names are in the text)."""
    literal: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if (all(isinstance(t, ast.Name) for t in targets) and isinstance(value, (ast.List, ast.Tuple))
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)):
                literal.update(id(t) for t in targets)
    changed = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # `__all__.append(name)`
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id == "__all__" and id(node) not in literal
                and (not isinstance(node.ctx, ast.Load) or id(node) in changed)):
            return False  # bound otherwise, or changed in place (reading it, `name in __all__`, is FLA's lazy API)
        if isinstance(node, ast.Constant) and node.value == "__all__":
            return False  # by name (`globals()["__all__"]`, setattr)
        if isinstance(node, ast.Attribute) and node.attr == "__all__":
            return False  # another module's (`pkg.__all__ = [...]`)
    return True


def never_imported(sources: Mapping[str, str], entry_files: Iterable[str]) -> set[str]:
    """The .py paths of `sources` that no import from `entry_files` can reach (see the module's rules)."""
    written = {PurePosixPath(p.replace("\\", "/")).as_posix(): p for p in sources if p.endswith(".py")}
    sources = {**{p: t for p, t in sources.items() if not p.endswith(".py")},
               **{canon: sources[p] for canon, p in written.items()}}
    python = set(written)
    modules = {p: _module_parts(p) for p in python}
    reached: set[str] = set()
    entries = {PurePosixPath(e.replace("\\", "/")).as_posix() for e in entry_files}
    frontier = [p for p in python if p in entries or PurePosixPath(p).name in _ALWAYS_RUN]

    def reach(path: str) -> None:
        if path not in reached:
            reached.add(path)
            frontier.append(path)
            parts = modules[path]
            for i in range(len(parts)):  # its parent packages' __init__.py run first
                init = "/".join(parts[:i] + ("__init__.py",))
                if init in python and init not in reached:
                    reach(init)

    for path in list(frontier):
        frontier.remove(path)
        reach(path)
    other_text = "".join(t for p, t in sources.items() if p not in python)
    while frontier:
        path = frontier.pop()
        text = sources[path]
        if _LOADERS.search(text):
            return set()
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            return set()
        if not _literal_all(tree):
            return set()  # `__all__` computed: what a star import of this package loads is not in the text
        package = _parts(path)[:-1]
        for dotted, relative, star in _imported_names(tree, package):
            for other, parts in modules.items():
                if other in reached or not (dotted or star):
                    continue
                # relative: exactly that module or package (or inside it, for a star); absolute: the name at any depth
                # of the solution's folders, or a package it goes through
                if relative:
                    hit = parts == dotted or (star and parts[:len(dotted)] == dotted)
                else:
                    hit = any(parts[i:i + len(dotted)] == dotted or parts[i:] == dotted[:len(parts) - i]
                              for i in range(len(parts)))
                if hit:
                    reach(other)
        # names handed to a loader: any file named in reachable text, or in any file that is not Python
        mentioned = text + other_text
        for other in python - reached:
            name = _name_of(other)
            if name and name in mentioned:
                reach(other)
    return {written[p] for p in python - reached}
