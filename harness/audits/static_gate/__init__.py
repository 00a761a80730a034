"""Static gate: scan a candidate solution's sources before anything is built or imported.

The gate is the first and cheapest stage of the pipeline: a source scan costs milliseconds, so a candidate that
openly tampers with the harness is refused before any build, GPU time or audit is spent on it.
It reads source text only: nothing here imports, compiles or runs candidate code. It does not prove a
candidate honest (token pasting, getattr chains and string building can hide almost anything from a
source scan); the artifact checks and the runtime audits do that. Its job is to stop in ~milliseconds what
only a source scan can see (timer tampering, threads, environment and file probing, identity-keyed caches,
monkeypatching, tensor subclasses, harness internals, dynamic code, streams) and to tell the author exactly
which line is the problem.

What the run time proves is left to it. Library and PyTorch compute (LIBRARY_RULES: torch_compute,
library_fallback) is a warning on every layer of the shipped policy: the CUPTI records of the official timer
attribute each workload's GPU time to the candidate's own kernels or to library kernels, and the promotion
gate (harness/audits/verdicts.py) clears, confirms or blocks such a warning by that attribution (`awaits_attribution`).

Public API (pure functions; the only I/O is reading the YAML policy in `load_policy`):

    policy = load_policy("definitions/audit_policy.yaml", definition=..., op_type=...)
    findings = scan_sources({"main.py": src}, "triton", policy)
    gate_passed(findings)   # True iff no finding has severity "error"

Modules: `policy` (rule catalogue, YAML policy, findings), `python` (the Python/Triton scanner, with
`python_references` for imports, name/attribute loads and stores into imported modules, `python_state` for
caches/memoisation/globals, `python_calls` for setattr/getattr/open() and method calls, `python_env` for one
environment variable read or written by name, `python_modules` for names through the solution's own modules and
main guards that never run, `python_device_lib` and `python_self_aliases` for FLA's device module by name and its
flags' aliases, and `embedded` for C++ held in strings and the torch.utils.cpp_extension build path),
`cpp` (the C/C++/CUDA scanner), `python_names` and `common` (tables).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from .common import _TORCH_NAMESPACES, SNIPPET_MAX_CHARS, _Hit, _snippet
from .cpp import scan_cpp
from .cpp_aten import PAST_DISPATCHER_NOTE, defined_functions
from .python_reach import never_imported
from .policy import (
    ALLOW_LIST_NAMES,
    DECLARED_LIBRARY_NOTE,
    DEFAULT_POLICY_PATH,
    LIBRARY_RULES,
    RULES,
    Finding,
    GatePolicy,
    PolicyError,
    RuleSetting,
    RuleSpec,
    Severity,
    _CompiledPolicy,
    awaits_attribution,
    builtin_policy,
    declared_library,
    in_a_file_never_imported,
    gate_passed,
    load_policy,
    policy_from_mapping,
)
from .python import _finish_python, _prepare_python, _PythonScanner
from .python_device_lib import confirm_device_libraries
from .python_self_aliases import confirm_self_aliases
from .python_fields import collect_own_classes
from .python_modules import _absolute, _OwnNames, main_blocks_never_run, module_of

PYTHON_SUFFIXES = frozenset({".py", ".pyi"})
CPP_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hh", ".hpp", ".hxx", ".inl", ".inc"})
# Files that are data or prose. In a CUDA/C++ solution any other file could be pulled in by #include,
# so unknown suffixes are scanned as C++ there; these few are skipped to avoid noise from prose.
DOCUMENT_SUFFIXES = frozenset({".md", ".txt", ".rst", ".json", ".yaml", ".yml", ".toml"})
CPP_LANGUAGES = frozenset({"cuda", "cpp", "c++"})

_TORCH_LIBRARY_RE = re.compile(r"TORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*(\w+)")
# An op defined in Python (torch.library.custom_op("mylib::x", ...), triton_op, define) is the candidate's own too.
_PYTHON_OP_RE = re.compile(r"\b(?:custom_op|triton_op|define)\s*\(\s*[rR]?[\"'](\w+)::")
# torch.library.Library("mylib", "DEF") / "FRAGMENT": its lib.define("op(...)") ops are torch.ops.mylib.op
_PYTHON_LIBRARY_RE = re.compile(r"\bLibrary\s*\(\s*(?:ns\s*=\s*)?[rR]?[\"'](\w+)[\"']\s*,\s*(?:kind\s*=\s*)?"
                                r"[\"'](?:DEF|FRAGMENT)[\"']")


@functools.cache
def _real_modules() -> frozenset[str]:
    """Top-level names an absolute import reaches outside the solution (the standard library, installed packages):
    the solution is imported as a package, so its own `torch.py` or `time/` is reached only relatively, and a
    name of theirs is never its own."""
    import importlib.metadata
    import sys

    return frozenset(sys.stdlib_module_names) | frozenset(importlib.metadata.packages_distributions())


def _own_names(sources: Mapping[str, str], code: Mapping[str, str]) -> _OwnNames:
    """The solution's own Python modules, the torch op namespaces it registers (in C++ files, in C++ held in Python
    strings for load_inline, with torch.library in Python), and whether its main guards never run (judged on the
    files that are code, `code`)."""
    modules, prefixes, shadows = set(), set(), False
    for path, text in sources.items():
        p = Path(path)
        if p.suffix in PYTHON_SUFFIXES:
            parts = p.with_suffix("").parts
            if parts and parts[0] not in _real_modules():  # `import torch` is torch, whatever torch.py it ships
                modules.add(parts[0])
            shadows = shadows or bool(parts and parts[0] in _real_modules())
            if "::" in text:
                prefixes.update(f"torch.ops.{ns}." for ns in _PYTHON_OP_RE.findall(text) if ns not in _TORCH_NAMESPACES)
            if "Library" in text:
                prefixes.update(f"torch.ops.{ns}." for ns in _PYTHON_LIBRARY_RE.findall(text)
                                if ns not in _TORCH_NAMESPACES)
        if "TORCH_LIBRARY" in text:
            prefixes.update(f"torch.ops.{ns}." for ns in _TORCH_LIBRARY_RE.findall(text) if ns not in _TORCH_NAMESPACES)
    return _OwnNames(frozenset(modules), tuple(sorted(prefixes)), main_blocks_inert=main_blocks_never_run(code),
                     shadows=shadows, sources=dict(sources))


def _collect_exports(own: _OwnNames, scanners: Mapping[str, _PythonScanner]) -> None:
    """What each of the solution's modules aliases (its imports, `T = torch`), and what other modules assign into
    it (`helpers.T = torch`): a name reached through the module is that (python_modules.canonical)."""
    for path, scanner in scanners.items():
        module, package = module_of(path)
        own.packages[module] = package
        own.exports[module] = dict(scanner.aliases)
    for scanner in scanners.values():
        for target, value in scanner.attribute_stores:
            where, resolved = scanner._resolve(target.value), scanner._resolve(value)
            where = _absolute(where, scanner.package) if where is not None else None
            if where is not None and resolved is not None and where in own.exports:
                own.exports[where].setdefault(target.attr, resolved)


def _source_kind(path: str, language: str, builds_native: bool) -> str | None:
    suffix = Path(path).suffix.lower()
    if suffix in PYTHON_SUFFIXES:
        return "python"
    if suffix in CPP_SUFFIXES:
        return "cpp"
    if suffix in DOCUMENT_SUFFIXES:
        return None
    # Unknown suffix: C/C++ can #include any file, Python can only import .py files (other routes, such
    # as reading a file and exec-ing it, are flagged where they happen). A Python solution that builds C++
    # with torch.utils.cpp_extension is a C++ solution too.
    return "cpp" if builds_native or language.lower() in CPP_LANGUAGES else None


_INCLUDE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*include[ \t]*(?:[\"<]([^\">\n]+)[\">]|([A-Za-z_]\w*))", re.MULTILINE)


def included_files(sources: Mapping[str, str]) -> set[str]:
    """Files of the solution that an `#include` of any of its texts may name (C++ files, C++ held in Python strings),
    whatever their suffix: `#include "helper.py"` compiles that file as C++. An include by a macro's name
    (`#include HEADER`) may name any file: then every file."""
    names: set[str] = set()
    for path, text in sources.items():
        for m in _INCLUDE.finditer(text):
            if m.group(2) and Path(path).suffix.lower() in CPP_SUFFIXES:  # (in Python, `# include the bias`)
                return set(sources)
            if m.group(2):
                continue
            names.add(PurePosixPath(m.group(1).strip().replace("\\", "/")).name)
    return {path for path in sources if PurePosixPath(path.replace("\\", "/")).name in names}


MAX_FINDINGS_PER_RULE = 50
MAX_SOURCE_CHARS = 4 << 20  # characters of one file the gate reads (red team round 8: 10.8 MB read in 126 s)


def scan_sources(sources: Mapping[str, str], language: str, policy: GatePolicy) -> list[Finding]:
    """Scan every source file of one solution; return findings sorted by (path, line, col, rule).

    `sources` maps a path inside the solution to its text. `.py` files get the Python/Triton rules and C/C++/CUDA
    files the token rules whatever `language` says (a CUDA solution may ship a Python wrapper and vice versa);
    C++ held in Python strings (load_inline sources, other C++-looking strings) gets the C++ rules at the string's
    line. `language` ("python", "triton", "cuda", "cpp") decides how files with unknown suffixes are treated.
    Disabled rules are dropped and severities come from `policy`. One finding per (rule, path, line, col), and at
    most MAX_FINDINGS_PER_RULE per rule and file before one that counts the rest (``capped``).
    """
    too_large = {path: len(text) for path, text in sources.items() if len(text) > MAX_SOURCE_CHARS}
    if too_large:  # not read: the gate's time grows with the text (a 10.8 MB file of calls took 126 s)
        sources = {path: "" if path in too_large else text for path, text in sources.items()}
    compiled = _CompiledPolicy.of(policy)
    builds_native = any(Path(p).suffix in PYTHON_SUFFIXES and "cpp_extension" in text for p, text in sources.items())
    kinds = {path: _source_kind(path, language, builds_native) for path in sources}
    code = {path: text for path, text in sources.items() if kinds[path] is not None}
    own = _own_names(sources, code)
    # Two passes over the Python files: every module's aliases first, so that a name reached through another of
    # the solution's modules resolves to what that module imported.
    prepared = {path: _prepare_python(source, own, compiled, module_of(path)[1])
                for path, source in sources.items() if kinds[path] == "python"}
    scanners = {p: s for p, s in prepared.items() if isinstance(s, _PythonScanner)}
    _collect_exports(own, scanners)
    confirm_device_libraries(scanners, code)  # a device module looked up by name, kept only where no file undoes it
    confirm_self_aliases(scanners, code)  # FLA's flags' aliases, likewise
    collect_own_classes(own, scanners)  # `shapes.topk` of a class another module defines (python_fields)
    findings: dict[tuple[str, int, int, str], Finding] = {}
    defined = defined_functions(code.values())  # a helper named like ATen's (`softmax`) in another file: its own
    included = included_files(sources)  # compiled as C++ where an #include names it, whatever its suffix
    for path, source in sources.items():
        kind = kinds[path]
        if kind is None and path not in included:
            continue
        elsewhere = "\n".join(text for other, text in code.items() if other != path) if kind != "python" else ""
        hits: list[_Hit] = (_finish_python(prepared[path]) if kind == "python"
                            else scan_cpp(source, compiled, path, defined, elsewhere) if kind == "cpp" else [])
        if path in included and kind != "cpp":
            hits += scan_cpp(source, compiled, path, defined, "\n".join(t for p, t in code.items() if p != path))
        lines = source.splitlines()
        for hit in hits:
            setting = policy.setting(hit.rule)
            if not setting.enabled:
                continue
            key = (path, hit.line, hit.col, hit.rule)
            severity = setting.severity
            if severity == "warning" and hit.rule == "torch_compute" and PAST_DISPATCHER_NOTE in hit.message:
                severity = "error"  # no run-time attribution can settle it (cpp_aten)
            if key not in findings:
                findings[key] = Finding(rule=hit.rule, severity=severity, path=path, line=hit.line,
                                        col=hit.col, message=hit.message, snippet=_snippet(lines, hit.line))
    for path, size in too_large.items():
        findings[(path, 1, 1, "dynamic_code")] = Finding(
            rule="dynamic_code", severity="error", path=path, line=1, col=1, snippet="",
            message=f"{size / (1 << 20):.1f} MiB of source, more than the {MAX_SOURCE_CHARS >> 20} MiB per file the "
                    "gate reads: code the gate cannot read is rejected")
    return capped([findings[key] for key in sorted(findings)])


def unreadable(path: str, exc: BaseException) -> Finding:
    """The one finding of a solution the gate could not finish reading: code it cannot read is not judged."""
    return Finding(rule="dynamic_code", severity="error", path=path, line=1, col=1, snippet="",
                   message=f"the static gate could not finish reading this solution ({type(exc).__name__}: "
                           f"{str(exc)[:200]}): code the gate cannot read is rejected")


def capped(findings: list[Finding], most: int = MAX_FINDINGS_PER_RULE) -> list[Finding]:
    """At most ``most`` findings of one rule in one file, then one that counts the rest, at the severity of the
    worst of them: the archive keeps every solution's findings, and a file of 400,000 library calls made a
    234 MB reply (red team round 8). Which rules a file breaks, and where first, stays exact."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.path, f.rule), []).append(f)
    out = []
    for (path, rule), group in groups.items():
        out += group[:most]
        rest = group[most:]
        if rest:
            severity = "error" if any(f.severity == "error" for f in rest) else rest[0].severity
            out.append(rest[0].model_copy(update={
                "severity": severity,
                "message": f"and {len(rest):,} more `{rule}` findings in {path} from this line on, not listed one by "
                           f"one (the first {most} are): {rest[0].message}"}))
    return sorted(out, key=lambda f: (f.path, f.line, f.col, f.rule))


__all__ = [
    "ALLOW_LIST_NAMES",
    "CPP_LANGUAGES",
    "CPP_SUFFIXES",
    "DECLARED_LIBRARY_NOTE",
    "in_a_file_never_imported",
    "never_imported",
    "DEFAULT_POLICY_PATH",
    "DOCUMENT_SUFFIXES",
    "LIBRARY_RULES",
    "PYTHON_SUFFIXES",
    "RULES",
    "SNIPPET_MAX_CHARS",
    "Finding",
    "GatePolicy",
    "PolicyError",
    "RuleSetting",
    "RuleSpec",
    "Severity",
    "awaits_attribution",
    "builtin_policy",
    "declared_library",
    "gate_passed",
    "load_policy",
    "policy_from_mapping",
    "scan_sources",
    "unreadable",
]
