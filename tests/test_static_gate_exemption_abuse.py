"""Static gate: the hostile side of the exemptions honest contestants' code needs (an env helper called with
literal names, `id()` of the kernel a launcher cache launches, the solution's own files and builds, the TMA
encoder's loader idiom): each sample abuses one and must still be flagged, on its line, with the rule's severity.
The honest side is in test_static_gate_idioms.py and test_static_gate_honest.py."""

from __future__ import annotations

import textwrap

import pytest

from harness.audits.static_gate import RULES

from static_gate_support import describe, scan_cpp, scan_py

PYTHON_ABUSES = [
    # an env helper one of whose calls passes a computed name; a loop over paths outside the solution; a string of
    # something else than the build handed to load_module
    ("env_probe", 3, "import os\ndef e(name):\n    return os.environ.get(name)\ndef run(k):\n"
                     "    return e('MYK_A'), e(k)\n"),
    ("env_probe", 3, "import os\ndef e(name):\n    return os.environ.get(name)\ndef run(k):\n"
                     "    return e('CRUCIBLE_TIMING')\n"),
    ("env_probe", 5, "import os\ndef e(name):\n    match 'PYTEST_CURRENT_TEST':\n        case name: pass\n"
                     "    return os.environ.get(name)\ndef run(k):\n    return e('MYK_A')\n"),
    ("env_probe", 6, "import os\ndef reg(f):\n    return f\n@reg\ndef e(name):\n    return os.environ.get(name)\n"
                     "def run(k):\n    return e('MYK_A')\n"),
    ("file_cache", 5, "import os\nHERE = os.path.dirname(__file__)\nPATHS = ['/tmp/out.bin', '/var/tmp/x']\n"
                      "for p in PATHS:\n    os.path.exists(p)\n"),
    ("native_ffi", 3, "import tvm_ffi\nso = '/tmp/prebuilt.so'\nm = tvm_ffi.load_module(str(so))\n"),
    # red team, round 2: the module's own object rebinds a global or calls a helper (`from . import kernel as me`);
    # a cache filled before a launch that a return skips
    ("native_ffi", 5, "import tvm_ffi, tvm_ffi.cpp\nfrom . import kernel as me\nlib = tvm_ffi.cpp.build('k', "
                      "cpp_files=['k.cpp'])\nme.lib = '/opt/x.so'\nm = tvm_ffi.load_module(lib)\n"),
    ("harness_internals", 5, "import os, sys\nfrom . import kernel as me\nHERE = os.path.dirname(os.path.abspath("
                             "__file__))\nme.HERE = '/opt/site'\nsys.path.insert(0, HERE)\n"),
    ("output_cache", 7, "from . import kernel as me\ndef _cur():\n    pass\n_c = {}\ndef run(q):\n"
                        "    me._cur = q\n    return _c.get(id(_cur))\n"),
    ("output_cache", 3, "_c = {}\ndef f(t, out):\n    _c[id(t)] = out\n    if out is not None:\n        return\n"
                        "    t[(1,)](out)\n"),
    ("env_probe", 4, "import os\nfrom . import kernel as me\ndef _env(name):\n    return os.environ.get(name)\n"
                     "B = _env('MYK_B')\nT = me._env(''.join(reversed('TSET_TNERRUC_TSETYP')))\n"),
    # red team: a parameter, `:=` or a redefined `str` named like the build's result; a parameter named like the
    # solution's folder, put on sys.path or probed
    ("native_ffi", 3, "import tvm_ffi, tvm_ffi.cpp\ndef _load(lib):\n    return tvm_ffi.load_module(lib)\n"
                      "def _build():\n    lib = tvm_ffi.cpp.build('k', cpp_files=['k.cpp'])\n    return lib\n"),
    ("native_ffi", 4, "import tvm_ffi, tvm_ffi.cpp\nlib = tvm_ffi.cpp.build('k', cpp_files=['k.cpp'])\n"
                      "if (lib := '/opt/x.so'):\n    m = tvm_ffi.load_module(lib)\n"),
    ("native_ffi", 4, "import tvm_ffi, tvm_ffi.cpp\ndef str(_):\n    return '/opt/x.so'\n"
                      "m = tvm_ffi.load_module(str(tvm_ffi.cpp.build('k', cpp_files=['k.cpp'])))\n"),
    ("harness_internals", 4, "import os, sys\nHERE = os.path.dirname(os.path.abspath(__file__))\ndef _add(HERE):\n"
                             "    sys.path.insert(0, HERE)\n_add('/opt/site')\n"),
    ("file_cache", 4, "import os\nHERE = os.path.dirname(os.path.abspath(__file__))\ndef _has(HERE):\n"
                      "    return os.path.exists(HERE)\nX = _has('/work/harness/worker.py')\n"),
    ("file_cache", 4, "import os\nHERE = os.path.dirname(__file__)\nup = os.path.join(HERE, '..', 'x')\n"
                      "os.path.exists(up)\n"),
    ("file_cache", 5, "import os\nHERE = os.path.dirname(__file__)\nPATHS = [os.path.join(HERE, '../../etc/x')]\n"
                      "for p in PATHS:\n    os.path.exists(p)\n"),
    # red team: a launch of the tensor no call reaches, a def rebound through `global`, a parameter a visible call
    # hands a def (the harness calls the entry point with tensors), a decorated helper
    ("output_cache", 3, "_c = {}\ndef run(q, out):\n    hit = _c.get(id(q))\n    if q is None:\n        q[0](0)\n"),
    ("output_cache", 9, "def _cur():\n    pass\ndef _set(t):\n    global _cur\n    _cur = t\n_c = {}\n"
                        "def run(q):\n    _set(q)\n    return _c.get(id(_cur))\n"),
    ("output_cache", 3, "_c = {}\ndef run(q, out):\n    return _c.get(id(q))\ndef _k():\n    pass\n"
                        "def _selftest():\n    run(_k, None)\n"),
    ("output_cache", 6, "_c = {}\ndef reg(f):\n    return f\n@reg\ndef look(t):\n    return _c.get(id(t))\n"),
    ("output_cache", 4, "_c = {}\ndef f(fn, q):\n    return 1\n    return _c.get(id(fn)), fn[1](q)\n"),
    # id() of a parameter the function never launches, or of a module name rebound to an input
    ("output_cache", 3, "_l = {}\ndef launch(fn, t):\n    return _l.setdefault(id(t), fn[1](t))\n"),
    ("output_cache", 5, "def f():\n    pass\n_c = {}\ndef run(q):\n    return _c.get(id(f))\nf = None\n"),
    ("output_cache", 5, "def k():\n    pass\n_l = {}\ndef g(fn):\n    return _l.get(id(fn))\ndef run(q):\n"
     "    return g(k) or g(q)\n"),
    ("output_cache", 5, "def k():\n    pass\n_c = {}\ndef run(q, k):\n    return _c.get(id(k))\n"),
]

CPP_ABUSES = [
    # a raw string's line that reads like an include is code: its other tokens are judged
    ("env_probe", 2, 'static const char* b = R"(\n#include "k.cu")"; static const char* t = getenv("PYTEST_X");\n'),
    # the encoder's loader idiom with another library, another symbol, or one more loader call beside it
    ("native_ffi", 2, "void f() {\n  void* h = dlopen(\"/tmp/x.so\", 2);\n  dlsym(h, \"cuTensorMapEncodeTiled\");\n}\n"),
    ("native_ffi", 3, "void f() {\n  void* h = dlopen(\"libcuda.so.1\", 2);\n  dlsym(h, \"cuCtxSetLimit\");\n}\n"),
    ("native_ffi", 4, "void f() {\n  void* h = dlopen(\"libcuda.so.1\", 2);\n  dlsym(h, \"cuTensorMapEncodeTiled\");\n"
                      "  dlsym(RTLD_NEXT, \"cudaLaunchKernel\");\n}\n"),
]


def _flagged(findings, rule: str, line: int, source: str) -> None:
    assert any(f.rule == rule and f.line == line for f in findings), describe(findings)
    hit = next(f for f in findings if f.rule == rule and f.line == line)
    assert hit.severity == RULES[rule].default_severity
    assert hit.snippet == textwrap.dedent(source).splitlines()[line - 1].rstrip()


@pytest.mark.parametrize(("rule", "line", "source"), PYTHON_ABUSES,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(PYTHON_ABUSES)])
def test_an_exemption_abused_in_python_is_flagged(rule, line, source, policy):
    _flagged(scan_py(source, policy), rule, line, source)


@pytest.mark.parametrize(("rule", "line", "source"), CPP_ABUSES,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(CPP_ABUSES)])
def test_an_exemption_abused_in_cpp_is_flagged(rule, line, source, policy):
    _flagged(scan_cpp(source, policy), rule, line, source)
