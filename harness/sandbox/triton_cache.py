"""Which Triton kernels the worker compiled from files outside the solution: a library's kernels, whatever the
solution's own functions are called.

Run-time attribution (harness.audits.attribution) reads kernel names from CUPTI, and a Triton kernel's name is its
Python function's. A solution that launches a library's Triton kernel (FlashInfer's `merge_state_kernel`, FLA's
chunk kernels) and defines a function of the same name in its own files would have that library kernel counted as
its own. Triton records where each kernel was defined: the first line of the `.source` file it writes into its
cache for every compiled kernel is `#loc = loc("FILE":LINE:COL)`, FILE the defining module's path. The worker's
cache is private (harness.sandbox.runner: TRITON_CACHE_DIR under the worker's home), so every kernel the candidate
launched was compiled into it during this evaluation.
"""

from __future__ import annotations

import ast
import copy
import os
import re
from pathlib import Path
from typing import Optional


# the kernel's own definition: "#loc" with no number (helpers it calls, maybe a library's, are "#locN" after it)
_DEFINED_AT = re.compile(r'^#loc = loc\("((?:[^"\\]|\\.)*)":\d+:\d+\)', re.MULTILINE)
_MAX_FILES = 4096  # a cache never holds more kernels than a solution launched; more is not a cache of its own
_HEAD_BYTES = 4096


def compiled_kernels(cache_dir: Path) -> dict[str, set[str]]:
    """Kernel name -> the files its compiled variants were defined in (real paths), from the `.source` files."""
    found: dict[str, set[str]] = {}
    try:
        sources = sorted(cache_dir.glob("*/*.source"))[:_MAX_FILES]
    except OSError:
        return found
    for source in sources:
        try:
            with open(source, "rb") as f:
                head = f.read(_HEAD_BYTES).decode("utf-8", errors="replace")
        except OSError:
            continue
        match = _DEFINED_AT.search(head)
        if match is None:
            continue
        defined = match.group(1).encode().decode("unicode_escape", errors="replace")
        found.setdefault(source.stem, set()).add(os.path.realpath(defined))
    return found


def triton_cache_dir(workdir: Path) -> Path:
    """The worker's Triton cache: TRITON_CACHE_DIR, which the runner sets under the worker's private home."""
    return Path(os.environ.get("TRITON_CACHE_DIR", workdir / ".triton"))


_MAX_SOURCE_BYTES = 4 << 20
_COPY_IMPORTS = frozenset({"triton", "torch", "math"})  # what Inductor's copy of a kernel imports
_INDUCTOR_SUFFIX = re.compile(r"_\d+$")  # Inductor's name for its copy with `unique_user_kernel_names` on


def _functions(path: str) -> tuple[dict[str, set[str]], set[str]]:
    """A Python file's function definitions, by name, the AST of each without its decorators or its name (comments
    and layout left out, as a copy re-indents them); and the top-level packages it imports from."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(_MAX_SOURCE_BYTES))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return {}, set()
    found: dict[str, set[str]] = {}
    imports: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imports.add((node.module or ".").split(".")[0] if not node.level else ".")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bare = copy.copy(node)
            bare.decorator_list, bare.name = [], ""
            found.setdefault(node.name, set()).add(ast.dump(bare))
    return found, imports


def _solution_functions(solution_folder: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(Path(solution_folder).rglob("*.py"))[:_MAX_FILES]:
        for name, shapes in _functions(str(path))[0].items():
            found.setdefault(name, set()).update(shapes)
    return found


def _copy_of_own(name: str, path: str, own: dict[str, set[str]]) -> bool:
    """Whether the kernel ``name`` defined in ``path`` is the solution's own, copied: torch.compile compiles a
    user-defined Triton kernel (``triton_op`` + ``wrap_triton``, a kernel called in a compiled function) from a
    module Inductor writes into its cache, the kernel's source copied there (on an H100 host an honest compiled
    `triton_op` was "compiled from files outside the solution"). Every function of that file must be one of the
    solution's, and it may import only what Inductor's copy does: the kernel's helpers are looked up in that file (red
    team round 10b: the kernel's code matched the solution's, the helper it imported did another's work). A library's
    kernel under the name of a decoy of the solution's is the library's."""
    defined, imports = _functions(path)

    def owned(function: str, shapes: set[str]) -> bool:
        return bool(shapes & (own.get(function, set()) | own.get(_INDUCTOR_SUFFIX.sub("", function), set())))

    return (name in defined and imports <= _COPY_IMPORTS
            and all(owned(function, shapes) for function, shapes in defined.items()))


def kernels_outside(cache_dir: Path, solution_folder: Path) -> list[str]:
    """Names of kernels with a variant compiled from a file outside ``solution_folder`` that is no copy of the
    solution's own kernel of that name (``_copy_of_own``)."""
    root = os.path.join(os.path.realpath(solution_folder), "")
    own: Optional[dict[str, set[str]]] = None
    outside = []
    for name, files in sorted(compiled_kernels(cache_dir).items()):
        elsewhere = [f for f in files if not f.startswith(root)]
        if elsewhere:
            own = _solution_functions(solution_folder) if own is None else own
            if not all(_copy_of_own(name, f, own) for f in elsewhere):
                outside.append(name)
    return outside


def kernels_from_elsewhere(workdir: Path, package: Optional[Path]) -> list[str]:
    """The Triton kernels a worker in ``workdir`` compiled from files outside the solution's ``package`` (its
    folder, harness.sandbox.build.Built.package); none for a solution that is no Python package."""
    return kernels_outside(triton_cache_dir(workdir), package) if package is not None else []
