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

The body of a top-level `if __name__ == "__main__":` never runs when the harness imports the module, where nothing in
the solution could make `__name__` "__main__" (python_modules.main_blocks_never_run, judged on every file): its
imports reach nothing and its text names nothing (a self-test's `from selftest import check`). A top-level function
that only such a body calls (the self-test's reference and checker) never runs either (``never_called``): its
findings block nothing, as a never-imported file's do (NEVER_CALLED_NOTE).
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath

from .python_modules import is_main_guard, main_blocks_never_run, statements_that_run

NEVER_IMPORTED_NOTE = " (in a file the entry point never imports: it never runs, so nothing of it blocks)"
NEVER_CALLED_NOTE = (" (in a function only a `__main__` block calls, which never runs when the harness imports the "
                     "module: nothing of it blocks)")
# Ways to load a module other than an import statement: where a reachable file holds one, no file is unreachable.
# (pydoc's `locate` as a word: "preallocated" in a docstring loads nothing)
_LOADERS = re.compile(r"importlib|__import__|import_module|runpy|pickle|torch\.load|\bhub\b|\bexec\b|\beval\b|"
                      r"ModuleType|meta_path|path_hooks|zipimport|marshal|dill|joblib|shelve|load_module|"
                      r"exec_module|spec_from|SourceFileLoader|sys\.modules|__loader__|__spec__\.loader|"
                      r"pydoc|\blocate\b|resolve_name|logging\.config|dictConfig|fileConfig|unittest|doctest|"
                      r"walk_packages|iter_modules|serialization|xmlrpc|copyreg|pkgutil\.(?!get_data)")
_ALWAYS_RUN = frozenset({"sitecustomize.py", "usercustomize.py"})
# A module's names listed and looked up without being written (`dir(m)`, the C API's): any function may be called.
_LISTS_NAMES = re.compile(r"\bdir\s*\(|getmembers|getattr_static|PyObject_Dir|PyObject_\w*GetAttr\w*")
_DEF_RE = re.compile(r"\s*(?:async\s+)?def\s+(\w+)")
_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


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


def _lines(text: str) -> list[str]:
    """The lines of `text` as the parser counts them (\\n, \\r\\n, \\r; not str.splitlines' form feeds and others)."""
    return _LINE_RE.findall(text)


def _main_block_lines(tree: ast.Module) -> Iterable[int]:
    """1-based numbers of the lines of the module's top-level main guards' bodies (their `else:` runs)."""
    for stmt in tree.body:
        if is_main_guard(stmt):
            yield from range(stmt.lineno, (stmt.orelse[0].lineno - 1 if stmt.orelse else stmt.end_lineno) + 1)


def _without_main_blocks(tree: ast.Module, text: str) -> str:
    """`text` with the lines of its top-level main guards' bodies blanked."""
    lines = _lines(text)
    for number in _main_block_lines(tree):
        if number <= len(lines):
            lines[number - 1] = "\n"
    return "".join(lines)


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
    inert = main_blocks_never_run(sources)
    while frontier:
        path = frontier.pop()
        text = sources[path]
        try:
            tree = ast.parse(text.removeprefix("\ufeff"))
        except (SyntaxError, ValueError):
            return set()
        if inert:
            text = _without_main_blocks(tree, text)
            tree.body = statements_that_run(tree, True)
        if _LOADERS.search(text):
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


def never_called(sources: Mapping[str, str], entry_points: Iterable[str]) -> dict[str, list[tuple[int, int]]]:
    """path -> (first, last) lines of the bodies of top-level functions that only a main guard calls (a self-test's
    reference and checker): where main guards never run, such a body never runs on import either, and what the gate
    finds in it blocks nothing (policy.in_a_function_never_called). `entry_points`: "file.py::name" of the entry
    point and the setup, which the harness calls by name.

    A function qualifies only where its name is a word nowhere in the text of any file of the solution but in main
    guards' bodies and in the bodies of functions that qualify (its own included); it has no decorator (one runs at
    its definition and may hand it on) and is no dunder (a module's `__getattr__` is called by Python itself). Its
    signature's defaults and annotations run at its definition: they are not in the span."""
    if not main_blocks_never_run(sources) or any(_LISTS_NAMES.search(text) for text in sources.values()):
        return {}
    entries = {PurePosixPath(e.replace("\\", "/")).as_posix() for e in entry_points}
    texts = {path: [unicodedata.normalize("NFKC", line) for line in _lines(text)] for path, text in sources.items()}
    bodies: dict[str, list[tuple[str, int, int]]] = {}  # name -> (path, first, last) of each body
    definitions: set[tuple[str, int, int]] = set()  # (path, line, column) of each candidate's name after `def`
    allowed: dict[str, set[int]] = {}  # path -> main guards' lines
    for path, text in sources.items():
        if not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(text.removeprefix("\ufeff"))
        except (SyntaxError, ValueError):
            return {}
        posix = PurePosixPath(path.replace("\\", "/")).as_posix()
        allowed[path] = set(_main_block_lines(tree))
        for node in tree.body:
            if (not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list
                    or node.name.startswith("__") or f"{posix}::{node.name}" in entries
                    or node.body[0].lineno == node.lineno):
                continue
            head = _DEF_RE.match(texts[path][node.lineno - 1])
            if head is not None and head.group(1) == node.name:  # else (`def \\` split lines) it stays live
                bodies.setdefault(node.name, []).append((path, node.body[0].lineno, node.end_lineno))
                definitions.add((path, node.lineno, head.start(1)))
    if not bodies:
        return {}
    word = re.compile(r"\b(?:" + "|".join(map(re.escape, bodies)) + r")\b")
    uses = {(m.group(0), path, number): m.start() for path, lines in texts.items()
            for number, line in enumerate(lines, 1) for m in word.finditer(line)
            if (path, number, m.start()) not in definitions}
    dead = set(bodies)
    while True:  # the largest set whose every use is in a main guard or in a body of the set
        spans = [span for name in dead for span in bodies[name]]
        live = {name for name, path, number in uses if name in dead and number not in allowed.get(path, ())
                and not any(p == path and a <= number <= b for p, a, b in spans)}
        if not live:
            break
        dead -= live
    return {path: sorted(span[1:] for name in dead for span in bodies[name] if span[0] == path)
            for path in sorted({span[0] for name in dead for span in bodies[name]})}
