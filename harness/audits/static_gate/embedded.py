"""C++/CUDA held in Python strings, for the Python scanner.

torch.utils.cpp_extension ``load_inline`` and ``load`` are the supported way for a Python solution to build
native code: the harness runs them in the candidate's sandboxed build with a private build folder and
archives (and disassembles) what they build. So the code they compile is scanned here instead of being
refused: the strings passed as ``cpp_sources``/``cuda_sources`` (followed through module constants, lists,
concatenation, ``.format``/``.replace``/``"".join``, f-strings and helper functions that return them) and any
other string that looks like C++ source get the C/C++ rules as if they were .cu files, with findings at the
string's line in the .py file; the files given to ``load(sources=...)`` must be the solution's own, and the
compiler/linker flags are checked for libraries, CUPTI, NVRTC and symbol wrapping.

A mixin of ``_PythonScanner`` (harness/audits/static_gate/python.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ...sandbox.build_file_check import SHELL_SYNTAX
from .common import _ENV_MARKER_RE, _QUOTES_AND_SPACE, _TEMP_PATH_RE, _WHY, _Hit
from .cpp import _strip_cpp, scan_cpp
from .python_names import _BUILD_FUNCTIONS, _TEMP_BUILD_DIRECTORIES, _str_const

if TYPE_CHECKING:
    from .policy import _CompiledPolicy

# Parameters of load_inline(name, cpp_sources, cuda_sources=None, ...) and load(name, sources, ...).
_SOURCE_PARAMETERS = {"load_inline": ("cpp_sources", "cuda_sources"), "load": ()}
_POSITIONAL = {"load_inline": ("name", "cpp_sources", "cuda_sources"), "load": ("name", "sources")}
_FLAG_PARAMETERS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")

# A string that holds C/C++/CUDA source, wherever it is used.
_CPP_SOURCE_MARKER_RE = re.compile(r"__global__|__device__|#[ \t]*include\b|PYBIND11_MODULE|TORCH_LIBRARY|"
                                   r"extern[ \t]+\"C\"|<<<")
_FLAG_RULES = (
    ("timer_tampering", re.compile(r"--wrap\b|--defsym\b|cupti"), "wraps or defines linker symbols / uses CUPTI"),
    ("dynamic_code", re.compile(r"nvrtc"), "links NVRTC (run-time compilation)"),
    ("native_ffi", re.compile(r"LD_PRELOAD|--preload"), "preloads a native library"),
    ("concurrency", re.compile(r"openmp|-lgomp\b|-liomp|-ltbb\b"), "builds host threads (OpenMP/TBB)"),
    # torch writes flags into build.ninja as they are and ninja runs each line in a shell (red team round 10)
    ("concurrency", SHELL_SYNTAX, "carries shell syntax, which the build's shell would run"),
    ("library_fallback", re.compile(r"cublas|cudnn|cusparse|cufft|cusolver|cutlass|flashinfer|(?:^|[/\\s])cute\b"),
     "builds against a kernel library"),
)
# Linker flags only (`-lineinfo` is an nvcc flag): a library that is not built from the solution's sources is
# native code outside the build checks, unless it is CUDA's, PyTorch's or the C runtime's (libraries of kernels
# are library_fallback above).
_LINK_RULES = (
    ("native_ffi", re.compile(
        r"(?:^|\s)-L\S|-rpath|\.so(?:\.\d+)*$|\.a$|\.o$|(?:^|\s)-l(?!(?:cuda|cudart|cudart_static|cudadevrt|c10|c10_cuda|"
        r"torch|torch_cpu|torch_cuda|torch_python|m|dl|rt|stdc\+\+|nvToolsExt|nvrtc\w*|cupti\w*|cublas\w*|cudnn\w*|"
        r"cusparse\w*|cufft\w*|cusolver\w*|curand)(?:\s|$))\S"),
     "links native code that is not built from the solution's sources"),
)
_MAX_DEPTH = 16
# Making (or asking after) a load() build folder: os.makedirs(BUILD, exist_ok=True), `if not os.path.isdir(BUILD)`.
_MAKE_FOLDER_FUNCTIONS = frozenset({"os.makedirs", "os.mkdir", "os.path.exists", "os.path.isdir"})
# Conversions that keep a path what it is: str(p), os.fspath(p), Path(p).
_PATH_CONVERSIONS = frozenset({"builtins.str", "os.fspath", "pathlib.Path", "pathlib.PurePath"})


def _unwrap_path(expr: ast.AST, resolve) -> ast.AST:
    while (isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords
           and (resolve(expr.func) in _PATH_CONVERSIONS or isinstance(expr.func, ast.Name) and expr.func.id == "str")):
        expr = expr.args[0]
    return expr


class _EmbeddedSources:
    """load/load_inline calls and C++ source strings (see the module docstring)."""

    aliases: dict[str, str]
    assignments: dict[str, list[ast.AST]]
    body: list[ast.stmt]
    judged: set[int]
    module_functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]
    docstrings: set[int]
    embedded: set[int]
    hits: list[_Hit]
    policy: _CompiledPolicy
    source: str

    def _scan_embedded_sources(self, body: list[ast.stmt]) -> None:
        builds = "cpp_extension" in self.source or "tvm_ffi" in self.source
        if not builds and _CPP_SOURCE_MARKER_RE.search(self.source) is None:
            return
        loose: list[ast.Constant] = []
        for node in (n for stmt in body for n in ast.walk(stmt)):
            if builds and isinstance(node, ast.Call):
                resolved = self._resolve(node.func)
                if resolved in _BUILD_FUNCTIONS:  # tvm_ffi.cpp's build/build_inline take what load/load_inline do
                    short = resolved.rpartition(".")[2]
                    self._check_build_call(node, {"build": "load", "build_inline": "load_inline"}.get(short, short))
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in self.docstrings
                  and _CPP_SOURCE_MARKER_RE.search(node.value)):
                loose.append(node)
        for node in loose:
            if id(node) not in self.embedded:
                self._scan_cpp_string(node, "a string holding C++ source")

    # ---- load / load_inline

    def _check_build_call(self, call: ast.Call, function: str) -> None:
        arguments: dict[str, list[ast.AST]] = {}
        for name, value in zip(_POSITIONAL[function], call.args):
            arguments.setdefault(name, []).append(value)
        spread: list[ast.AST] = []
        for keyword in call.keywords:
            if keyword.arg is None:
                spread.append(keyword.value)  # load_inline(**options): every string in it is read both ways
            else:
                arguments.setdefault(keyword.arg, []).append(keyword.value)
        for parameter in _SOURCE_PARAMETERS[function]:
            for value in [*arguments.get(parameter, ()), *spread]:
                for node in self._string_nodes(value):
                    if id(node) not in self.embedded:
                        self._scan_cpp_string(node, f"`{parameter}` of {function}()")
        for value in [*arguments.get("sources", ()), *arguments.get("cpp_files", ()), *arguments.get("cuda_files", ())]:
            for node in self._string_nodes(value):
                path = node.value if isinstance(node, ast.Constant) else ""
                if path.startswith("/") or ".." in re.split(r"[/\\]", path):
                    self._embedded_hit("harness_internals", node,
                                       f"{function}() builds `{path}`, a file from outside the solution's own sources")
        for value in arguments.get("build_directory", ()):
            for call in self._temp_build_directory(value) or ():
                self.judged.add(id(call.func))  # a private folder for this build: tempfile is allowed there
            self._judge_build_folder_creation(value)
        for parameter in (*_FLAG_PARAMETERS, "**"):
            values = spread if parameter == "**" else arguments.get(parameter, ())
            rules = _FLAG_RULES + _LINK_RULES if parameter == "extra_ldflags" else _FLAG_RULES
            for value in values:
                for node in self._string_nodes(value):
                    self._check_build_flag(node, function, rules)
        # the sources as one text, with the flags' -D macros (embedded_fold.py)
        flags = [f for p in ("extra_cflags", "extra_cuda_cflags") for v in arguments.get(p, ())
                 for f in (v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v])]
        self._scan_folded_sources(call, function, {p: [*arguments.get(p, ()), *spread]
                                                   for p in _SOURCE_PARAMETERS[function]
                                                   if arguments.get(p) or spread}, flags)

    def _temp_build_directory(self, expr: ast.AST) -> list[ast.Call] | None:
        """The tempfile calls that make `expr` (`tempfile.mkdtemp()`, `TemporaryDirectory().name`, a name bound only
        to one of them, also by `with ... as d`), or None where it is anything else. A folder of its own, under
        the worker's TMPDIR; `dir=` could name a shared one, so it is not allowed."""
        if isinstance(expr, ast.Attribute) and expr.attr == "name":
            expr = expr.value
        if isinstance(expr, ast.Call):
            fine = (self._resolve(expr.func) in _TEMP_BUILD_DIRECTORIES and not expr.args
                    and all(k.arg in ("prefix", "suffix") for k in expr.keywords))
            return [expr] if fine else None
        if not isinstance(expr, ast.Name):
            return None
        values = list(self.assignments.get(expr.id, ()))
        values += [item.context_expr for stmt in self.body for node in ast.walk(stmt)
                   if isinstance(node, (ast.With, ast.AsyncWith)) for item in node.items
                   if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == expr.id]
        calls = [self._temp_build_directory(v) if not isinstance(v, ast.Name) else None for v in values]
        return [c for found in calls for c in found] if values and None not in calls else None

    def _judge_build_folder_creation(self, value: ast.AST) -> None:
        """`os.makedirs(BUILD, exist_ok=True)` / `BUILD.mkdir()` (and `os.path.isdir(BUILD)` before it) of the folder
        given as `build_directory`, where that folder is the solution's own (next to `__file__`) or a tempfile one:
        load()/load_inline() write into it and do not create it. Making any other folder stays a file_cache finding."""
        folder = _unwrap_path(value, self._resolve)
        if not self._private_folder(folder, 0):
            return
        key = ast.dump(folder)
        for node in (n for stmt in self.body for n in ast.walk(stmt)):
            if not isinstance(node, ast.Call):
                continue
            if self._resolve(node.func) in _MAKE_FOLDER_FUNCTIONS:
                target = node.args[0] if node.args else next(
                    (k.value for k in node.keywords if k.arg in ("name", "path")), None)
            elif isinstance(node.func, ast.Attribute) and node.func.attr in ("mkdir", "exists", "is_dir"):
                target = node.func.value
            else:
                continue
            if target is not None and ast.dump(_unwrap_path(target, self._resolve)) == key:
                self.judged.add(id(node.func))

    def _private_folder(self, expr: ast.AST, depth: int) -> bool:
        """A folder of this build alone: a tempfile one, or a path built from `__file__` with relative literals
        only (every name in it bound only to such values)."""
        if depth > _MAX_DEPTH:
            return False
        if self._temp_build_directory(expr) is not None:
            return True
        if any(isinstance(n, ast.Constant) and isinstance(n.value, str)
               and (n.value.startswith(("/", "~")) or ".." in re.split(r"[/\\]", n.value)) for n in ast.walk(expr)):
            return False
        reaches_file = False
        for name in (n for n in ast.walk(expr) if isinstance(n, ast.Name)):
            if name.id == "__file__":
                reaches_file = True
            elif name.id in self.assignments:
                if not all(self._private_folder(v, depth + 1) for v in self.assignments[name.id]):
                    return False
                reaches_file = True
        return reaches_file

    def _check_build_flag(self, node: ast.Constant, function: str, rules: tuple) -> None:
        flag = node.value
        for rule, pattern, what in rules:
            if pattern.search(flag):
                self._embedded_hit(rule, node, f"{function}() build flag `{flag[:80]}` {what}")

    # ---- following a string expression to its literal pieces

    def _string_nodes(self, expr: ast.AST, depth: int = 0,
                      seen: frozenset[str] = frozenset()) -> Iterator[ast.Constant]:
        """The string literals whose text can end up in the value of `expr`: through names assigned anywhere in
        the module (flow-insensitive), containers, operators, method calls on strings (`.format`, `.replace`,
        `"".join(...)`), calls (their arguments, and the return values of the module's own functions)."""
        if depth > _MAX_DEPTH:
            return
        if _str_const(expr) is not None:
            yield expr
        elif isinstance(expr, ast.Name):
            if expr.id in seen:
                return
            for value in self.assignments.get(expr.id, ()):
                yield from self._string_nodes(value, depth + 1, seen | {expr.id})
        elif isinstance(expr, ast.Call):
            parts = [expr.func.value] if isinstance(expr.func, ast.Attribute) else []
            parts += [*expr.args, *(k.value for k in expr.keywords)]
            for part in parts:
                yield from self._string_nodes(part, depth + 1, seen)
            if isinstance(expr.func, ast.Name) and expr.func.id not in seen:
                for function in self.module_functions.get(expr.func.id, ()):
                    for stmt in ast.walk(function):
                        if isinstance(stmt, ast.Return) and stmt.value is not None:
                            yield from self._string_nodes(stmt.value, depth + 1, seen | {expr.func.id})
        elif isinstance(expr, (ast.List, ast.Tuple, ast.Set, ast.BinOp, ast.IfExp, ast.JoinedStr, ast.FormattedValue,
                               ast.Starred, ast.Subscript, ast.Dict, ast.BoolOp)):
            for child in ast.iter_child_nodes(expr):
                yield from self._string_nodes(child, depth + 1, seen)

    # ---- scanning one string as C++

    def _scan_cpp_string(self, node: ast.Constant, what: str) -> None:
        self.embedded.add(id(node))
        text = node.value
        exact = self._lines_match(node, text)
        hits = scan_cpp(text, self.policy)
        for hit in hits:
            if exact:
                line = node.lineno + hit.line - 1
                col = hit.col if hit.line > 1 else node.col_offset + hit.col
            else:
                line, col = node.lineno, node.col_offset + 1
            self.hits.append(_Hit(hit.rule, line, col, f"C++ source in {what}: {hit.message}"))
        # What a Python string is checked for, outside the C++ comments (a string does not escape the Python
        # checks by looking like C++): environment markers and shared temp paths.
        code = _strip_cpp(text)[1]
        found = {hit.rule for hit in hits}
        marker = _ENV_MARKER_RE.search(code)
        if marker and "env_probe" not in found and "native_ffi" not in found:
            self._embedded_hit("env_probe", node,
                               f"string mentions `{marker.group(0).strip(_QUOTES_AND_SPACE)}`")
        if _TEMP_PATH_RE.search(code) and "file_cache" not in found:
            self._embedded_hit("file_cache", node, f"string names a shared temp/cache path ({text[:60]!r})")

    @staticmethod
    def _lines_match(node: ast.Constant, text: str) -> bool:
        """True when the literal spans as many lines as its text (no escaped newlines such as "a\\nb"), so a line
        of the text can be reported at its own line of the .py file."""
        end = getattr(node, "end_lineno", None)
        return end is not None and end - node.lineno == text.count("\n")

    def _embedded_hit(self, rule: str, node: ast.AST, what: str) -> None:
        self.hits.append(_Hit(rule, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1,
                              f"{what}: {_WHY[rule]}"))
