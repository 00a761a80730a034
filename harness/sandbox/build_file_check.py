"""What a ninja build file may hold when a library's extension builder starts ``ninja`` in the worker.

ninja runs each command through ``/bin/sh -c``, and no audit hook sees the shell's children. PyTorch's, TVM-FFI's and
FlashInfer's builders write the candidate's flags, paths and names into the file as they are, so a flag can carry
shell syntax (red team round 10: a command in backticks in `extra_cflags`) or, with a newline, whole ninja statements
of its own (round 10b: a `rule` whose `command` was the candidate's). The file is read before ninja starts
(``harness.sandbox.process_log``) and refused unless it has the shape those builders write:
- rules and build statements of theirs only (``compile``, ``cuda_compile``, ``link``...), no ``include``/``subninja``;
- commands made of ``$variables`` and options, besides the few programs the builders name themselves (``ld``, ``cp``,
  this Python);
- the program variables (``cxx``, ``nvcc``...) a compiler of a known name;
- no shell syntax anywhere, and none of the compiler options that run another program (``-wrapper``, ``-fplugin``,
  ``-B``, ``-ccbin``...).
"""

from __future__ import annotations

import os
import re
import shlex
import sys

_RULES = frozenset({"compile", "cuda_compile", "sycl_compile", "c_compile", "compile_cuda", "cuda_devlink",
                    "sycl_devlink", "link", "cuda_link", "nvcc_link", "merge_objects", "copy_object", "embed_cubin",
                    "phony"})
_RULE_KEYS = frozenset({"command", "depfile", "deps", "description", "restat", "generator", "msvc_deps_prefix"})
_PROGRAM_VARIABLES = frozenset({"cxx", "cc", "nvcc", "sycl", "cxx_launcher", "nvcc_launcher", "hipcc"})
_COMPILERS = frozenset({"", "c++", "g++", "gcc", "cc", "clang", "clang++", "nvcc", "hipcc", "icpx", "icx", "ccache",
                        "sccache", "cl"})
# where a compiler named by path may live: the system's and the toolkit's folders (read-only in the sandbox); a program
# of the candidate's own (its home, /tmp) is not a compiler, whatever it is called
_SYSTEM_FOLDERS = ("/usr/", "/opt/", "$cuda_home/")
_VERSION = re.compile(r"-\d+(?:\.\d+)*$")  # g++-12, clang++-18
_LITERAL_WORDS = frozenset({"ld", "cp", sys.executable, os.path.realpath(sys.executable), "tvm_ffi.utils.embed_cubin"})
# `$$` is ninja's `$`: `$$(...)` reaches the shell as `$(...)` (the static gate's build-flag rule reads it too)
SHELL_SYNTAX = re.compile(r"`|\$\$|\$\(|[;|&<>\n]")
_RUNS_A_PROGRAM = re.compile(r"(?:^|\s)(?:-wrapper|-fplugin|-B(?=$|\s|[/.~])|-?-specs)\b")
# nvcc's host compiler (torch passes `-ccbin $CC` where CC is set): a compiler of a known name only
_HOST_COMPILER = re.compile(r"(?:^|\s)(?:-ccbin|--compiler-bindir)(?:\s+|=)(\S+)")
_RULE_OF_BUILD = re.compile(r"(?<!\$):\s*(\S+)")  # `build OUT: RULE IN`, a path's colon escaped as `$:`
_BINDING = re.compile(r"^(\s*)([A-Za-z_][\w.-]*)\s*=\s?(.*)$")


def _known_compiler(program: str) -> bool:
    named = _VERSION.sub("", os.path.basename(program)) in _COMPILERS
    return named and ("/" not in program or program.startswith(_SYSTEM_FOLDERS))


def _known_programs(value: str) -> bool:
    """A program variable's value: compilers of known names, a cache in front (torch writes `cxx = ccache c++` where
    ccache is installed), quoted as a shell splits them."""
    try:
        return all(map(_known_compiler, shlex.split(value)))
    except ValueError:
        return False


def _logical_lines(text: str) -> list[str]:
    """Lines with ninja's `$` line continuations joined."""
    lines: list[str] = []
    pending = ""
    for line in text.splitlines():
        if line.endswith("$") and not line.endswith("$$"):
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    return lines + ([pending] if pending else [])


def _command_problem(command: str) -> str:
    for word in command.split():
        if not (word.startswith("-") or "$" in word or word in _LITERAL_WORDS):
            return f"runs `{word}`"
    return ""


def problem(text: str) -> str:
    """Why a build file is not one a library's builder writes (the first offending line, shortened), or ""."""
    block = ""  # the statement indented lines belong to: "rule" or "build"
    for line in _logical_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        why = ""
        if SHELL_SYNTAX.search(line):
            why = "shell syntax"
        elif _RUNS_A_PROGRAM.search(line) or not all(map(_known_compiler, _HOST_COMPILER.findall(line))):
            why = "a compiler option that runs another program"
        elif not line[0].isspace():
            word, _, rest = stripped.partition(" ")
            if word == "rule":
                block, why = "rule", "" if rest.strip() in _RULES else "a rule of its own"
            elif word == "build":
                block = "build"
                rule = _RULE_OF_BUILD.search(rest)
                why = "" if rule and rule[1] in _RULES else "a build statement of its own"
            elif word in ("include", "subninja", "pool"):
                why = f"`{word}`"
            elif word == "default":
                block = ""
            else:
                block = ""
                binding = _BINDING.match(line)
                if binding is None:
                    why = "a line no builder writes"
                elif binding[2] in _PROGRAM_VARIABLES and not _known_programs(binding[3]):
                    why = "a program that is no known compiler"
        else:
            binding = _BINDING.match(line)
            if binding is None or not block:
                why = "a line no builder writes"
            elif binding[2] == "command":
                why = _command_problem(binding[3]) if block == "rule" else "a command of a build statement's own"
            elif block == "rule" and binding[2] not in _RULE_KEYS:
                why = f"a rule binding `{binding[2]}`"
        if why:
            return f"{why}: `{stripped[:120]}`"
    return ""
