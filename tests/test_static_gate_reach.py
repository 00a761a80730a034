"""Python files no import of the solution reaches (harness/audits/static_gate/python_reach.py): a repository's tests
and benchmarks packed beside the kernel never run, so their findings block nothing; every doubt keeps a file
reachable, so nothing that can run is ever waved through."""

from __future__ import annotations

import contextlib

import pytest

from harness.audits.session_audits import SessionAudits
from harness.audits.static_gate import never_imported
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
