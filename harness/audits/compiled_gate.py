"""The static gate's C++ rules on the sources a build actually compiled (harness side; reads text only).

A ``load_inline`` source decoded at run time (through a helper's parameter, base64, rot13, a data file) cannot be
folded by the gate from the Python; the worker reads back what the builders wrote and compiled after the import
(``harness.sandbox.compiled_sources``) and this module judges that text with the same rules (``cpp.scan_cpp``, the
severities and allow-lists of the same policy) as a C++ file the solution ships. It runs in the harness's process and
executes nothing: the text is only matched against the rules.

Honest extensions must pass as they do at the gate: the parts the builders generate (torch's
``#include <torch/extension.h>`` and the ``PYBIND11_MODULE`` block that ``load_inline(functions=...)`` appends,
TVM-FFI's export macros) are torch's or TVM-FFI's, never the candidate's, so the binding block is left out before the
rules run (its ``torch::wrap_pybind_function`` would read as ATen compute). A file whose text is one the solution
ships (``load(sources=[its own .cu])``), and a finding the gate already made at the source's own line, are not
reported twice. A source a build compiled and the worker could not read back (removed after the build, past the
bounds) is ``dynamic_code``: what was compiled cannot be cleared unread.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .static_gate import Finding, GatePolicy, declared_library
from .static_gate.common import _snippet
from .static_gate.cpp import scan_cpp
from .static_gate.cpp_aten import defined_functions
from .static_gate.policy import _CompiledPolicy

# The block load_inline appends for `functions=`: torch.utils.cpp_extension.load_inline writes exactly these lines.
_BINDING_OPEN = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"
_BINDING_DEF_RE = re.compile(
    r'm\.def\("(?P<name>\w+)", (?:torch::wrap_pybind_function\((?P<wrapped>\w+)\)|(?P<plain>\w+)), "[^"\n]*"\);')
_WHAT = "compiled by the build (read back after the import)"
_UNREAD = ": the gate cannot read what the build compiled, so it cannot clear it"


def without_generated_binding(text: str) -> str:
    """``text`` with torch's generated ``PYBIND11_MODULE`` block (the file's last lines, as load_inline writes them)
    blanked, line numbers kept; anything else after its opening line leaves the text as it is."""
    lines = text.split("\n")
    try:
        start = len(lines) - 1 - lines[::-1].index(_BINDING_OPEN)
    except ValueError:
        return text
    body = lines[start + 1:]
    if not body or body[-1] != "}":
        return text
    for line in body[:-1]:
        m = _BINDING_DEF_RE.fullmatch(line)
        if m is None or m.group("name") != (m.group("wrapped") or m.group("plain")):
            return text
    return "\n".join(lines[:start] + [""] * (len(lines) - start))


def _with_defines(text: str, defines: Mapping[str, str]) -> str:
    """The build's ``-D`` macros put in at each use (the gate does the same with a load_inline call's flags)."""
    for name, body in defines.items():
        body = body.replace("\n", " ")
        text = re.sub(rf"\b{re.escape(name)}\b", lambda _m, body=body: body, text)
    return text


def _already_found(rule: str, message: str, earlier: Iterable[Mapping[str, Any]]) -> bool:
    """The gate reported this hit at the source's own line (a literal load_inline string: its message is the C++
    rule's, behind the place it was found)."""
    return any(f.get("rule") == rule and str(f.get("message", "")).endswith(message) for f in earlier)


def compiled_findings(files: Sequence[Mapping[str, Any]], unread: Sequence[str], shipped: Mapping[str, str],
                      policy: GatePolicy, earlier: Sequence[Mapping[str, Any]] = (),
                      library_is_own: bool = False) -> list[Finding]:
    """The static gate's findings on what a build compiled. ``files``: ``{"path", "text", "defines"}`` each (as the
    worker read them); ``unread``: what it could not read; ``shipped``: the solution's own files (path -> text);
    ``earlier``: the gate's findings on the solution (as archived dicts); ``library_is_own``: as the gate's."""
    compiled = _CompiledPolicy.of(policy)
    own_texts = {text.strip() for text in shipped.values()}
    # helpers named like ATen's functions (`__device__ float silu(...)`) that the solution or the build defines in
    # another file are its own, as at the gate
    defined = defined_functions([*shipped.values(), *(str(entry.get("text", "")) for entry in files)])
    findings: dict[tuple[str, int, int, str], Finding] = {}

    def add(rule: str, path: str, line: int, col: int, message: str, lines: list[str]) -> None:
        setting = policy.setting(rule)
        if setting.enabled and (path, line, col, rule) not in findings:
            findings[(path, line, col, rule)] = Finding(rule=rule, severity=setting.severity, path=path, line=line,
                                                        col=col, message=message, snippet=_snippet(lines, line))

    for entry in files:
        path, text = str(entry.get("path", "?")), str(entry.get("text", ""))
        defines = {str(k): str(v) for k, v in dict(entry.get("defines") or {}).items()}
        judged = _with_defines(without_generated_binding(text), defines)
        lines = judged.splitlines()
        # a file the solution ships was judged by the gate, unless the build's macros change what it compiles
        if not (text.strip() in own_texts and judged == text):
            for hit in scan_cpp(judged, compiled, defined=defined):
                if not _already_found(hit.rule, hit.message, earlier):
                    add(hit.rule, path, hit.line, hit.col, f"{_WHAT}: {hit.message}", lines)
        for name, body in defines.items():  # `-DCALL=system`: every `CALL(...)` of the source is a call of system
            for hit in scan_cpp(f"{body}(0);", compiled):
                if not _already_found(hit.rule, hit.message, earlier):
                    add(hit.rule, path, 1, 1, f"the macro {name} of the build's flags: {hit.message}", lines)
    for why in unread:
        if _already_found("dynamic_code", why + _UNREAD, earlier):
            continue
        add("dynamic_code", why.split(" ", 1)[0], 1, 1,
            why + _UNREAD, [why])
    result = [findings[key] for key in sorted(findings)]
    return [declared_library(f) for f in result] if library_is_own else result
