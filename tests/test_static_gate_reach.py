"""Python files no import of the solution reaches (harness/audits/static_gate/python_reach.py): a repository's tests
and benchmarks packed beside the kernel never run, so their findings block nothing; every doubt keeps a file
reachable, so nothing that can run is ever waved through."""

from __future__ import annotations

import contextlib

import pytest

from harness.audits.session_audits import SessionAudits
from harness.audits.static_gate import Finding, awaits_attribution, never_imported
from harness.audits.static_gate.policy import in_a_function_never_called
from harness.audits.static_gate.python_reach import never_called
from harness.data.dataset import Dataset
from harness.data.schema import Solution
from support import KV8_PS1, solution_dict

REPO = {
    "main.py": "from .pkg.ops import run\n",
    "pkg/__init__.py": "",
    "pkg/ops.py": "from . import kern\nimport math\n\ndef run(*a):\n    return kern.launch(*a)\n",
    "pkg/kern.py": "import triton\n\ndef launch(*a):\n    return None\n",
    "tests/test_ops.py": "import pytest\nimport torch\nfrom pkg.ops import run\n",
    "benchmarks/bench_ops.py": "import triton.testing\n",
    "setup.py": "from setuptools import setup\n",
    "tuning.json": "{}",
}


MAIN = "from .pkg.ops import run\n"
GUARD = "if __name__ == '__main__':\n"


@pytest.mark.parametrize("change, unreached", [
    ({}, {"tests/test_ops.py", "benchmarks/bench_ops.py", "setup.py"}),
    # imported from inside a function, relatively, absolutely through a folder on sys.path, or by a star
    ({"pkg/ops.py": "from . import kern\n\ndef f():\n    from ..tests import test_ops\n"}, {"benchmarks/bench_ops.py",
                                                                                  "setup.py"}),
    ({"pkg/kern.py": "import bench_ops\n"}, {"tests/test_ops.py", "setup.py"}),
    ({"main.py": "from .tests.test_ops import *\nfrom .pkg.ops import run\n"}, {"benchmarks/bench_ops.py", "setup.py"}),
    ({"main.py": "from .tests import *\nfrom .pkg.ops import run\n"}, {"benchmarks/bench_ops.py", "setup.py"}),
    # a name handed to a loader: in reachable text, or in a data file
    ({"pkg/kern.py": "NAMES = ['bench_ops']\n"}, {"tests/test_ops.py", "setup.py"}),
    ({"tuning.json": '{"module": "test_ops"}'}, {"benchmarks/bench_ops.py", "setup.py"}),
    # a reachable file that can load modules another way, or that does not parse: nothing is unreachable
    ({"pkg/kern.py": "import importlib\n"}, set()),
    ({"pkg/kern.py": "m = __import__(name)\n"}, set()),
    ({"pkg/kern.py": "import torch\nm = torch.hub.load(here, 'x', source='local')\n"}, set()),
    ({"pkg/kern.py": "def f(:\n"}, set()),
    # the setup's file is an entry point too; a file the interpreter runs at start is always reachable
    ({"setup.py": "def plan(*a):\n    return None\n"}, {"tests/test_ops.py", "benchmarks/bench_ops.py"}),
    ({"sitecustomize.py": "import os\n"}, {"tests/test_ops.py", "benchmarks/bench_ops.py", "setup.py"}),
    # red team round 7: a main guard's body never runs on import, so its imports and names reach nothing...
    ({"main.py": MAIN + GUARD + "    from tests.test_ops import run as check\n    check()\n"},
     {"tests/test_ops.py", "benchmarks/bench_ops.py", "setup.py"}),
    ({"main.py": MAIN + GUARD + "    import importlib\n    importlib.import_module('bench_ops')\n"},
     {"tests/test_ops.py", "benchmarks/bench_ops.py", "setup.py"}),
    # ...but its `else:` runs, and where anything could make `__name__` "__main__" the body is as any other code
    ({"main.py": MAIN + GUARD + "    pass\nelse:\n    from tests import test_ops\n"},
     {"benchmarks/bench_ops.py", "setup.py"}),
    ({"main.py": MAIN + GUARD + "    from tests import test_ops\n", "pkg/kern.py": "globals()['x'] = 1\n"},
     {"benchmarks/bench_ops.py", "setup.py"}),
    ({"main.py": MAIN + GUARD + "    from tests import test_ops\n", "pkg/kern.py": "__name__ = '__main__'\n"},
     {"benchmarks/bench_ops.py", "setup.py"}),
    # the guard's lines as the parser counts them: a form feed before it shifts nothing onto live code
    ({"main.py": "# \x0c\n" + MAIN + "import importlib\n" + GUARD + "    pass\n"}, set()),
    # pydoc's locate is a loader; "preallocated" in a docstring is not
    ({"pkg/kern.py": '"""Writes into preallocated outputs."""\n'},
     {"tests/test_ops.py", "benchmarks/bench_ops.py", "setup.py"}),
    ({"pkg/kern.py": "from pydoc import locate\n"}, set()),
])
def test_a_file_is_unreachable_only_where_no_import_and_no_loader_can_reach_it(change, unreached):
    entries = ["main.py"] + (["setup.py"] if "plan" in change.get("setup.py", "") else [])
    assert never_imported({**REPO, **change}, entries) == unreached


def test_parent_packages_run_before_their_modules():
    sources = {"main.py": "from .a.b import c\n", "a/__init__.py": "", "a/b/__init__.py": "", "a/b/c.py": "",
               "a/other.py": ""}
    assert never_imported(sources, ["main.py"]) == {"a/other.py"}


class _Gate(SessionAudits):
    def __init__(self):
        self.dataset = Dataset()

    def _phase(self, name):
        return contextlib.nullcontext()


KERNEL = "import torch\n\ndef run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output, lse):\n    pass\n"


def test_a_packed_test_files_findings_block_nothing_and_the_same_code_reached_still_does():
    """Red team round 4: `import pytest` and a PyTorch reference in tests/ made an honest solution unpromotable."""
    test_file = "import pytest\nimport torch\n\ndef test_it():\n    torch.testing.assert_close(torch.einsum('ij->i', x), y)\n"
    gate, definition = _Gate(), Dataset().definition(KV8_PS1)
    packed = Solution.model_validate(solution_dict(KERNEL, entry="main.py::run",
                                                   extra_sources={"tests/test_main.py": test_file}))
    findings = gate._static_gate(packed, definition)
    in_test = [f for f in findings if f["path"] == "tests/test_main.py"]
    assert in_test and all(f["severity"] == "warning" and "never imports" in f["message"] for f in in_test), in_test
    assert not any(f["severity"] == "error" for f in findings)
    reached = Solution.model_validate(solution_dict("from .tests import test_main\n" + KERNEL, entry="main.py::run",
                                                    extra_sources={"tests/test_main.py": test_file}))
    assert any(f["severity"] == "error" and f["path"] == "tests/test_main.py" for f in gate._static_gate(reached,
                                                                                                      definition))


def test_the_python_files_of_a_cuda_solution_never_run_and_block_nothing():
    """Real contestants' code: a TVM-FFI kernel.cu beside the starter kit's binding.py, filled in for local tests with
    ctypes (`ctypes.CDLL("./kernel.so")`): the native build compiles the .cu and imports no Python file."""
    cu = ("#include <tvm/ffi/function.h>\nvoid kernel(tvm::ffi::TensorView x) {}\n"
          "TVM_FFI_DLL_EXPORT_TYPED_FUNC(kernel, kernel);\n")
    binding = "import ctypes\nlib = ctypes.CDLL('./kernel.so')\nlib.kernel(ctypes.c_void_p(0))\n"
    native = Solution.model_validate(solution_dict(cu, entry="kernel.cu::kernel", language="cuda",
                                                   extra_sources={"binding.py": binding}))
    findings = _Gate()._static_gate(native, Dataset().definition(KV8_PS1))
    ffi = [f for f in findings if f["path"] == "binding.py"]
    assert ffi and all(f["severity"] == "warning" and "never imports" in f["message"] for f in ffi), ffi
    # ...unless an #include compiles it (red team): then it is C++ whatever its suffix, and scanned as such
    evil = '#include <cstdlib>\nstatic const char* probe() { return std::getenv("PYTEST_CURRENT_TEST"); }\n'
    for name in ("helper.py", "notes.txt"):
        hidden = Solution.model_validate(solution_dict(f'#include "{name}"\n' + cu, entry="kernel.cu::kernel",
                                                       language="cuda", extra_sources={name: evil}))
        found = _Gate()._static_gate(hidden, Dataset().definition(KV8_PS1))
        assert any(f["severity"] == "error" and f["rule"] == "env_probe" and f["path"] == name for f in found), found
    python = Solution.model_validate(solution_dict(binding + "def run(*a):\n    pass\n", entry="binding.py::run",
                                                   language="python"))
    assert any(f["severity"] == "error" and f["rule"] == "native_ffi" for f in _Gate()._static_gate(
        python, Dataset().definition(KV8_PS1)))


def test_a_self_test_module_imported_only_by_the_main_guard_blocks_nothing():
    """Red team round 7 (s13): `if __name__ == "__main__": from selftest import check` made the self-test's PyTorch
    reference unconfirmed torch compute, which kept an honest solution from promotion on CPU."""
    selftest = "import torch\n\ndef check(run):\n    torch.testing.assert_close(torch.einsum('ij->i', x), y)\n"
    gate, definition = _Gate(), Dataset().definition(KV8_PS1)
    packed = Solution.model_validate(solution_dict(KERNEL + GUARD + "    from selftest import check\n    check(run)\n",
                                                   entry="main.py::run", extra_sources={"selftest.py": selftest}))
    findings = gate._static_gate(packed, definition)
    in_selftest = [f for f in findings if f["path"] == "selftest.py"]
    assert in_selftest and all("never imports" in f["message"] for f in in_selftest), in_selftest


@pytest.mark.parametrize("init, main_tail", [
    # red team round 5: a computed `__all__` and a star import of the root package loaded a file named nowhere
    ('__all__ = ["".join(reversed("kcah"))]\n', "from . import *\n"),
    ('__all__ = []\n__all__.append("kcah"[::-1])\n', "from . import *\n"),
    ("", 'import pydoc\npydoc.locate(__package__ + "." + "kcah"[::-1])\n'),
    ("", 'import logging.config as lc\nlc.dictConfig({"version": 1, "handlers": {"h": {"()": name}}})\n'),
    ("", "import unittest\nunittest.defaultTestLoader.loadTestsFromName(name)\n"),
])
def test_loaders_by_name_and_computed_star_imports_make_every_file_reachable(init, main_tail):
    sources = {"__init__.py": init, "main.py": "def run(*a):\n    pass\n" + main_tail, "hack.py": "import torch\n"}
    assert never_imported(sources, ["main.py"]) == set()


def test_reading_all_is_fla_s_lazy_api_and_changes_nothing():
    init = ('__all__ = ["run"]\n\ndef __getattr__(name):\n    if name in __all__:\n        from . import ops\n'
            '        return getattr(ops, name)\n    raise AttributeError(name)\n')
    sources = {"pkg/__init__.py": init, "pkg/ops.py": "", "main.py": "from .pkg import run\n",
               "tests/test_pkg.py": ""}
    assert never_imported(sources, ["main.py"]) == {"tests/test_pkg.py"}


def test_a_star_import_reaches_the_whole_package_and_nothing_outside_it():
    sources = {"pkg/__init__.py": '__all__ = ["ops"]\n', "pkg/ops.py": "", "pkg/extra.py": "",
               "main.py": "from .pkg import *\n", "bench.py": ""}
    assert never_imported(sources, ["main.py"]) == {"bench.py"}


# A self-test in the module: run (the entry point), a PyTorch reference on lines 8-9 and a checker on lines 12-13 that
# only the main guard calls.
SELF_TEST = ("import torch\n\n\ndef run(q):\n    return q\n\n\ndef _reference(q):\n    return torch.einsum('i->', q)\n"
             "\n\ndef _check():\n    assert run(1) == _reference(1)\n\n\nif __name__ == '__main__':\n    _check()\n")


@pytest.mark.parametrize("change, entries, spans", [
    # red team round 7 (s07): the reference and the checker only the main guard reaches never run on import
    ({}, ["main.py::run"], {"main.py": [(9, 9), (13, 13)]}),
    ({"main.py": SELF_TEST + "\n\ndef _a():\n    return _b()\n\n\ndef _b():\n    return _a()\n"}, ["main.py::run"],
     {"main.py": [(9, 9), (13, 13), (21, 21), (25, 25)]}),  # two functions only each other names: dead too
    # the harness calls the entry point (and the setup) by name: `_check` as the entry keeps both alive
    ({}, ["main.py::_check"], {}),
    # named anywhere else: by live code, a default, a string, another file, a fullwidth spelling Python folds
    ({"main.py": SELF_TEST.replace("    return q\n", "    return _reference(q)\n")}, ["main.py::run"],
     {"main.py": [(13, 13)]}),
    ({"main.py": SELF_TEST.replace("def run(q):", "def run(q, f=_check):")}, ["main.py::run"], {}),
    ({"main.py": SELF_TEST + "__all__ = ['run', '_check']\n"}, ["main.py::run"], {}),
    ({"bench.py": "from main import _check\n"}, ["main.py::run"], {}),
    ({"main.py": SELF_TEST.replace("    return q\n", "    return _\uff52\uff45\uff46\uff45\uff52\uff45\uff4e\uff43\uff45(q)\n")},
     ["main.py::run"], {"main.py": [(13, 13)]}),
    # a decorator runs at the definition and may hand the function on; a dunder is called by Python itself
    ({"main.py": SELF_TEST.replace("def _check", "@register\ndef _check")}, ["main.py::run"], {}),
    ({"main.py": SELF_TEST.replace("_check", "__getattr__")}, ["main.py::run"], {}),
    # where a main guard may run, or names may be listed and looked up unwritten, every function may run
    ({"main.py": SELF_TEST + "globals()['x'] = 1\n"}, ["main.py::run"], {}),
    ({"main.py": SELF_TEST + "NAMES = dir()\n"}, ["main.py::run"], {}),
    ({"k.cpp": "PyObject* f(PyObject* m, PyObject* n) { return PyObject_GetAttr(m, n); }\n"}, ["main.py::run"], {}),
])
def test_a_function_never_runs_only_where_nothing_but_a_main_guard_names_it(change, entries, spans):
    assert never_called({"main.py": SELF_TEST, **change}, entries) == spans


def test_a_finding_in_a_never_called_function_blocks_nothing_and_awaits_nothing():
    def finding(line: int, rule: str = "torch_compute", severity: str = "warning") -> Finding:
        return Finding(rule=rule, severity=severity, path="main.py", line=line, col=5, message="m", snippet="s")

    spans = never_called({"main.py": SELF_TEST}, ["main.py::run"])
    inside, error, outside = (in_a_function_never_called(finding(9), spans),
                              in_a_function_never_called(finding(13, "clock_read", "error"), spans),
                              in_a_function_never_called(finding(5), spans))
    assert not awaits_attribution(inside) and "__main__" in inside.message
    assert error.severity == "warning"
    assert outside == finding(5) and awaits_attribution(outside)
