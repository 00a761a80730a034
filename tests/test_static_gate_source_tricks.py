"""Static gate: code the compiler or the interpreter reads that the gate did not (red-team round, 2026-12-05).

- Python: the gate parsed each source as the text it is, but Python decodes the file with its PEP 263 coding
  declaration: under ``# coding: utf-7`` the comment ``# +AAo-import gc`` is a newline and an import. A solution
  using gc, inspect or anything else passed the gate with no finding (run through the harness: PASSED, promotable).
- C++: a call written without its name, through a macro (``#define S system``) or a function pointer
  (``&system``), was not one; a backslash-newline ends a comment the gate kept open (``*\\`` + newline + ``/``), joins a name (``sys\\`` +
  newline + ``tem``) or a directive; a digit separator (``1'000``) read as a character literal blanked the code up to
  the next quote; ``##`` pasted a name (``CAT(sys, tem)``) no token of the file spells.
"""

from __future__ import annotations

import pytest

from static_gate_support import describe, scan_cpp, scan_py

HIDDEN_PY = {
    "utf7": "# coding: utf-7\nx = 1\n# +AAo-import gc as _g+ADs-n = len(_g.get_objects())\n",
    "unicode_escape": "# -*- coding: unicode_escape -*-\nx = 1\n# \\nimport gc\n",
    "latin1": "#!/usr/bin/env python\n# vim: set fileencoding=latin-1 :\nx = 1\n",
    "unknown": "# coding: no-such-codec\nx = 1\n",
}


@pytest.mark.parametrize("name", sorted(HIDDEN_PY))
def test_a_source_encoding_other_than_utf8_is_refused(policy, name):
    findings = scan_py(HIDDEN_PY[name], policy)
    assert any(f.rule == "syntax" and f.severity == "error" for f in findings), describe(findings)


@pytest.mark.parametrize("cookie", ["", "# -*- coding: utf-8 -*-\n", "# vim: set fileencoding=utf8 :\n",
                                    "#!/usr/bin/env python3\n# coding=UTF-8\n"])
def test_utf8_declarations_are_fine(policy, cookie):
    findings = scan_py(cookie + "import torch\n\n\ndef run(q):\n    return q\n", policy)
    assert not [f for f in findings if f.severity == "error"], describe(findings)


HIDDEN_CPP = {
    "comment_ended_by_a_splice": ('/* harmless *\\\n/ int x = system("sleep 100"); /* */\nvoid run() {}\n',
                                  "concurrency", 1),
    "name_joined_by_a_splice": 'void run() {\n  int z = sys\\\ntem("a");\n}\n',
    "directive_joined_by_a_splice": ('#inc\\\nlude "/etc/passwd"\n', "harness_internals", 1),
    "pragma_joined_by_a_splice": "#pragma o\\\nmp parallel\nvoid f() {}\n",
    "digit_separators": "int n = 1'000;\nint z = system(\"a\");\nint m = 2'0;\n",
    "pasted_name": '#define CAT(a, b) a##b\nint z = CAT(sys, tem)("a");\n',
    "pasted_through_a_second_macro": ('#define CAT(a, b) a ## b\n#define CALL(x, y) CAT(x, y)\n'
                                      'int z = CALL(sys, tem)("a");\n', "concurrency", 3),
    "pasted_object_macro": '#define S sys##tem\nint z = S("a");\n',
    "pasted_stream": ('#define C(a) cuda##a\nvoid f() { cudaStream_t s; C(StreamCreate)(&s); }\n',
                      "stream_event_graph", 2),
    "macro_alias": ('#define S system\nvoid f() { S("a"); }\n', "concurrency", 1),
    "macro_argument": ('#define RUN(f, x) f(x)\nvoid g() { RUN(system, "a"); }\n', "concurrency", 2),
    "function_pointer": 'int (*p)(const char*) = &system;\nvoid g() { p("a"); }\n',
    "using_declaration": "using std::system;\n",
    "syscall_pointer": ('auto s = syscall;\n', "harness_internals", 1),
}


@pytest.mark.parametrize("name", sorted(HIDDEN_CPP))
def test_what_the_compiler_reads_is_what_is_scanned(policy, name):
    case = HIDDEN_CPP[name]
    source, rule, line = case if isinstance(case, tuple) else (case, "concurrency", None)
    findings = scan_cpp(source, policy)
    hits = [f for f in findings if f.rule == rule and f.severity == "error"]
    assert hits, describe(findings)
    assert line is None or hits[0].line == line, describe(findings)


def test_honest_macros_continuations_and_separators(policy):
    source = ("#define KNAME(n) n##_kernel\n"
              "#define CHECK(x, ...) do { if (!(x)) printf(\"bad\" , ##__VA_ARGS__); } while (0)\n"
              "#define CONCAT_(a, b) a##b\n#define CONCAT(a, b) CONCAT_(a, b)\n"
              "#define LAUNCH(k, g, b) \\\n  k<<<g, b>>>(out)\n"
              "__global__ void KNAME(gqa)(float* out) { out[0] = 1'000.5f; }\n"
              "void f(float* out) { int CONCAT(tmp_, __LINE__) = 0; CHECK(1 > 0, 3); LAUNCH(gqa_kernel, 1, 32); }\n"
              "char c = '\\''; int n = 0x7FFF'FFFF;\n")
    findings = scan_cpp(source, policy)
    assert not [f for f in findings if f.severity == "error"], describe(findings)


def test_a_finding_after_continued_lines_keeps_its_line(policy):
    source = "#define LAUNCH(k) \\\n  k<<<1, 32>>>()\n\nvoid f() {\n  system(\"x\");\n}\n"
    hits = [f for f in scan_cpp(source, policy) if f.rule == "concurrency"]
    assert [f.line for f in hits] == [5], describe(hits)


# load_inline's sources as compiled: split over literals, computed from an innocent one, or given a -D macro.
BUILT_PY = {
    "split_literals": ('SRC = "int f() { return sys" + "tem(\\"x\\"); }"\n', "concurrency"),
    "format_inserts_a_name": ('SRC = "int f() {{ return {}(\\"x\\"); }}".format("sys" "tem")\n', "concurrency"),
    "rot13": ('import codecs\nSRC = codecs.decode("vag s() { erghea flfgrz(\\"k\\"); }", "rot13")\n', "dynamic_code"),
    "reversed": ('SRC = "};)\\"x\\"(metsys nruter { )(f tni"[::-1]\n', "dynamic_code"),
    "from_bytes": ('SRC = bytes([105, 110, 116]).decode() + " f() { return 0; }"\n', "dynamic_code"),
    "inserted_from_bytes": ('SRC = "int f() {{ return {n}(0); }}".format(n=bytes([115]).decode())\n',
                            "dynamic_code"),
    "define_flag": ('SRC = "int f() { return safe(\\"x\\"); }"\nFLAGS = ["-O3", "-Dsafe=system"]\n', "concurrency"),
}


@pytest.mark.parametrize("name", sorted(BUILT_PY))
def test_load_inline_sources_are_judged_as_compiled(policy, name):
    prelude, rule = BUILT_PY[name]
    flags = "FLAGS" if "FLAGS" in prelude else "[]"
    source = ("from torch.utils.cpp_extension import load_inline\n" + prelude
              + f"mod = load_inline('m', cpp_sources=[SRC], functions=['f'], extra_cflags={flags})\n")
    findings = scan_py(source, policy)
    assert any(f.rule == rule and f.severity == "error" for f in findings), describe(findings)


def test_honest_templates_for_load_inline_still_pass(policy):
    source = ("import os\nimport torch\nfrom torch.utils.cpp_extension import load_inline\n"
              "HEAD_DIM, WARPS = 128, 4\nHERE = os.path.dirname(os.path.abspath(__file__))\n"
              "TEMPLATE = '''\n#include <torch/extension.h>\n__global__ void k(float* o) {{ o[0] = {head_dim}; }}\n'''\n"
              "def build(block):\n"
              "    cuda = TEMPLATE.format(head_dim=HEAD_DIM * 2) + f'\\n// block {block} of {str(WARPS)}\\n'\n"
              "    other = open(os.path.join(HERE, 'kernel.cu')).read()\n"
              "    return load_inline(name=f'k{block}', cpp_sources='', cuda_sources=[cuda, other],\n"
              "                       extra_cuda_cflags=['-O3', f'-DBLOCK={block}'])\n")
    findings = scan_py(source, policy)
    assert not [f for f in findings if f.severity == "error"], describe(findings)


def test_a_define_flag_that_names_a_banned_call_is_judged_for_load_too(policy):
    source = ("from torch.utils.cpp_extension import load\n"
              "mod = load('m', sources=['kernel.cu'], extra_cflags=['-O3', '-Dsafe=system', '-DBLOCK=64'])\n")
    findings = scan_py(source, policy)
    hits = [f for f in findings if f.rule == "concurrency" and f.severity == "error"]
    assert len(hits) == 1 and "safe" in hits[0].message, describe(findings)


@pytest.mark.parametrize("source", [
    "from torch._subclasses.fake_tensor import TorchFunctionMode as _B\n_M = type('M', (_B,), {})\n_M().__enter__()\n",
    "from torch.utils.checkpoint import TorchDispatchMode as _D\nclass M(_D):\n    pass\n",
    "import torch\ntorch._C._push_on_torch_function_stack(object())\n",
])
def test_a_mode_reached_through_a_module_that_reexports_it(policy, source):
    """torch.overrides and torch.utils._python_dispatch were refused by name; their classes re-exported by other torch
    modules (imported with torch) were not (the worker now refuses any mode left active: test_redteam_runtime.py)."""
    import torch  # noqa: F401  (the gate looks re-exports up in the modules the harness has imported)

    findings = scan_py(source, policy)
    assert any(f.rule == "monkeypatch" and f.severity == "error" for f in findings), describe(findings)


def test_allowed_queries_stay_allowed_under_their_real_names(policy):
    import torch  # noqa: F401

    source = ("import torch\ndef run(q):\n    if torch.cuda.is_current_stream_capturing():\n        return q\n"
              "    return torch.empty_like(q)\n")
    assert not [f for f in scan_py(source, policy) if f.severity == "error"]


@pytest.mark.parametrize("source", ["def run(q):\n    setattr(len.__self__, 'isinstance', lambda o, c: True)\n",
                                    "_b = abs.__self__\n_b.__dict__['type'] = 1\n"])
def test_the_builtins_module_through_a_builtins_self(policy, source):
    findings = scan_py(source, policy)
    assert any(f.rule == "harness_internals" and f.severity == "error" for f in findings), describe(findings)


def test_self_of_a_bound_method_is_fine(policy):
    source = "class K:\n    def f(self):\n        return self\n\ndef run(q, k=K()):\n    return k.f.__self__\n"
    assert not [f for f in scan_py(source, policy) if f.severity == "error"]


@pytest.mark.parametrize("header", ["<sys/syscall.h>", "<sys/prctl.h>", "<linux/keyctl.h>", '"fork_join.cuh"'])
def test_a_headers_name_is_no_use_of_the_function_it_is_named_after(policy, header):
    """The rules for a function taken as a value (`auto p = syscall`) read an include line's `syscall.h` as one:
    every honest extension that includes <sys/syscall.h> (for SYS_gettid in a log line) was an error. The header
    itself is judged by the include rules; a real use beside it is still found."""
    source = f"#include {header}\n#include <cstdio>\nint lanes() {{ return 32; }}\n"
    findings = [f for f in scan_cpp(source, policy) if f.severity == "error" and f.line == 1]
    assert not [f for f in findings if f.rule in ("harness_internals", "concurrency")], describe(findings)
    used = scan_cpp(source + "auto p = syscall;\n", policy)
    assert any(f.rule == "harness_internals" and f.line == 4 for f in used), describe(used)
